"""Restore-time estimates from the restores a job measured, and state-access latency recorded
with its checkpoints (CLI, SQL)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from statecore.catalog import Catalog
from statecore.checkpoint.points import checkpoint_point
from statecore.cli import main
from statecore.config import StatecoreConfig
from statecore.descriptors import ListStateDescriptor, ValueStateDescriptor
from statecore.errors import ConfigError
from statecore.ops.estimate import DEFAULT_BYTES_PER_SECOND, estimate_restore, fit
from statecore.query import run_sql
from statecore.runtime import Context, KeyedProcessFunction, RuntimeContext
from statecore.runtime.latency import LatencyTracking
from tests.inprocess import run_checkpoint
from tests.ops.statebuilder import catalog_snapshot

JOB = "orders"


class Orders(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total", int))
        self.items = ctx.get_list_state(ListStateDescriptor("items", str))

    def process_element(self, value: Any, ctx: Context) -> list[Any]:
        self.total.update((self.total.value() or 0) + 1)
        self.items.add(value)
        return []


def records(n: int) -> list[tuple[str, str]]:
    return [(f"customer-{i % 3000}", f"sku-{i}") for i in range(n)]


@pytest.fixture
def config(tmp_path: Path) -> StatecoreConfig:
    """Checkpoint 1 at parallelism 1 (nothing to restore), then restores at 2 and 4."""
    config = StatecoreConfig.resolve(home=str(tmp_path / "home"), env={})
    run_checkpoint(config, Orders(), records(20_000), job=JOB, checkpoint_id=1, parallelism=1)
    for checkpoint_id, p in ((2, 2), (3, 4)):
        run_checkpoint(
            config,
            Orders(),
            records(200),
            job=JOB,
            checkpoint_id=checkpoint_id,
            parallelism=p,
            latency=LatencyTracking(sample_interval=10),
        )
    return config


def test_estimate_from_measured_restores_per_subtask_and_slowest(config: StatecoreConfig) -> None:
    with Catalog.connect(config.catalog_url) as catalog:
        restores = catalog.get_checkpoint(JOB, 3).metrics["restore"]
        assert [r["subtask"] for r in restores] == [0, 1, 2, 3]
        assert all(r["bytes"] > 0 and r["seconds"] > 0 for r in restores)
        point = checkpoint_point(catalog, JOB)
        estimate = estimate_restore(catalog, point, 3)
        wide = estimate_restore(catalog, point, 1)
    assert estimate.model.samples == 6  # 2 + 4 subtasks restored something
    assert [s.key_groups for s in estimate.subtasks] == ["0..42", "43..85", "86..127"]
    assert sum(s.bytes for s in estimate.subtasks) == wide.subtasks[0].bytes == point.total_bytes
    assert wide.subtasks[0].estimated_seconds > estimate.slowest.estimated_seconds > 0
    assert "measured subtask restore" in estimate.summary()
    with Catalog.connect(config.catalog_url) as catalog:
        with pytest.raises(ConfigError, match="parallelism 200"):
            estimate_restore(catalog, checkpoint_point(catalog, JOB), 200)


def test_estimate_model_fit() -> None:
    model = fit([(1_000_000, 0.2), (2_000_000, 0.3), (4_000_000, 0.5)])
    assert model.fixed_seconds == pytest.approx(0.1)
    assert model.bytes_per_second == pytest.approx(10_000_000)
    assert fit([]).bytes_per_second == DEFAULT_BYTES_PER_SECOND
    assert fit([(1000, 0.5), (1000, 0.7)]).fixed_seconds == 0  # one size: a ratio


def test_estimate_on_the_command_line_changes_nothing(
    config: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    before = catalog_snapshot(config)
    args = ["--home", config.home, "rescale", JOB, "--parallelism", "8", "--dry-run"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "slowest subtask" in out and "112..127" in out
    assert main([*args, "--format", "json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
    assert len(rows) == 8 and sum(r["slowest"] for r in rows) == 1
    assert catalog_snapshot(config) == before  # a dry run
    assert main(["--home", config.home, "check", JOB, "--against", "3", "--parallelism", "2"]) == 0
    assert "slowest subtask" in capsys.readouterr().out


def test_latency_recorded_with_the_checkpoint_shown_and_in_sql(
    config: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    with Catalog.connect(config.catalog_url) as catalog:
        latency = catalog.get_checkpoint(JOB, 3).metrics["latency"]
        assert set(latency) == {"total", "items"}
        assert set(latency["total"]) == {"value", "update"}
        # every 10th record of each of the 4 tasks: 200 records give 20 to 24 samples
        assert 20 <= latency["items"]["add"]["samples"] <= 24
        assert "latency" not in catalog.get_checkpoint(JOB, 1).metrics  # tracking was off
        rows = run_sql(
            catalog,
            "SELECT state, access, samples, p99_us >= p50_us AS ordered FROM "
            "statecore.state_latency WHERE checkpoint_id = 3 ORDER BY state, access",
        ).to_pylist()
    assert rows[0]["state"] == "items" and rows[0]["access"] == "add" and rows[0]["ordered"]
    assert main(["--home", config.home, "checkpoints", "show", JOB, "3", "--latency"]) == 0
    out = capsys.readouterr().out
    assert "p99_us" in out and "update" in out
    assert main(["--home", config.home, "checkpoints", "show", JOB, "1", "--latency"]) == 0
    assert "no state latency recorded" in capsys.readouterr().out
