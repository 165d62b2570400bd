"""Variants 1 and 2: the per-record ceiling and statecore's backends in-process (no Spark).

Every variant reads the same Arrow table in batches of 10,000 rows (Spark's Arrow batch size),
turns the columns into Python values, runs the per-event logic and builds the output rows of each
batch (consuming them). A variant runs a few times in its child process, each on fresh state, and
the fastest run counts: these runs take well under a second, where a neighbour's burst on a
shared machine would otherwise decide the number. Key groups are computed before timing, as
Spark computes them in the JVM for the end-to-end runs; every key group belongs to the one
(p = 1) backend.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from typing import Any, cast

import pyarrow as pa

from benchmarks.functions import TOTAL, RunningSum
from benchmarks.measure import Sample, best_of, clock
from benchmarks.workload import KEY_GROUP, MAX_PARALLELISM, Workload, with_key_groups

__all__ = ["BATCH_ROWS", "KEY_GROUP", "backend_names", "variants", "run_variant"]

BATCH_ROWS = 10_000


def backend_names() -> list[str]:
    """statecore's keyed backends, as registered (heap first)."""
    from statecore.backends import backend_names as registered

    return registered()


_BATCHES: dict[int, list[pa.RecordBatch]] = {}


def _batches(workload: Workload) -> list[pa.RecordBatch]:
    """The input as Arrow batches with key groups (made once per process and size)."""
    if workload.events not in _BATCHES:
        _BATCHES[workload.events] = with_key_groups(workload.table()).to_batches(
            max_chunksize=BATCH_ROWS
        )
    return _BATCHES[workload.events]


def dict_loop(workload: Workload) -> Sample:
    """1. The ceiling: a plain dict, the same columns-to-Python conversion and output rows."""
    batches = _batches(workload)
    state: dict[str, int] = {}
    emitted = 0
    start = clock()
    get = state.get
    for batch in batches:
        out: list[tuple[str, int, int]] = []
        append = out.append
        for key, value in zip(batch.column("key").to_pylist(), batch.column("value").to_pylist()):
            total = get(key, 0) + value
            state[key] = total
            append((key, value, total))
        emitted += len(out)
    seconds = clock() - start
    _check(workload, "dict loop", emitted, state)
    return Sample("dict loop", seconds, workload.events)


def _backend(name: str, home: str) -> Any:
    """A backend of every key group, built by the registry as the Spark runtime builds one per
    task (a RocksDB backend keeps its files under ``home``)."""
    from statecore.backends import BackendParameters, create_backend
    from statecore.backends.scope import TaskScope
    from statecore.keygroups import KeyGroupRange
    from statecore.types import TypeInfo

    scope = TaskScope(job="bench", operator="main", subtask_index=0, checkpoint_id=1, home=home)
    return create_backend(
        BackendParameters.of(name),
        key_type=TypeInfo.of(str),
        key_group_range=KeyGroupRange(0, MAX_PARALLELISM - 1),
        max_parallelism=MAX_PARALLELISM,
        scope=scope,
    )


def _flush(backend: Any) -> None:
    """Timed too: buffered writes (the RocksDB backend's value cache) reach the store."""
    flush = getattr(backend, "flush", None)
    if flush is not None:
        flush()


def _final_sums(backend: Any) -> dict[str, int]:
    state = backend.get_partitioned_state(TOTAL)
    sums = {}
    for key in list(backend.keys(TOTAL.name)):
        backend.set_current_key(key)
        sums[key] = state.value()
    return sums


def operator_task(
    backend_name: str,
    workload: Workload,
    *,
    event_time: str | None = None,
    lateness_ms: int | None = None,
) -> Sample:
    """2. statecore in-process: ``KeyedOperatorTask.process_batch`` running ``RunningSum``
    (with ``event_time``, ``seq`` stays in the record as its event time; ``lateness_ms`` then
    moves the watermark between records, see :mod:`benchmarks.timer_order`)."""
    from statecore.runtime.collector import task_gc_policy
    from statecore.runtime.task import KeyedOperatorTask

    batches = _batches(workload)
    if event_time is None:
        batches = [b.drop_columns(["seq"]) for b in batches]  # record = (value,)
    variant = f"statecore {backend_name}, in-process (task + function)"
    if event_time is not None:
        variant += f", event time (lateness {lateness_ms})"
    with tempfile.TemporaryDirectory(prefix="bench-") as home:
        backend = _backend(backend_name, home)
        task = KeyedOperatorTask(
            RunningSum(), backend, job="bench", operator="main", subtask_index=0, parallelism=1
        )
        task.open()
        emitted = 0
        with task_gc_policy():  # as a Spark task runs
            start = clock()
            for batch in batches:
                emitted += len(
                    task.process_batch(
                        batch,
                        key="key",
                        key_group=KEY_GROUP,
                        event_time=event_time,
                        lateness_ms=lateness_ms,
                    )
                )
            _flush(backend)
            seconds = clock() - start
        _check(workload, variant, emitted, _final_sums(backend))
        task.close()
    return Sample(variant, seconds, workload.events)


def state_api(backend_name: str, workload: Workload) -> Sample:
    """2b. statecore in-process: a loop over ``set_current_key`` and ``ValueState`` only."""
    batches = _batches(workload)
    variant = f"statecore {backend_name}, in-process (state API loop)"
    with tempfile.TemporaryDirectory(prefix="bench-") as home:
        backend = _backend(backend_name, home)
        state = backend.get_partitioned_state(TOTAL)
        set_key, read, write = backend.set_current_key, state.value, state.update
        emitted = 0
        start = clock()
        for batch in batches:
            out: list[tuple[str, int, int]] = []
            append = out.append
            for key, kg, value in zip(
                batch.column("key").to_pylist(),
                batch.column(KEY_GROUP).to_pylist(),
                batch.column("value").to_pylist(),
            ):
                set_key(key, kg)
                total = read() + value
                write(total)
                append((key, value, total))
            emitted += len(out)
        _flush(backend)
        seconds = clock() - start
        _check(workload, variant, emitted, _final_sums(backend))
        backend.close()
    return Sample(variant, seconds, workload.events)


def rocksdict_raw(workload: Workload) -> Sample:
    """The RocksDB ceiling: raw ``rocksdict`` get + put, utf-8 keys, 8-byte values, with the
    RocksDB backend's own options (``RocksDBOptions()``: cache, bloom filter, no WAL)."""
    from rocksdict import Rdict

    from statecore.backends.rocksdb import RocksDBOptions

    batches = _batches(workload)
    tmp = tempfile.mkdtemp(prefix="bench-rocksdict-")
    try:
        defaults = RocksDBOptions()
        db = Rdict(f"{tmp}/db", options=defaults.to_options())
        db.set_write_options(defaults.to_write_options())
        get = db.get
        from_bytes = int.from_bytes
        emitted = 0
        start = clock()
        for batch in batches:
            out: list[tuple[str, int, int]] = []
            append = out.append
            for key, value in zip(
                batch.column("key").to_pylist(), batch.column("value").to_pylist()
            ):
                encoded = key.encode()
                stored = get(encoded)
                total = (from_bytes(stored, "little", signed=True) if stored else 0) + value
                db[encoded] = total.to_bytes(8, "little", signed=True)
                append((key, value, total))
            emitted += len(out)
        seconds = clock() - start
        sums = {
            cast(bytes, k).decode(): from_bytes(cast(bytes, v), "little", signed=True)
            for k, v in db.items()
        }
        db.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _check(workload, "rocksdict raw get+put", emitted, sums)
    return Sample("rocksdict raw get+put", seconds, workload.events)


def _check(workload: Workload, variant: str, emitted: int, sums: dict[str, int]) -> None:
    from benchmarks.workload import VerificationError

    if emitted != workload.events:
        raise VerificationError(f"{variant}: emitted {emitted} rows, expected {workload.events}")
    workload.reference.check_sums(variant, sums)


def variants() -> dict[str, Callable[[Workload], Sample]]:
    """Name -> function, in the order they are run (rocksdb when its backend exists)."""
    from functools import partial

    out: dict[str, Callable[[Workload], Sample]] = {"dict loop": dict_loop}
    for name in backend_names():
        out[f"statecore {name}, in-process (task + function)"] = partial(operator_task, name)
        out[f"statecore {name}, in-process (state API loop)"] = partial(state_api, name)
    out["rocksdict raw get+put"] = rocksdict_raw  # the ceiling of the RocksDB backend
    return out


def run_variant(name: str, workload: Workload, inner: int = 3) -> Sample:
    """Run ``name`` ``inner`` times in this process; the fastest counts (see the docstring)."""
    return best_of(inner, variants()[name], workload)
