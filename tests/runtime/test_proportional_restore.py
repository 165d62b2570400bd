"""A task's part of the restore plan, and its files read several at a time (issue 35).

The driver cuts the restore plan into each subtask's part (:class:`TaskShares`); a task reads its
files from a few threads (:func:`read_table_files`). Both must restore exactly what the whole
plan read one file after another restores: same files, same rows in the same order, on both
backends, at the checkpoint's parallelism and rescaled (the real coordinator, catalog and Delta).
"""

from __future__ import annotations

import pickle
import threading
from pathlib import Path
from typing import Any

import pytest

from statecore.backends import HeapKeyedStateBackend, RocksDBKeyedStateBackend
from statecore.backends.base import KeyedStateBackend
from statecore.catalog import Catalog
from statecore.checkpoint.coordinator import CheckpointCoordinator
from statecore.config import StatecoreConfig
from statecore.errors import ConfigError, CorruptSnapshotError
from statecore.keygroups import KeyGroupRange, compute_key_group_range_for_operator_index
from statecore.runtime import RuntimeContext
from statecore.runtime.restore import RestorePlan
from statecore.runtime.shares import TaskShares
from statecore.snapshot.changelog import ChangelogConfig
from statecore.snapshot.reads import READ_THREADS_ENV, read_table_files, read_threads
from statecore.ttl import ManualTimeProvider
from statecore.types import TypeInfo
from tests.inprocess import MAX_P, run_checkpoint
from tests.runtime.test_changelog import Mixed, batches

JOB = "proportional"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> StatecoreConfig:
    """Four changelog checkpoints at parallelism 2: every key group has a materialized file of
    each state, many also pending change files (a restore applies them in order)."""
    home = tmp_path_factory.mktemp("proportional")
    config = StatecoreConfig.resolve(home=str(home), env={})
    changelog = ChangelogConfig(materialize_every=3, max_change_ratio=10.0)
    for checkpoint_id, batch in enumerate(batches(35, 4, 400), start=1):
        run_checkpoint(
            config,
            Mixed(),
            batch,
            job=JOB,
            checkpoint_id=checkpoint_id,
            clock=ManualTimeProvider(checkpoint_id * 1000),
            changelog=changelog,
        )
    return config


def whole_plan(config: StatecoreConfig) -> RestorePlan:
    with Catalog.connect(config.catalog_url) as catalog:
        coordinator = CheckpointCoordinator(config, catalog, job=JOB, operator="main")
        return coordinator._restore_plan(catalog.latest_checkpoint(JOB))


def restored(
    plan: RestorePlan, key_groups: KeyGroupRange, backend_class: type[KeyedStateBackend]
) -> dict[str, list[Any]]:
    """Every keyed state's rows as a task of ``key_groups`` restores them from ``plan``, per
    key group in the backend's order (not sorted: the order a restore applied them in)."""
    backend = backend_class(
        key_type=TypeInfo.of(str),
        key_group_range=key_groups,
        max_parallelism=MAX_P,
        restore_source=plan.source(key_groups, TypeInfo.of(str)),
        ttl_time_provider=ManualTimeProvider(4000),
    )
    try:
        Mixed().open(
            RuntimeContext(backend, job=JOB, operator="main", subtask_index=0, parallelism=1)
        )
        return {
            name: [(kg, backend.snapshot_key_group(name, kg).to_pylist()) for kg in key_groups]
            for name in backend.descriptors
        }
    finally:
        backend.close()


def keyed_files(plan: RestorePlan) -> dict[str, set[tuple[str, int]]]:
    tables = {f"keyed/{n}": r for n, r in plan.states.items()}
    tables |= {f"changes/{n}": r for n, r in plan.changes.items()}
    return {name: {(f.path, f.key_group) for f in r.files} for name, r in tables.items()}


@pytest.mark.parametrize("parallelism", [2, 3])
def test_proportional_task_plan_holds_only_its_key_groups(
    checkpoints: StatecoreConfig, parallelism: int
) -> None:
    """Each subtask's part holds exactly its key groups' files (state and pending changes), the
    parts together are the whole plan, and a task's account of its files (task files, file
    paths, bytes, fingerprint) is the one the whole plan gives; its pickled part is its share
    of the plan's bytes, not all of them."""
    plan = whole_plan(checkpoints)
    assert plan.changes, "the checkpoint has pending change files"
    shares = TaskShares.cut(plan, parallelism=parallelism, max_parallelism=MAX_P)
    together: dict[str, set[tuple[str, int]]] = {}
    for index in range(parallelism):
        key_groups = compute_key_group_range_for_operator_index(MAX_P, parallelism, index)
        share = shares.share(index)
        for name, files in keyed_files(share).items():
            assert files and all(kg in key_groups for _, kg in files), name
            together.setdefault(name, set()).update(files)
        assert share.task_files(key_groups, index) == plan.task_files(key_groups, index)
        assert share.file_paths(key_groups) == plan.file_paths(key_groups)
        assert share.bytes_to_restore(key_groups) == plan.bytes_to_restore(key_groups)
        assert share.fingerprint(key_groups, index) == plan.fingerprint(key_groups, index)
        assert share.registered == plan.registered and share.operator_states == plan.operator_states
        assert len(shares.parts[index]) < 1.5 * len(pickle.dumps(plan)) / parallelism
    assert together == keyed_files(plan)
    # a kept state of another parallelism (a rescale) is judged on the same files
    other = compute_key_group_range_for_operator_index(MAX_P, 5, 2)
    assert shares.plan_for(other, 2).fingerprint(other, 2) == plan.fingerprint(other, 2)
    shipped = pickle.loads(pickle.dumps(shares))  # as the tasks' spec reaches an executor
    assert shipped.share(1) == shares.share(1)


@pytest.mark.parametrize("backend_class", [HeapKeyedStateBackend, RocksDBKeyedStateBackend])
@pytest.mark.parametrize("parallelism", [1, 3])
def test_proportional_parallel_reads_restore_the_same_state(
    checkpoints: StatecoreConfig,
    monkeypatch: pytest.MonkeyPatch,
    backend_class: type[KeyedStateBackend],
    parallelism: int,
) -> None:
    """Each task of a restore at another parallelism (1: one task reads every file; 3), from
    its part of the plan with 8 reader threads, holds exactly the state the whole plan read one
    file after another gives: the same rows of every key group, in the same order."""
    plan = whole_plan(checkpoints)
    shares = TaskShares.cut(plan, parallelism=parallelism, max_parallelism=MAX_P)
    for index in range(parallelism):
        key_groups = compute_key_group_range_for_operator_index(MAX_P, parallelism, index)
        monkeypatch.setenv(READ_THREADS_ENV, "1")
        sequential = restored(plan, key_groups, backend_class)
        monkeypatch.setenv(READ_THREADS_ENV, "8")
        parallel = restored(shares.share(index), key_groups, backend_class)
        assert parallel == sequential
        assert sum(len(rows) for _, rows in sequential["total"]) > 0


def test_proportional_reads_run_several_files_at_once_in_order(
    checkpoints: StatecoreConfig,
) -> None:
    """The files are read from the reader threads, and handed back in the order asked for
    (the largest first here, so reads end out of order); the threads end with the read."""
    restored_state = whole_plan(checkpoints).states["pages"]
    files = sorted(restored_state.files, key=lambda f: -f.size)
    sequential = list(read_table_files(restored_state.uri, files, label="pages", threads=1))
    reading = read_table_files(restored_state.uri, files, label="pages", threads=4)
    first = next(reading)
    readers = [t for t in threading.enumerate() if t.name.startswith("statecore-restore")]
    parallel = [first, *reading]
    assert len(readers) > 1
    assert [f for f, _ in parallel] == files
    assert all(a.equals(b) for (_, a), (_, b) in zip(parallel, sequential, strict=True))
    assert not any(t.is_alive() for t in readers)


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_proportional_parallel_read_of_a_bad_file_fails_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    """A file missing or truncated in the middle of a task's files fails its restore with a
    ``CorruptSnapshotError`` naming the job, state, key group and file; the files before it
    read as they are."""
    config = StatecoreConfig.resolve(home=str(tmp_path), env={})
    run_checkpoint(config, Mixed(), batches(7, 1, 400)[0], job=JOB, checkpoint_id=1)
    plan = whole_plan(config)
    pages = plan.states["pages"]
    files = sorted(pages.files, key=lambda f: f.key_group)
    bad = files[len(files) // 2]
    path = Path(pages.uri) / bad.path
    if damage == "missing":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[: bad.size // 2])
    monkeypatch.setenv(READ_THREADS_ENV, "4")
    with pytest.raises(CorruptSnapshotError) as failed:
        restored(plan, KeyGroupRange(0, MAX_P - 1), HeapKeyedStateBackend)
    message = str(failed.value)
    assert f"job {JOB!r}" in message and "state 'pages'" in message
    assert f"key group {bad.key_group}: file {bad.path} is missing or unreadable" in message
    before = files[: len(files) // 2]  # the files before it read as they are
    assert [f for f, _ in read_table_files(pages.uri, before, label="x", threads=4)] == before


def test_proportional_read_threads_setting_is_checked() -> None:
    """``STATECORE_RESTORE_READ_THREADS``: 4 by default, a count of at least 1, else an error
    naming the setting."""
    assert read_threads({}) == 4
    assert read_threads({READ_THREADS_ENV: "1"}) == 1
    for text in ("0", "four", "-2"):
        with pytest.raises(ConfigError, match=READ_THREADS_ENV):
            read_threads({READ_THREADS_ENV: text})
