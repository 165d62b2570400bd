"""Local state reuse: a task reopens its RocksDB directory only when it is exactly the checkpoint
being restored; otherwise it restores from the snapshot. Checkpoints here are kept in memory
(the Spark tests use the real Delta tables and catalog)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from statecore.backends.base import RestoreSource
from statecore.backends.rocksdb import RocksDBKeyedStateBackend, RocksDBOptions
from statecore.backends.rocksdb.local import MANIFEST_NAME
from statecore.backends.scope import TaskScope
from statecore.descriptors import MapStateDescriptor, StateDescriptor, ValueStateDescriptor
from statecore.keygroups import KeyGroupRange, assign_to_key_group
from statecore.ttl import StateTtlConfig
from statecore.types import TypeInfo

TOTAL = ValueStateDescriptor("total", int, default=0)
SEEN = MapStateDescriptor("seen", str, int)
KEYS = [f"user-{i}" for i in range(300)]
ALL = KeyGroupRange(0, 127)
LOW, HIGH = KeyGroupRange(0, 63), KeyGroupRange(64, 127)

Files = dict[str, dict[int, tuple[str, ...]]]


@dataclass
class Checkpoints:
    """Completed checkpoints: per state and key group, the files; and every file's rows."""

    root: Path
    completed: dict[int, Files] = field(default_factory=dict)
    rows: dict[str, pa.Table] = field(default_factory=dict)
    _names: Iterator[int] = field(default_factory=itertools.count)

    def files(self, checkpoint_id: int | None, key_groups: Collection[int]) -> Files:
        if checkpoint_id is None:
            return {}
        return {
            s: {kg: p for kg, p in by_kg.items() if kg in key_groups}
            for s, by_kg in self.completed[checkpoint_id].items()
        }

    def source_for(self, checkpoint_id: int | None) -> Callable[[Collection[int]], RestoreSource]:
        def source_for(key_groups: Collection[int]) -> RestoreSource:
            def source(descriptor: StateDescriptor) -> Iterator[tuple[int, pa.Table]]:
                files = self.files(checkpoint_id, key_groups).get(descriptor.name, {})
                for kg in sorted(files):
                    for path in files[kg]:
                        yield kg, self.rows[path]

            return source

        return source_for

    def open(
        self, key_groups: KeyGroupRange, *, checkpoint_id: int, restore_from: int | None
    ) -> RocksDBKeyedStateBackend:
        source_for = self.source_for(restore_from)
        scope = TaskScope(
            job="job",
            operator="op",
            subtask_index=0,
            checkpoint_id=checkpoint_id,
            home=str(self.root),
            restored_checkpoint_id=restore_from,
            restored_files=self.files(restore_from, key_groups),
            restore_source_for=source_for,
        )
        return RocksDBKeyedStateBackend(
            key_type=TypeInfo.of(str),
            key_group_range=key_groups,
            max_parallelism=128,
            restore_source=source_for(key_groups),
            options=RocksDBOptions(local_directory=str(self.root / "local")),
            scope=scope,
        )

    def snapshot(self, backend: RocksDBKeyedStateBackend, checkpoint_id: int) -> Files:
        """What a task does: write the changed key groups, tell the backend."""
        written: Files = {}
        for name in backend.descriptors:
            written[name] = {}
            for kg in sorted(backend.changed_key_groups(name)):
                rows = backend.snapshot_key_group(name, kg)
                paths: tuple[str, ...] = ()
                if rows.num_rows:
                    path = f"{name}/key_group={kg}/cp-{checkpoint_id}-{next(self._names)}.parquet"
                    self.rows[path] = rows
                    paths = (path,)
                written[name][kg] = paths
        backend.mark_snapshotted()
        backend.on_snapshot_written(checkpoint_id, written)
        return written

    def complete(self, checkpoint_id: int, base: int | None, *written: Files) -> None:
        """What the driver does: the base checkpoint's files, changed key groups replaced."""
        files: Files = {
            s: dict(by_kg)
            for s, by_kg in (self.completed.get(base, {}) if base is not None else {}).items()
        }
        for part in written:
            for state, by_kg in part.items():
                target = files.setdefault(state, {})
                for kg, paths in by_kg.items():
                    if paths:
                        target[kg] = paths
                    else:
                        target.pop(kg, None)
        self.completed[checkpoint_id] = files


def process(
    backend: RocksDBKeyedStateBackend,
    keys: list[str],
    amount: int,
    states: tuple[StateDescriptor, ...] = (TOTAL, SEEN),
) -> None:
    handles: list[Any] = [backend.get_partitioned_state(d) for d in states]
    for key in keys:
        if assign_to_key_group(key, 128) not in backend.key_group_range:
            continue
        backend.set_current_key(key)
        for state in handles:
            if hasattr(state, "value"):
                state.update(state.value() + amount)
            else:
                state.put(str(amount), amount)


def contents(
    backend: RocksDBKeyedStateBackend, states: tuple[StateDescriptor, ...] = (TOTAL, SEEN)
) -> dict[str, list[Any]]:
    for d in states:
        backend.get_partitioned_state(d)
    return {
        d.name: sorted(
            (
                row
                for kg in backend.key_group_range
                for row in backend.snapshot_key_group(d.name, kg).to_pylist()
            ),
            key=repr,
        )
        for d in states
    }


def run(
    cps: Checkpoints,
    key_groups: KeyGroupRange,
    checkpoint_id: int,
    restore_from: int | None,
    amount: int,
    *,
    commit: bool = True,
) -> dict[str, int]:
    backend = cps.open(key_groups, checkpoint_id=checkpoint_id, restore_from=restore_from)
    try:
        process(backend, KEYS, amount)
        written = cps.snapshot(backend, checkpoint_id)
        metrics = backend.restore_metrics()
    finally:
        backend.close()
    if commit:
        cps.complete(checkpoint_id, restore_from, written)
    return metrics


def expected(amounts: list[int], key_groups: KeyGroupRange = ALL) -> dict[str, list[Any]]:
    """What a cold restore of the same checkpoints holds."""
    keys = [k for k in KEYS if assign_to_key_group(k, 128) in key_groups]
    total = [{"key": k, "namespace": "", "value": sum(amounts)} for k in keys]
    seen = [
        {"key": k, "namespace": "", "user_key": str(a), "value": a}
        for k in keys
        for a in sorted(set(amounts))
    ]
    return {"total": sorted(total, key=repr), "seen": sorted(seen, key=repr)}


def read(cps: Checkpoints, key_groups: KeyGroupRange, checkpoint_id: int) -> dict[str, list[Any]]:
    backend = cps.open(key_groups, checkpoint_id=checkpoint_id + 1000, restore_from=checkpoint_id)
    try:
        return contents(backend)
    finally:
        backend.close()


@pytest.fixture
def cps(tmp_path: Path) -> Checkpoints:
    return Checkpoints(tmp_path)


def test_second_run_reopens_the_local_instance(cps: Checkpoints) -> None:
    first = run(cps, ALL, 1, None, 1)
    assert first["reused_key_groups"] == 0 and first["ingested_rows"] == 0
    second = run(cps, ALL, 2, 1, 2)
    assert second["reused_key_groups"] == 128
    assert second["ingested_rows"] == 0
    manifest = cps.root / "local" / "job" / "op" / "kg-0-127" / MANIFEST_NAME
    assert '"checkpoint_id": 2' in manifest.read_text()
    assert read(cps, ALL, 2) == expected([1, 2])


def test_reused_and_cold_restores_hold_the_same_state(cps: Checkpoints, tmp_path: Path) -> None:
    run(cps, ALL, 1, None, 1)
    warm = cps.open(ALL, checkpoint_id=2, restore_from=1)
    try:
        assert warm.restore_metrics()["reused_key_groups"] == 128
        warm_contents = contents(warm)
    finally:
        warm.close()
    cold_cps = Checkpoints(tmp_path / "elsewhere", cps.completed, cps.rows)
    cold = cold_cps.open(ALL, checkpoint_id=2, restore_from=1)
    try:
        assert cold.restore_metrics()["reused_key_groups"] == 0
        assert warm_contents == contents(cold) == expected([1])
        assert cold.restore_metrics()["ingested_rows"] == len(KEYS) * 2
    finally:
        cold.close()


def test_never_reuses_a_checkpoint_that_did_not_complete(cps: Checkpoints) -> None:
    run(cps, ALL, 1, None, 1)
    run(cps, ALL, 2, 1, 2, commit=False)  # the task wrote its manifest; the commit failed
    retry = run(cps, ALL, 2, 1, 3)  # the retry restores checkpoint 1 again
    assert retry["reused_key_groups"] == 0
    assert retry["ingested_rows"] == len(KEYS) * 2
    assert read(cps, ALL, 2) == expected([1, 3])


def test_never_reuses_other_files_of_the_same_checkpoint_id(cps: Checkpoints) -> None:
    run(cps, ALL, 1, None, 1)
    replaced = {
        s: {kg: tuple(f"other/{p}" for p in paths) for kg, paths in by_kg.items()}
        for s, by_kg in cps.completed[1].items()
    }
    for s, by_kg in replaced.items():
        for kg, paths in by_kg.items():
            for old, new in zip(cps.completed[1][s][kg], paths):
                cps.rows[new] = cps.rows[old]
    cps.completed[1] = replaced  # e.g. another attempt's files were committed
    assert run(cps, ALL, 2, 1, 2)["reused_key_groups"] == 0


def test_writes_after_the_snapshot_or_a_crash_leave_nothing_to_reuse(cps: Checkpoints) -> None:
    run(cps, ALL, 1, None, 1)
    backend = cps.open(ALL, checkpoint_id=2, restore_from=1)
    process(backend, KEYS[:5], 7)
    cps.snapshot(backend, 2)
    process(backend, KEYS[:5], 7)  # a write the snapshot does not contain
    backend.close()
    assert not list((cps.root / "local").rglob(MANIFEST_NAME))
    crashed = cps.open(ALL, checkpoint_id=2, restore_from=1)
    assert crashed.restore_metrics()["reused_key_groups"] == 0
    process(crashed, KEYS, 5)
    crashed.close()  # no snapshot: as if the task failed
    assert run(cps, ALL, 2, 1, 2)["reused_key_groups"] == 0
    assert read(cps, ALL, 2) == expected([1, 2])


def test_a_state_not_registered_in_a_run_is_restored_when_it_is(cps: Checkpoints) -> None:
    run(cps, ALL, 1, None, 1)
    backend = cps.open(ALL, checkpoint_id=2, restore_from=1)  # cold: another directory
    backend.close()
    (cps.root / "local" / "job" / "op" / "kg-0-127" / MANIFEST_NAME).unlink(missing_ok=True)
    backend = cps.open(ALL, checkpoint_id=2, restore_from=1)
    process(backend, KEYS, 2, states=(TOTAL,))  # "seen" is never registered in this run
    written = cps.snapshot(backend, 2)
    backend.close()
    cps.complete(2, 1, written)
    third = cps.open(ALL, checkpoint_id=3, restore_from=2)
    try:
        assert third.restore_metrics()["reused_key_groups"] == 128
        assert contents(third)["seen"] == expected([1])["seen"]
        assert third.restore_metrics()["ingested_rows"] == len(KEYS)  # only "seen"
    finally:
        third.close()


def test_scale_out_clips_the_reused_instance(cps: Checkpoints) -> None:
    run(cps, ALL, 1, None, 1)
    low = run(cps, LOW, 2, 1, 2, commit=False)
    assert low["reused_key_groups"] == 64 and low["clipped_key_groups"] == 64
    assert low["ingested_rows"] == 0
    high = run(cps, HIGH, 2, 1, 2, commit=False)  # the instance was taken: restore from files
    assert high["reused_key_groups"] == 0 and high["ingested_rows"] > 0
    backend = cps.open(LOW, checkpoint_id=9, restore_from=1)
    try:
        assert backend.restore_metrics()["reused_key_groups"] == 0  # checkpoint 2 never completed
        assert contents(backend) == expected([1], LOW)
    finally:
        backend.close()


def test_scale_in_reuses_one_instance_and_ingests_the_rest(cps: Checkpoints) -> None:
    written = []
    for key_groups in (LOW, HIGH):
        backend = cps.open(key_groups, checkpoint_id=1, restore_from=None)
        process(backend, KEYS, 1)
        written.append(cps.snapshot(backend, 1))
        backend.close()
    cps.complete(1, None, *written)
    merged = run(cps, ALL, 2, 1, 2)
    assert merged["reused_key_groups"] == 64 and merged["clipped_key_groups"] == 0
    assert 0 < merged["ingested_key_groups"] <= 64
    assert run(cps, ALL, 3, 2, 3)["reused_key_groups"] == 128
    assert read(cps, ALL, 3) == expected([1, 2, 3])


def test_two_attempts_of_one_task_never_share_a_directory(cps: Checkpoints) -> None:
    run(cps, ALL, 1, None, 1)
    first = cps.open(ALL, checkpoint_id=2, restore_from=1)
    second = cps.open(ALL, checkpoint_id=2, restore_from=1)
    try:
        assert first.restore_metrics()["reused_key_groups"] == 128
        assert second.restore_metrics()["reused_key_groups"] == 0
        assert first.directory != second.directory
        assert contents(second) == expected([1])
    finally:
        first.close()
        second.close()


def test_a_state_stored_in_another_form_is_restored_anew(cps: Checkpoints) -> None:
    run(cps, ALL, 1, None, 1)
    with_ttl = ValueStateDescriptor(
        "total", int, default=0, ttl=StateTtlConfig(ttl=timedelta(days=1))
    )
    backend = cps.open(ALL, checkpoint_id=2, restore_from=1)
    try:  # TTL turned on: values are now stored with their timestamps
        total: Any = backend.get_partitioned_state(with_ttl)
        backend.get_partitioned_state(SEEN)
        assert backend.restore_metrics()["reused_key_groups"] == 128
        assert backend.restore_metrics()["ingested_rows"] == len(KEYS)  # "total" only
        for key in KEYS[:20]:
            backend.set_current_key(key)
            assert total.value() == 1
    finally:
        backend.close()


def test_clearing_maps_leaves_no_handle_open(cps: Checkpoints) -> None:
    backend = cps.open(ALL, checkpoint_id=1, restore_from=None)
    process(backend, KEYS, 1)
    seen: Any = backend.get_partitioned_state(SEEN)
    backend.set_current_key(KEYS[0])
    seen.clear()  # a write batch on the column family's handle
    written = cps.snapshot(backend, 1)
    backend.close()
    cps.complete(1, None, written)
    assert run(cps, ALL, 2, 1, 2)["reused_key_groups"] == 128  # the directory opens again
