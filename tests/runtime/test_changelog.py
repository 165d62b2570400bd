"""Changelog checkpoints in-process: change files and materialization over many checkpoints,
compared with a run that rewrites whole key groups (the real coordinator, catalog and Delta)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from statecore.backends import HeapKeyedStateBackend, RocksDBKeyedStateBackend
from statecore.backends.base import KeyedStateBackend
from statecore.catalog import Catalog
from statecore.checkpoint.coordinator import CheckpointCoordinator
from statecore.checkpoint.recover import recover_catalog
from statecore.config import StatecoreConfig
from statecore.descriptors import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from statecore.keygroups import KeyGroupRange
from statecore.runtime import Context, KeyedProcessFunction, RuntimeContext
from statecore.snapshot.changelog import ChangelogConfig
from statecore.ttl import ManualTimeProvider, StateTtlConfig
from statecore.types import TypeInfo
from tests.inprocess import MAX_P, run_checkpoint

KEYS = [f"user-{i}" for i in range(150)]


class Mixed(KeyedProcessFunction):
    """A running total (value), counts per page (map), the last pages (list, with a TTL);
    ``None`` clears the key. Emits what it sees, so two runs compare record by record."""

    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total", int, default=0))
        self.pages = ctx.get_map_state(MapStateDescriptor("pages", str, int))
        self.recent = ctx.get_list_state(
            ListStateDescriptor("recent", str, ttl=StateTtlConfig(ttl=timedelta(seconds=30)))
        )

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        seen = (self.total.value(), dict(self.pages.items()), self.recent.get())
        if value is None:
            self.total.clear()
            self.pages.clear()
            self.recent.clear()
        else:
            page, n = value
            self.total.update(self.total.value() + n)
            self.pages.put(page, (self.pages.get(page) or 0) + 1)
            self.recent.add(page)
        yield (ctx.current_key, *seen)


def batches(seed: int, count: int, size: int) -> list[list[tuple[str, Any]]]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        batch: list[tuple[str, Any]] = []
        for _ in range(size):
            key = rng.choice(KEYS)
            batch.append(
                (key, None if rng.random() < 0.1 else (rng.choice("abc"), rng.randint(1, 9)))
            )
        out.append(batch)
    return out


def restored_state(config: StatecoreConfig, job: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every keyed state's rows, as a restore reads them (materialized + pending changes)."""
    with Catalog.connect(config.catalog_url) as catalog:
        coordinator = CheckpointCoordinator(config, catalog, job=job, operator="main")
        plan = coordinator._restore_plan(catalog.latest_checkpoint(job))
    backend = HeapKeyedStateBackend(
        key_type=TypeInfo.of(str),
        key_group_range=KeyGroupRange(0, MAX_P - 1),
        max_parallelism=MAX_P,
        restore_source=plan.source(range(MAX_P), TypeInfo.of(str)),
        ttl_time_provider=ManualTimeProvider(0),
    )
    function = Mixed()
    function.open(RuntimeContext(backend, job=job, operator="main", subtask_index=0, parallelism=1))
    out = {}
    for name in backend.descriptors:
        rows = []
        for kg in range(MAX_P):
            rows += [
                tuple(sorted(r.items())) for r in backend.snapshot_key_group(name, kg).to_pylist()
            ]
        out[name] = sorted(rows, key=repr)
    backend.close()
    return out


@pytest.mark.parametrize("backend_class", [HeapKeyedStateBackend, RocksDBKeyedStateBackend])
def test_changelog_restore_equals_a_run_without_changelog(
    tmp_path: Any, backend_class: type[KeyedStateBackend]
) -> None:
    """Seven checkpoints with deletes and TTL: the changelog run (change files, key groups
    materialized every 3rd change) sees and restores exactly what the whole-key-group run does."""
    plain = StatecoreConfig.resolve(env={"STATECORE_HOME": str(tmp_path / "plain")})
    logged = StatecoreConfig.resolve(env={"STATECORE_HOME": str(tmp_path / "logged")})
    clock_a, clock_b = ManualTimeProvider(0), ManualTimeProvider(0)
    config = ChangelogConfig(materialize_every=3, max_change_ratio=10.0)
    kinds: set[str] = set()
    for i, batch in enumerate(batches(7, 7, 40), start=1):
        clock_a.advance(7_000)
        clock_b.advance(7_000)
        a, _ = run_checkpoint(
            plain,
            Mixed(),
            batch,
            job="j",
            checkpoint_id=i,
            clock=clock_a,
            backend_class=backend_class,
        )
        b, record = run_checkpoint(
            logged,
            Mixed(),
            batch,
            job="j",
            checkpoint_id=i,
            clock=clock_b,
            changelog=config,
            backend_class=backend_class,
        )
        assert sorted(a, key=repr) == sorted(b, key=repr), f"checkpoint {i}"
        kinds |= {t.table_kind for t in record.tables}
    assert "changes" in kinds
    assert restored_state(plain, "j") == restored_state(logged, "j")


def test_changelog_lost_catalog_is_recovered_with_its_changes_tables(tmp_path: Any) -> None:
    """The changes tables' commits name their checkpoints like every statecore commit: a lost
    catalog comes back from the Delta logs with both tables, and the state reads the same."""
    config = StatecoreConfig.resolve(env={"STATECORE_HOME": str(tmp_path / "home")})
    pending = ChangelogConfig(materialize_every=100, max_change_ratio=100.0)
    for i, batch in enumerate(batches(11, 3, 40), start=1):
        run_checkpoint(
            config,
            Mixed(),
            batch,
            job="j",
            checkpoint_id=i,
            changelog=pending,
            clock=ManualTimeProvider(0),
        )
    with Catalog.connect(config.catalog_url) as catalog:
        before = catalog.latest_checkpoint("j")
        states = [(s.name, s.schema) for s in catalog.list_states("j")]
    expected = restored_state(config, "j")
    Path(config.catalog_url.removeprefix("sqlite:///")).unlink()
    with Catalog.connect(config.catalog_url) as catalog:
        recover_catalog(config, catalog, "j")
        after = catalog.latest_checkpoint("j")
        assert [(s.name, s.schema) for s in catalog.list_states("j")] == states
    assert sorted((t.table_kind, t.state, t.version) for t in after.tables) == sorted(
        (t.table_kind, t.state, t.version) for t in before.tables
    )
    assert any(t.table_kind == "changes" and t.rows for t in after.tables)
    assert restored_state(config, "j") == expected


def test_changelog_turned_off_and_on_again_loses_nothing(tmp_path: Any) -> None:
    """Changelog on, then off (touched key groups are written whole and their pending changes
    dropped; the others keep theirs), then on again: the same state as never on."""
    plain = StatecoreConfig.resolve(env={"STATECORE_HOME": str(tmp_path / "plain")})
    mixed = StatecoreConfig.resolve(env={"STATECORE_HOME": str(tmp_path / "mixed")})
    pending = ChangelogConfig(materialize_every=100, max_change_ratio=100.0)
    modes = [pending, pending, None, None, pending]
    for i, (batch, mode) in enumerate(zip(batches(13, 5, 30), modes), start=1):
        clock = ManualTimeProvider(0)
        a, _ = run_checkpoint(plain, Mixed(), batch, job="j", checkpoint_id=i, clock=clock)
        b, record = run_checkpoint(
            mixed, Mixed(), batch, job="j", checkpoint_id=i, clock=clock, changelog=mode
        )
        assert sorted(a, key=repr) == sorted(b, key=repr), f"checkpoint {i}"
        if i == 4:  # off: pending changes of untouched key groups are still there
            assert any(t.table_kind == "changes" and t.rows for t in record.tables)
    assert restored_state(plain, "j") == restored_state(mixed, "j")
