"""Point lookups: one key's value at a checkpoint or savepoint, reading only its key group."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from statecore.catalog import Catalog
from statecore.cli import main
from statecore.config import StatecoreConfig
from statecore.errors import (
    CheckpointNotFoundError,
    ConfigError,
    KeyTypeError,
    UnknownStateError,
)
from statecore.keygroups import assign_to_key_group
from statecore.ops.savepoint import take_savepoint
from statecore.query import lookup
from statecore.ttl.time import ManualTimeProvider
from tests.inprocess import MAX_P, run_checkpoint
from tests.ops.shopstate import Shop

JOB = "shop"
HOUR_MS = 3_600_000


@pytest.fixture
def shop(tmp_path: Path) -> tuple[StatecoreConfig, ManualTimeProvider]:
    """Checkpoint 1: 200 users; checkpoint 2 (two hours later): user u1 buys again."""
    config = StatecoreConfig.resolve(home=str(tmp_path / "home"), env={})
    clock = ManualTimeProvider(10 * HOUR_MS)
    records = [(f"u{i}", f"item{i % 3}") for i in range(200)] + [("u1", "pen")]
    run_checkpoint(
        config, Shop(ttl=timedelta(hours=1)), records, job=JOB, checkpoint_id=1, clock=clock
    )
    clock.advance(2 * HOUR_MS)
    run_checkpoint(
        config, Shop(ttl=timedelta(hours=1)), [("u1", "ink")], job=JOB, checkpoint_id=2, clock=clock
    )
    return config, clock


def test_lookup_every_kind_of_state_reads_only_the_key_group(shop: Any) -> None:
    config, clock = shop
    at = clock.current_timestamp()
    got = lookup(JOB, "items", "u1", config=config, now_ms=at)
    assert got.found and got.value == ["item1", "pen", "ink"]
    assert got.key_group == assign_to_key_group("u1", MAX_P)
    assert got.files_read == 1 and got.bytes_read < got.state_bytes / 20
    assert lookup(JOB, "counts", "u1", config=config, now_ms=at).value == {
        "item1": 1,
        "pen": 1,
        "ink": 1,
    }
    assert lookup(JOB, "counts", "u1", user_key="pen", config=config, now_ms=at).value == {"pen": 1}
    assert lookup(JOB, "total", "u1", config=config, now_ms=at).value == 3
    assert lookup(JOB, "last", "u1", config=config, now_ms=at).value == "ink"
    missing = lookup(JOB, "total", "nobody", config=config, now_ms=at)
    assert not missing.found and missing.value is None


def test_lookup_respects_ttl_visibility_and_time_travels(shop: Any) -> None:
    config, clock = shop
    at = clock.current_timestamp()
    stale = lookup(JOB, "last", "u2", config=config, now_ms=at)  # written two hours ago
    assert not stale.found and stale.expired == 1
    old = lookup(JOB, "last", "u2", checkpoint=1, config=config, now_ms=at - 2 * HOUR_MS)
    assert old.found and old.value == "item2" and old.point == f"checkpoint 1 of job {JOB!r}"
    assert lookup(JOB, "items", "u1", checkpoint=1, config=config).value == ["item1", "pen"]


def test_lookup_at_a_savepoint_and_on_the_command_line(
    shop: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    config, _ = shop
    with Catalog.connect(config.catalog_url) as catalog:
        take_savepoint(config, catalog, JOB, name="before-sale")
    assert lookup(JOB, "total", "u1", savepoint="before-sale", config=config).value == 3
    code = main(["--home", config.home, "state", "get", JOB, "counts", "u1", "--format", "json"])
    assert code == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown[0]["found"] is True and shown[0]["value"] == {"item1": 1, "pen": 1, "ink": 1}


def test_lookup_bad_input_is_a_clear_error(shop: Any) -> None:
    config, _ = shop
    with pytest.raises(UnknownStateError, match="no keyed state 'nope'"):
        lookup(JOB, "nope", "u1", config=config)
    with pytest.raises(KeyTypeError, match="key type"):
        lookup(JOB, "total", 7, config=config)
    with pytest.raises(CheckpointNotFoundError):
        lookup(JOB, "total", "u1", checkpoint=99, config=config)
    with pytest.raises(ConfigError, match="live lookup reads the running"):
        lookup(JOB, "total", "u1", checkpoint=1, live=True, config=config)


def test_latent_live_lookups_share_public_helpers_with_checkpoint_lookups() -> None:
    """The live client and the checkpoint lookup build their results through one public
    module: neither reaches into the other's private names (a hidden import cycle)."""
    import ast

    import statecore.query.live as live_module

    tree = ast.parse(Path(live_module.__file__).read_text())
    imported = [
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("statecore")
        for alias in node.names
    ]
    assert not [(m, n) for m, n in imported if n.startswith("_")], imported
    assert "statecore.query.lookup" not in {m for m, _ in imported}
