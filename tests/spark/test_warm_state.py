"""Warm state between runs (:mod:`statecore.runtime.warm`), on the executor's own task code.

Each run plans and commits with a real catalog and Delta tables and runs every task through
:func:`statecore.spark.executor.run_task` in this process, so which task finds which kept state
is fixed (on Spark it depends on which Python worker a task lands in). A task must continue its
kept state exactly when the checkpoint it restores is the one it snapshotted, and restore in
every other case: a failed checkpoint, another attempt of the same run, a rescale, a maintenance
checkpoint, another writer, a changed state descriptor. Every run's output is compared with the
same run of a job that never keeps state (``keep_warm=False``): a cold run.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from statecore.backends import BackendParameters
from statecore.backends.operator import OperatorStateStore
from statecore.backends.rocksdb import RocksDBKeyedStateBackend
from statecore.catalog import Catalog
from statecore.checkpoint.coordinator import CheckpointCoordinator
from statecore.config import StatecoreConfig
from statecore.descriptors import (
    ListStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from statecore.errors import ConfigError
from statecore.keygroups import KeyGroupRange, assign_to_key_group
from statecore.ops.ttl_cleanup import ttl_cleanup
from statecore.runtime import (
    CheckpointedFunction,
    Context,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedProcessFunction,
    OnTimerContext,
    RuntimeContext,
)
from statecore.runtime.shares import TaskShares
from statecore.runtime.task import StateSnapshotResult, probe_states
from statecore.runtime.warm import WARM_POOL, RunClock, WarmEntry, WarmPool, WarmScope
from statecore.snapshot import state_table_uri
from statecore.snapshot.changelog import ChangelogConfig
from statecore.spark.executor import META, TaskSpec, per_record, run_task
from statecore.spark.host import host_address, host_folder, hosted
from statecore.spark.partitioning import KEY_GROUP_COLUMN
from statecore.ttl import ManualTimeProvider, StateTtlConfig
from statecore.types import TypeInfo

MAX_P = 128
OUTPUT = pa.schema([("key", pa.string()), ("total", pa.int64()), ("seen", pa.int64())])


hosted_task = functools.partial(hosted, fallback=run_task)
"""A task in its warm state host, run in the worker when the host is not to be trusted."""


class Totals(KeyedProcessFunction, CheckpointedFunction):
    """A running sum per key (keyed state), the records seen by the subtask (operator state)
    and an event-time timer per key that fires when the run ends (timers)."""

    def __init__(self, default: int = 0, ttl: StateTtlConfig | None = None) -> None:
        self.default, self.ttl = default, ttl
        self.seen = 0

    def initialize_state(self, ctx: FunctionInitializationContext) -> None:
        self.counter = ctx.operator_state_store.get_list_state(ListStateDescriptor("seen", int))
        self.seen = sum(self.counter.get())

    def snapshot_state(self, ctx: FunctionSnapshotContext) -> None:
        self.counter.update([self.seen])

    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(
            ValueStateDescriptor("total", int, default=self.default, ttl=self.ttl)
        )

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        self.seen += 1
        total = self.total.value() + value.value
        self.total.update(total)
        ctx.timer_service.register_event_time_timer(value.value)
        yield ctx.current_key, total, self.seen

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterator[tuple[Any, ...]]:
        yield ctx.current_key, -timestamp, self.seen


def events(run: int, keys: int = 40) -> list[tuple[str, int]]:
    return [(f"k{(run * 7 + i) % keys}", run * 10 + i % 5) for i in range(60)]


def run(
    config: StatecoreConfig,
    records: Sequence[tuple[str, int]],
    *,
    job: str,
    checkpoint_id: int,
    parallelism: int = 2,
    function: KeyedProcessFunction | None = None,
    backend: str = "heap",
    keep_warm: bool = True,
    commit: bool = True,
    attempts: Sequence[int] = (),
    clock: ManualTimeProvider | None = None,
    tasks: Sequence[int] | None = None,
    changelog: ChangelogConfig | None = None,
    runner: Callable[..., Iterator[pa.RecordBatch]] = run_task,
) -> tuple[list[tuple[Any, ...]], dict[str, int]]:
    """One checkpoint of ``records``: its output rows (sorted) and the summed restore metrics.

    ``attempts`` names subtasks that run twice (the first attempt's snapshot is committed);
    without ``commit`` the checkpoint fails after every task snapshotted. ``tasks`` names the
    subtasks that run (all by default; Spark runs none for an empty micro-batch).
    """
    function = function or Totals()
    key_type = TypeInfo.of(str)
    with Catalog.connect(config.catalog_url) as catalog:
        coordinator = CheckpointCoordinator(config, catalog, job=job, operator="main")
        planned = coordinator.plan(
            checkpoint_id,
            parallelism=parallelism,
            max_parallelism=MAX_P,
            default_parallelism=parallelism,
        )
        planned = coordinator.check_compatible(
            planned,
            probe_states(
                copy.deepcopy(function),
                key_type,
                job=job,
                operator="main",
                parallelism=parallelism,
                max_parallelism=MAX_P,
            ),
        )
        spec = TaskSpec(
            key="key",
            key_type=key_type,
            key_group_column=KEY_GROUP_COLUMN,
            parallelism=parallelism,
            max_parallelism=MAX_P,
            checkpoint_id=checkpoint_id,
            restore=TaskShares.cut(planned.restore, parallelism=parallelism, max_parallelism=MAX_P),
            job=job,
            operator="main",
            backend_parameters=BackendParameters(name=backend),  # type: ignore[arg-type]
            home=config.home,
            table_uris=functools.partial(state_table_uri, config.warehouse, job, "main"),
            output_schema=OUTPUT,
            event_time=None,
            watermark=1_000_000,
            processing_time=clock,
            keep_warm=keep_warm,
            changelog=changelog,
        )
        rows: list[tuple[Any, ...]] = []
        metas: list[dict[str, Any]] = []
        for index in [*(range(parallelism) if tasks is None else tasks), *attempts]:
            key_groups = spec.key_groups(index)
            mine = [(k, v) for k, v in records if assign_to_key_group(k, MAX_P) in key_groups]
            batch = pa.RecordBatch.from_pydict(
                {
                    "key": [k for k, _ in mine],
                    "value": pa.array([v for _, v in mine], pa.int64()),
                    KEY_GROUP_COLUMN: pa.array(
                        [assign_to_key_group(k, MAX_P) for k, _ in mine], pa.int32()
                    ),
                }
            )
            task_rows, meta = [], None
            for out in runner(
                spec, copy.deepcopy(function), per_record(spec), index, iter([batch])
            ):
                for row in out.to_pylist():
                    if row[META] is None:
                        task_rows.append((row["key"], row["total"], row["seen"]))
                    else:
                        meta = json.loads(row[META])
            if index in [m["subtask"] for m in metas]:
                continue  # a second attempt: its output and snapshot are not committed
            rows += task_rows
            metas.append(meta)
        if not commit:
            coordinator.fail(checkpoint_id, RuntimeError("injected: the checkpoint fails"))
        else:
            coordinator.commit(
                planned,
                [StateSnapshotResult.from_json_dict(s) for m in metas for s in m["states"]],
            )
    restore: dict[str, int] = {"tasks": len(metas)}
    for meta in metas:
        for name, value in meta["restore"].items():
            restore[name] = restore.get(name, 0) + value
    return sorted(rows), restore


@pytest.fixture(autouse=True)
def empty_pool() -> Iterator[None]:
    WARM_POOL.clear()
    yield
    WARM_POOL.clear()


def cold(config: StatecoreConfig, runs: Sequence[dict[str, Any]], job: str) -> list[list[Any]]:
    """The outputs of ``runs`` (``run`` keyword arguments) by a job that never keeps state."""
    WARM_POOL.clear()
    out = [run(config, job=job, keep_warm=False, **kw)[0] for kw in runs]
    WARM_POOL.clear()
    return out


@pytest.mark.parametrize(
    "backend,changelog",
    [
        ("heap", None),
        ("rocksdb", None),
        ("heap", ChangelogConfig()),
        ("rocksdb", ChangelogConfig()),
    ],
    ids=["heap", "rocksdb", "heap-changelog", "rocksdb-changelog"],
)
def test_warm_state_continues_between_runs_as_a_cold_restore_would(
    statecore_home: StatecoreConfig, backend: str, changelog: ChangelogConfig | None
) -> None:
    runs = [
        {"records": events(i), "checkpoint_id": i, "backend": backend, "changelog": changelog}
        for i in range(1, 5)
    ]
    expected = cold(statecore_home, runs, f"cold_{backend}")
    metrics = []
    for kw, rows in zip(runs, expected):
        got, restore = run(statecore_home, job=f"warm_{backend}", **kw)
        assert got == rows
        metrics.append(restore)
    assert metrics[0]["warm_tasks"] == 0  # nothing to continue from
    for restore in metrics[1:]:
        assert restore["warm_tasks"] == 2
        assert restore["warm_key_groups"] == MAX_P
        assert restore.get("ingested_rows", 0) == 0
    assert len(WARM_POOL) == 2


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_warm_state_in_a_host_continues_whichever_process_asks(
    statecore_home: StatecoreConfig, backend: str, host_dir: Path
) -> None:
    """Tasks run through their subtasks' hosts (:mod:`statecore.spark.host`) continue warm
    though this process keeps nothing between them (as when Spark picks another worker), and
    their outputs are the cold job's."""
    runs = [{"records": events(i), "checkpoint_id": i, "backend": backend} for i in range(1, 4)]
    expected = cold(statecore_home, runs, f"cold_{backend}")
    for i, (kw, rows) in enumerate(zip(runs, expected)):
        got, restore = run(statecore_home, job=f"hosted_{backend}", runner=hosted_task, **kw)
        assert got == rows
        assert restore["warm_tasks"] == (0 if i == 0 else 2)
        assert len(WARM_POOL) == 0  # the hosts keep the state, not this process
    assert len(list(host_dir.glob("*/*/*.sock"))) == 2


def test_warm_state_hosts_of_subtasks_a_rescale_dropped_exit(
    statecore_home: StatecoreConfig, host_dir: Path
) -> None:
    """At parallelism 4 then 2, the hosts of subtasks 2 and 3 hold state no task will ask for:
    the first task at 2 asks them to exit; the others go on (and restore: a rescale)."""
    run(statecore_home, events(1), job="shrunk", checkpoint_id=1, parallelism=4, runner=hosted_task)
    sockets = lambda: sorted(host_dir.glob("*/*/*.sock"))  # noqa: E731
    assert len(sockets()) == 4
    rows, restore = run(
        statecore_home, events(2), job="shrunk", checkpoint_id=2, parallelism=2, runner=hosted_task
    )
    assert restore["warm_tasks"] == 0 and restore["tasks"] == 2
    expected = cold(
        statecore_home,
        [
            {"records": events(1), "checkpoint_id": 1, "parallelism": 4},
            {"records": events(2), "checkpoint_id": 2, "parallelism": 2},
        ],
        "shrunk_cold",
    )
    assert rows == expected[1]
    deadline = time.monotonic() + 30
    while len(sockets()) > 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [s.name for s in sockets()] == sorted(
        host_address("shrunk", "main", i).name for i in (0, 1)
    )
    _, restore = run(
        statecore_home, events(3), job="shrunk", checkpoint_id=3, parallelism=2, runner=hosted_task
    )
    assert restore["warm_tasks"] == 2


def test_warm_state_host_start_removes_folders_of_executors_gone_for_a_day(
    statecore_home: StatecoreConfig, host_dir: Path
) -> None:
    """Executors come and go over months: the folder of one that is gone (its hosts' logs) is
    removed by a later host start once nothing in it changed for a day, not before."""
    ended = subprocess.Popen(["true"])
    ended.wait()  # a process id no process has (for the test's short while)
    root = host_dir / f"statecore-hosts-{os.getuid()}"
    old, recent, alive = root / str(ended.pid), root / "4194304", root / str(os.getpid())
    root.mkdir(mode=0o700)
    for folder in (old, recent, alive):
        folder.mkdir(mode=0o700)
        (folder / "x.sock.log").write_text("a host's log\n")
    for path in (old, old / "x.sock.log", alive, alive / "x.sock.log"):
        os.utime(path, (time.time() - 2 * 86_400,) * 2)
    run(statecore_home, events(1), job="swept", checkpoint_id=1, parallelism=1, runner=hosted_task)
    assert not old.exists()
    assert (recent / "x.sock.log").exists(), "gone for less than a day: kept"
    assert (alive / "x.sock.log").exists(), "its executor runs: kept"


def test_warm_state_host_folders_open_to_others_or_too_long_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The socket accepts pickles: a folder others may use is refused, and so is a path a Unix
    socket cannot have; both before any host starts."""
    monkeypatch.setenv("STATECORE_HOST_DIR", str(tmp_path))
    root = tmp_path / f"statecore-hosts-{os.getuid()}"
    root.mkdir()
    root.chmod(0o777)
    with pytest.raises(ConfigError, match="only this user may use"):
        host_folder()
    monkeypatch.setenv("STATECORE_HOST_DIR", str(tmp_path / ("x" * 80)))
    with pytest.raises(ConfigError, match="too long for a Unix socket"):
        host_address("j", "main", 0)


@pytest.mark.parametrize("changelog", [None, ChangelogConfig()], ids=["whole", "changelog"])
def test_warm_state_after_a_failed_checkpoint_restores_the_last_completed_one(
    statecore_home: StatecoreConfig, changelog: ChangelogConfig | None
) -> None:
    runs = [
        {"records": events(1), "checkpoint_id": 1, "changelog": changelog},
        {"records": events(3), "checkpoint_id": 2, "changelog": changelog},
    ]
    expected = cold(statecore_home, runs, "failed_cold")
    run(statecore_home, job="failed", **runs[0])
    # every task snapshotted checkpoint 2 and kept its state; then the checkpoint failed (with
    # changelog its snapshot was change files only: the token must still tell it apart)
    run(
        statecore_home,
        job="failed",
        records=events(2),
        checkpoint_id=2,
        commit=False,
        changelog=changelog,
    )
    got, restore = run(statecore_home, job="failed", **runs[1])
    assert restore["warm_tasks"] == 0
    assert got == expected[1]  # the failed run's records counted nowhere
    got, restore = run(
        statecore_home, job="failed", records=events(4), checkpoint_id=3, changelog=changelog
    )
    assert restore["warm_tasks"] == 2  # warm again after a completed checkpoint


def test_warm_state_of_an_attempt_whose_files_were_not_committed_is_not_taken(
    statecore_home: StatecoreConfig,
) -> None:
    runs = [{"records": events(i), "checkpoint_id": i} for i in (1, 2, 3)]
    expected = cold(statecore_home, runs, "attempt_cold")
    run(statecore_home, job="attempt", **runs[0])
    # subtask 0 runs twice; the first attempt's snapshot is committed, the second one kept
    got, restore = run(statecore_home, job="attempt", attempts=[0], **runs[1])
    assert got == expected[1]
    got, restore = run(statecore_home, job="attempt", **runs[2])
    assert restore["warm_tasks"] == 1  # subtask 1 continues; subtask 0 holds the wrong files
    assert got == expected[2]


def test_warm_state_is_not_taken_after_a_rescale(statecore_home: StatecoreConfig) -> None:
    runs = [
        {"records": events(1), "checkpoint_id": 1, "parallelism": 2},
        {"records": events(2), "checkpoint_id": 2, "parallelism": 1},
        {"records": events(3), "checkpoint_id": 3, "parallelism": 2},
        {"records": events(4), "checkpoint_id": 4, "parallelism": 2},
    ]
    expected = cold(statecore_home, runs, "rescale_cold")
    warm = [run(statecore_home, job="rescale", **kw) for kw in runs]
    assert [rows for rows, _ in warm] == expected
    assert [r["warm_tasks"] for _, r in warm] == [0, 0, 0, 2]


def test_warm_state_is_not_taken_after_a_maintenance_checkpoint(
    statecore_home: StatecoreConfig,
) -> None:
    clock = ManualTimeProvider(1_000_000)
    ttl = StateTtlConfig(ttl=timedelta(minutes=1))
    runs = [
        {"records": events(1), "checkpoint_id": 1, "clock": clock},
        {"records": events(2), "checkpoint_id": 3, "clock": clock},
    ]

    def both(job: str, keep_warm: bool) -> list[tuple[list[Any], dict[str, int]]]:
        clock.now_ms = 1_000_000
        first = run(
            statecore_home, job=job, function=Totals(ttl=ttl), keep_warm=keep_warm, **runs[0]
        )
        clock.advance(120_000)  # every total expired
        with Catalog.connect(statecore_home.catalog_url) as catalog:
            report = ttl_cleanup(
                statecore_home, catalog, job, time_provider=clock, vacuum_after=None
            )
        assert report.checkpoint_id is not None
        second = run(
            statecore_home, job=job, function=Totals(ttl=ttl), keep_warm=keep_warm, **runs[1]
        )
        return [first, second]

    expected = both("maintained_cold", keep_warm=False)
    WARM_POOL.clear()
    got = both("maintained", keep_warm=True)
    assert [rows for rows, _ in got] == [rows for rows, _ in expected]
    assert got[1][1]["warm_tasks"] == 0


def test_warm_state_is_not_taken_after_another_writer(statecore_home: StatecoreConfig) -> None:
    runs = [{"records": events(i), "checkpoint_id": i} for i in (1, 2, 3)]
    expected = cold(statecore_home, runs, "other_cold")
    run(statecore_home, job="other", **runs[0])
    entries = dict(WARM_POOL._entries)  # what this process keeps at checkpoint 1
    WARM_POOL._entries.clear()  # another process's tasks write checkpoint 2 ...
    run(statecore_home, job="other", **runs[1])
    WARM_POOL.clear()
    WARM_POOL._entries.update(entries)  # ... and this one still keeps checkpoint 1
    got, restore = run(statecore_home, job="other", **runs[2])
    assert restore["warm_tasks"] == 0
    assert got == expected[2]


def test_a_changed_state_descriptor_restores_instead(statecore_home: StatecoreConfig) -> None:
    run(statecore_home, job="changed", records=events(1), checkpoint_id=1)
    got, restore = run(
        statecore_home,
        job="changed",
        records=events(2),
        checkpoint_id=2,
        function=Totals(default=1),
    )
    assert restore["warm_tasks"] == 0
    WARM_POOL.clear()
    run(statecore_home, job="changed_cold", records=events(1), checkpoint_id=1, keep_warm=False)
    expected, _ = run(
        statecore_home,
        job="changed_cold",
        records=events(2),
        checkpoint_id=2,
        function=Totals(default=1),
        keep_warm=False,
    )
    assert got == expected


def test_the_pool_drops_stale_tokens_other_jobs_and_entries_behind() -> None:
    pool = WarmPool()

    def entry(job: str, subtask: int, token: str, checkpoint_id: int = 1) -> WarmEntry:
        scope = WarmScope(
            job=job,
            operator="main",
            subtask_index=subtask,
            parallelism=2,
            key_groups=KeyGroupRange(0, 63),
            max_parallelism=MAX_P,
            key_type=TypeInfo.of(str),
            backend=BackendParameters(name="rocksdb"),
        )
        backend = RocksDBKeyedStateBackend(
            key_type=TypeInfo.of(str), key_group_range=KeyGroupRange(0, 63), max_parallelism=MAX_P
        )
        return WarmEntry(
            scope=scope,
            token=token,
            checkpoint_id=checkpoint_id,
            backend=backend,
            operator_state=OperatorStateStore(),
            clock=RunClock(),
        )

    a, b, c = entry("j", 0, "t1"), entry("j", 1, "t1"), entry("other", 0, "t1")
    for e in (a, b, c):
        pool.put(e)
    assert len(pool) == 3
    assert pool.take(a.scope, "forged") is None  # a stale token: closed, not returned
    assert a.backend._resources.closed  # type: ignore[attr-defined]
    assert len(pool) == 1  # the other job's entry was dropped (and closed) on the way
    assert c.backend._resources.closed  # type: ignore[attr-defined]
    assert pool.take(b.scope, "t1") is b
    pool.put(b)
    pool.put(entry("j", 0, "t2"))
    # subtask 0 runs restoring "t3": subtask 1's entry ("t1") is behind it and dropped
    assert pool.take(a.scope, "t3", lambda e: e.token != "t3") is None
    assert len(pool) == 0 and b.backend._resources.closed  # type: ignore[attr-defined]


def test_warm_state_survives_a_checkpoint_that_ran_no_task(statecore_home: StatecoreConfig) -> None:
    runs = [{"records": events(1), "checkpoint_id": 1}, {"records": events(2), "checkpoint_id": 3}]
    expected = cold(statecore_home, runs, "empty_cold")
    run(statecore_home, job="empty", **runs[0])
    run(statecore_home, job="empty", records=[], checkpoint_id=2, tasks=[])  # an empty batch
    got, restore = run(statecore_home, job="empty", **runs[1])
    assert restore["warm_tasks"] == 2  # checkpoint 2 is checkpoint 1's files: the same state
    assert got == expected[1]


class KeyedOnly(KeyedProcessFunction):
    """A running sum per key and nothing else: no operator state, no timers, so a checkpoint's
    only files are the keyed state's (with changelog: change files only)."""

    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total", int, default=0))

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        total = self.total.value() + value.value
        self.total.update(total)
        yield ctx.current_key, total, 0


def test_warm_state_of_a_failed_changelog_checkpoint_is_not_taken(
    statecore_home: StatecoreConfig,
) -> None:
    """The failed checkpoint wrote change files only; its kept state must not pass for the last
    completed checkpoint (the token counts pending change files)."""
    changelog = ChangelogConfig(max_change_ratio=100)  # tiny key groups: still logged
    runs = [
        {"records": events(1), "checkpoint_id": 1},
        {"records": events(3), "checkpoint_id": 2},
        {"records": events(4), "checkpoint_id": 3},
    ]
    expected = cold(
        statecore_home, [{**r, "function": KeyedOnly(), "changelog": changelog} for r in runs], "kc"
    )
    run(statecore_home, job="k", function=KeyedOnly(), changelog=changelog, **runs[0])
    run(
        statecore_home,
        job="k",
        function=KeyedOnly(),
        changelog=changelog,
        records=events(2),
        checkpoint_id=2,
        commit=False,
    )
    got, restore = run(
        statecore_home, job="k", function=KeyedOnly(), changelog=changelog, **runs[1]
    )
    assert restore["warm_tasks"] == 0 and got == expected[1]
    got, restore = run(
        statecore_home, job="k", function=KeyedOnly(), changelog=changelog, **runs[2]
    )
    assert restore["warm_tasks"] == 2 and got == expected[2]


class Reduced(KeyedProcessFunction):
    """A reducing state over the values of each key (``combine`` its reduce function)."""

    def __init__(self, combine: Any) -> None:
        self.combine = combine

    def open(self, ctx: RuntimeContext) -> None:
        self.acc = ctx.get_reducing_state(ReducingStateDescriptor("acc", self.combine, int))

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        self.acc.add(value.value)
        yield ctx.current_key, self.acc.get(), 0


def test_warm_state_with_another_reduce_function_restores_instead(
    statecore_home: StatecoreConfig,
) -> None:
    from pyspark import cloudpickle

    add = lambda a, b: a + b  # noqa: E731 (a lambda is pickled by value: a fresh copy a run)
    run(statecore_home, job="reduce", records=events(1), checkpoint_id=1, function=Reduced(add))
    fresh_add = cloudpickle.loads(cloudpickle.dumps(add))
    assert fresh_add is not add
    _, same = run(
        statecore_home,
        job="reduce",
        records=events(2),
        checkpoint_id=2,
        function=Reduced(fresh_add),
    )
    assert same["warm_tasks"] == 2  # the same code: the kept state goes on
    got, changed = run(
        statecore_home, job="reduce", records=events(3), checkpoint_id=3, function=Reduced(max)
    )
    assert changed["warm_tasks"] == 0  # another function: restored, the new one applies
    WARM_POOL.clear()
    for i, combine in ((1, add), (2, add), (3, max)):
        expected, _ = run(
            statecore_home,
            job="reduce_cold",
            records=events(i),
            checkpoint_id=i,
            function=Reduced(combine),
            keep_warm=False,
        )
    assert got == expected


def test_same_functions_compares_code_defaults_and_closures() -> None:
    from pyspark import cloudpickle

    def adder(step: int) -> Any:
        return lambda a, b: a + b + step

    def descriptor(fn: Any) -> ReducingStateDescriptor:
        return ReducingStateDescriptor("acc", fn, int)

    one = adder(1)
    assert descriptor(one).same_functions(descriptor(cloudpickle.loads(cloudpickle.dumps(one))))
    assert descriptor(one).same_functions(descriptor(adder(1)))
    assert not descriptor(one).same_functions(descriptor(adder(2)))  # another closure value
    assert not descriptor(one).same_functions(descriptor(max))
    assert ValueStateDescriptor("v", int).same_functions(ValueStateDescriptor("v", int))
