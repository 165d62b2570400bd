"""Programs over keyed state, and their run on statecore's backends beside the model.

A program is a list of steps (tuples, so Hypothesis prints a shrunk one readably):

- ``("key", k)``: make ``k`` the current key; ``("ns", state, ns)``: scope ``state`` to ``ns``;
- ``(state, method, *args)``: one call on a state, its result compared with the model's;
  ``("seen", "append", x)`` is ``acc = s.value(); acc.append(x); s.update(acc)`` and
  ``("seen", "append_unset", x)`` appends to what a read of an unset key returned, without update
  (the shared-default bug class: nothing may change);
- ``("keys", state, ns)``: every subtask's keys of ``state`` in ``ns``;
- ``("advance", ms)``: move the TTL clock;
- ``("checkpoint",)``: snapshot every key group of every subtask;
- ``("restore", backend, parallelism, max_parallelism)``: drop the running subtasks and restore
  the last checkpoint at another parallelism, max parallelism (rows regrouped by key, as a
  rescale past the max parallelism rewrites them) and backend.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import strategies as st

from statecore.backends import BackendParameters, KeyedStateBackend, create_backend
from statecore.backends.base import RestoreSource
from statecore.backends.rocksdb.options import RocksDBOptions
from statecore.descriptors import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from statecore.keygroups import (
    assign_key_to_parallel_operator,
    assign_to_key_groups,
    compute_key_group_range_for_operator_index,
)
from statecore.ttl import CleanupStrategy, ManualTimeProvider, StateTtlConfig
from statecore.types import TypeInfo

from .model import KeyedModel, Kind, ModelTtl

KEYS = ["a", "b", "c", "d", "e", "f"]
NAMESPACES = ["", "w1", "w2"]
MERGING = ("list", "reducing", "aggregating")
SMALL = st.integers(-3, 3)
SHM = "/dev/shm"
SHM_DIR = os.path.join(SHM, f"statecore-reference-model-{os.getpid()}")


class SumCount(AggregateFunction[int, dict[str, int], tuple[int, int]]):
    def create_accumulator(self) -> dict[str, int]:
        return {"sum": 0, "count": 0}

    def add(self, value: int, acc: dict[str, int]) -> dict[str, int]:
        return {"sum": acc["sum"] + value, "count": acc["count"] + 1}

    def get_result(self, acc: dict[str, int]) -> tuple[int, int]:
        return (acc["sum"], acc["count"])

    def merge(self, a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
        return {"sum": a["sum"] + b["sum"], "count": a["count"] + b["count"]}


def plus(a: int, b: int) -> int:
    return a + b


SUM_COUNT = SumCount()
SUM_COUNT_TYPE = pa.struct([("sum", pa.int64()), ("count", pa.int64())])


def descriptors(ttl: StateTtlConfig | None) -> dict[str, StateDescriptor]:
    return {
        "seen": ValueStateDescriptor("seen", pa.list_(pa.int64()), default=[], ttl=ttl),
        "count": ValueStateDescriptor("count", int, default=0, ttl=ttl),
        "list": ListStateDescriptor("list", int, ttl=ttl),
        "map": MapStateDescriptor("map", str, int, ttl=ttl),
        "reducing": ReducingStateDescriptor("reducing", plus, int, ttl=ttl),
        "aggregating": AggregatingStateDescriptor(
            "aggregating", SUM_COUNT, SUM_COUNT_TYPE, ttl=ttl
        ),
    }


KINDS = {
    "seen": Kind("value", default=[]),
    "count": Kind("value", default=0),
    "list": Kind("list"),
    "map": Kind("map"),
    "reducing": Kind("reducing", reduce=plus),
    "aggregating": Kind(
        "aggregating",
        create=SUM_COUNT.create_accumulator,
        add=SUM_COUNT.add,
        result=SUM_COUNT.get_result,
        merge=SUM_COUNT.merge,
    ),
}


# -- strategies -----------------------------------------------------------------------------
def state_calls(
    *, merges: bool, states: Iterable[str], namespaces: list[str]
) -> st.SearchStrategy[tuple[Any, ...]]:
    ints = st.lists(SMALL, max_size=3)
    map_keys = st.sampled_from(["x", "y", "z"])
    nullable = st.one_of(st.none(), SMALL)
    calls: dict[str, list[st.SearchStrategy[tuple[Any, ...]]]] = {
        "seen": [
            st.just(("seen", "value")),
            st.tuples(st.just("seen"), st.just("update"), st.one_of(st.none(), ints)),
            st.tuples(st.just("seen"), st.sampled_from(["append", "append_unset"]), SMALL),
        ],
        "count": [
            st.just(("count", "value")),
            st.tuples(st.just("count"), st.just("update"), nullable),
            st.just(("count", "increment")),
        ],
        "list": [
            st.just(("list", "get")),
            st.tuples(st.just("list"), st.just("add"), SMALL),
            st.tuples(st.just("list"), st.sampled_from(["add_all", "update"]), ints),
        ],
        "map": [
            st.tuples(st.just("map"), st.sampled_from(["get", "contains", "remove"]), map_keys),
            st.tuples(st.just("map"), st.just("put"), map_keys, nullable),
            st.tuples(
                st.just("map"), st.just("put_all"), st.dictionaries(map_keys, nullable, max_size=2)
            ),
            st.tuples(st.just("map"), st.sampled_from(["items", "is_empty", "len"])),
        ],
        "reducing": [
            st.just(("reducing", "get")),
            st.tuples(st.just("reducing"), st.just("add"), SMALL),
        ],
        "aggregating": [
            st.just(("aggregating", "get")),
            st.tuples(st.just("aggregating"), st.just("add"), SMALL),
        ],
    }

    def of(name: str) -> st.SearchStrategy[tuple[Any, ...]]:
        mine = [*calls[name], st.just((name, "clear"))]
        if merges and KINDS[name].kind in MERGING:
            merge = st.tuples(
                st.just(name),
                st.just("merge"),
                st.sampled_from(namespaces),
                st.lists(st.sampled_from(namespaces), max_size=2),
            )
            mine = [merge, *mine]
        return pick(mine)

    return st.sampled_from(sorted(states)).flatmap(of)


def pick(options: list[st.SearchStrategy[tuple[Any, ...]]]) -> st.SearchStrategy[tuple[Any, ...]]:
    """One of ``options``, each as likely (``one_of`` favours its first and simplest ones)."""
    return st.sampled_from(range(len(options))).flatmap(lambda i: options[i])


def steps(
    *,
    merges: bool = True,
    ttl: bool = False,
    restores: bool = False,
    states: Iterable[str] = KINDS,
) -> st.SearchStrategy[tuple[Any, ...]]:
    # Under TTL fewer keys and namespaces, so that reads meet the writes they expire, and the
    # clock's steps (TTL is 10 ms) land on the expiry instant, just before and after it.
    keys = st.sampled_from(KEYS[:2] if ttl else KEYS)
    spaces = NAMESPACES[:2] if ttl else NAMESPACES
    names = st.sampled_from(sorted(states))
    calls = state_calls(merges=merges, states=states, namespaces=spaces)
    options = [
        *([st.tuples(st.just("advance"), st.sampled_from([1, 5, 9, 10]))] if ttl else []),
        st.tuples(st.just("key"), keys),
        st.tuples(st.just("ns"), names, st.sampled_from(spaces)),
        calls,
        calls,
        calls,
        st.tuples(st.just("keys"), names, st.sampled_from(spaces)),
    ]
    if restores:
        options.append(st.just(("checkpoint",)))
        options.append(restore_steps())
    return pick(options)


@st.composite
def restore_steps(draw: st.DrawFn) -> tuple[Any, ...]:
    backend = draw(st.sampled_from(["heap", "rocksdb"]))
    max_parallelism = draw(st.sampled_from([1, 2, 3, 4, 8, 128]))
    parallelism = draw(st.integers(1, min(max_parallelism, 3)))
    return ("restore", backend, parallelism, max_parallelism)


def programs(max_size: int = 30, **kw: Any) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    return st.lists(steps(**kw), min_size=8, max_size=max_size)


# -- the run on statecore --------------------------------------------------------------------
class Subtasks:
    """The running subtasks of one operator: a backend per key-group range, one clock."""

    def __init__(
        self,
        backend: str,
        parallelism: int,
        max_parallelism: int,
        clock: ManualTimeProvider,
        ttl: StateTtlConfig | None,
        restored: dict[str, dict[int, pa.Table]] | None = None,
    ) -> None:
        self.parallelism, self.max_parallelism = parallelism, max_parallelism
        self.descriptors = descriptors(ttl)
        self.backends: list[KeyedStateBackend] = []
        self.handles: list[dict[str, Any]] = []
        try:
            for i in range(parallelism):
                kgs = compute_key_group_range_for_operator_index(max_parallelism, parallelism, i)
                made = create_backend(
                    backend_parameters(backend),
                    key_type=TypeInfo.of(str),
                    key_group_range=kgs,
                    max_parallelism=max_parallelism,
                    ttl_time_provider=clock,
                    restore_source=None if restored is None else _source(restored, kgs),
                )
                self.backends.append(made)
                self.handles.append(
                    {n: made.get_partitioned_state(d) for n, d in self.descriptors.items()}
                )
        except BaseException:
            self.close()
            raise

    def owner(self, key: str) -> int:
        return assign_key_to_parallel_operator(key, self.max_parallelism, self.parallelism)

    def snapshot(self) -> dict[str, dict[int, pa.Table]]:
        out: dict[str, dict[int, pa.Table]] = {name: {} for name in self.descriptors}
        for backend in self.backends:
            for name in self.descriptors:
                for kg in backend.key_group_range:
                    rows = backend.snapshot_key_group(name, kg)
                    if rows.num_rows:
                        out[name][kg] = rows
        return out

    def close(self) -> None:
        for backend in self.backends:
            backend.close()


def backend_parameters(name: str) -> BackendParameters:
    """The backend, a RocksDB instance on tmpfs when there is one (creating a column family
    syncs the disk: 20 ms each on disk, far less in memory)."""
    if name == "rocksdb" and os.path.isdir(SHM):
        return BackendParameters(name=name, options=RocksDBOptions(local_directory=SHM_DIR))
    return BackendParameters.of(name)


def _source(snapshot: dict[str, dict[int, pa.Table]], key_groups: Iterable[int]) -> RestoreSource:
    mine = set(key_groups)

    def read(descriptor: StateDescriptor) -> Iterator[tuple[int, pa.Table]]:
        rows = snapshot.get(descriptor.name, {})
        return ((kg, rows[kg]) for kg in sorted(rows) if kg in mine)

    return read


def regroup(
    snapshot: dict[str, dict[int, pa.Table]], max_parallelism: int
) -> dict[str, dict[int, pa.Table]]:
    """Each row under its key group at ``max_parallelism``, recomputed from its key (what a
    rescale past the max parallelism writes, ``statecore.ops.rescale``)."""
    out: dict[str, dict[int, pa.Table]] = {}
    for name, by_kg in snapshot.items():
        tables = list(by_kg.values())
        out[name] = {}
        if not tables:
            continue
        rows = pa.concat_tables(tables)
        groups = assign_to_key_groups(rows.column("key"), max_parallelism)
        for kg in np.unique(groups):
            out[name][int(kg)] = rows.filter(pa.array(groups == kg))
    return out


def model_ttl(config: StateTtlConfig | None) -> ModelTtl | None:
    if config is None:
        return None
    return ModelTtl(
        ttl_ms=config.ttl_ms,
        update_on_read=config.update_type.value == "on_read_and_write",
        return_expired=config.visibility.value == "return_expired_if_not_cleaned_up",
    )


def run(
    program: list[tuple[Any, ...]],
    *,
    backend: str,
    ttl: StateTtlConfig | None = None,
    parallelism: int = 1,
    max_parallelism: int = 128,
) -> None:
    """Run ``program`` on statecore and on the model; fail at the first difference."""
    clock = ManualTimeProvider(0)
    model = KeyedModel(KINDS, model_ttl(ttl), parallelism, max_parallelism)
    task = Subtasks(backend, parallelism, max_parallelism, clock, ttl)
    checkpoint: tuple[dict[str, dict[int, pa.Table]], Any] | None = None
    namespaces = dict.fromkeys(KINDS, "")
    key = KEYS[0]
    model.key = key
    try:
        for n, step in enumerate(program):
            where = f"step {n} {step!r}"
            op = step[0]
            if op == "key":
                key = model.key = step[1]
            elif op == "ns":
                namespaces[step[1]] = model.namespace[step[1]] = step[2]
            elif op == "keys":
                real = [sorted(b.keys(step[1], step[2])) for b in task.backends]
                assert real == model.keys(step[1], step[2]), where
            elif op == "advance":
                clock.advance(step[1])
                model.now = clock.now_ms
            elif op == "checkpoint":
                full = ttl is not None and ttl.cleanup is CleanupStrategy.FULL_SNAPSHOT
                checkpoint = (task.snapshot(), model.checkpoint(drop_expired=full))
            elif op == "restore":
                if checkpoint is None:
                    continue
                _, kind, p, m = step
                rows = checkpoint[0]
                if m != task.max_parallelism:
                    rows = regroup(rows, m)
                task.close()
                task = Subtasks(kind, p, m, clock, ttl, restored=rows)
                model.restore(checkpoint[1], p, m)
                namespaces = dict.fromkeys(KINDS, "")
            else:
                i = task.owner(key)
                backend_ = task.backends[i]
                backend_.set_current_key(key)
                handle = task.handles[i][op]
                handle.set_current_namespace(namespaces[op])
                real_result = call_real(handle, step, model)
                model_result = call_model(model, step)
                assert real_result == model_result, (
                    f"{where}: statecore {real_result!r}, model {model_result!r}"
                )
    finally:
        task.close()


def call_real(state: Any, step: tuple[Any, ...], model: KeyedModel) -> Any:
    name, method, *args = step
    if method == "append":
        acc = state.value()
        acc.append(args[0])
        state.update(acc)
        return None
    if method == "append_unset":
        unset = not model.is_set(name)
        acc = state.value()
        if unset:
            acc.append(args[0])
        return None
    if method == "increment":
        state.update(state.value() + 1)
        return None
    if method == "merge":
        state.merge_namespaces(args[0], args[1])
        return None
    if method == "items":
        return dict(state.items())
    if method == "len":
        return len(state)
    result = getattr(state, method)(*copy.deepcopy(args))
    if method == "get" and name == "list":
        return list(result)
    return result


def call_model(model: KeyedModel, step: tuple[Any, ...]) -> Any:
    name, method, *args = step
    kind = KINDS[name].kind
    if kind == "value":
        if method == "value":
            return model.value(name)
        if method == "update":
            return model.update(name, args[0])
        if method == "append":
            model.update(name, model.value(name) + [args[0]])
            return None
        if method == "append_unset":
            model.value(name)
            return None
        if method == "increment":
            model.update(name, model.value(name) + 1)
            return None
    if method == "clear":
        return model.clear(name)
    if method == "merge":
        return model.merge_namespaces(name, args[0], args[1])
    if kind == "list":
        if method == "get":
            return model.list_get(name)
        if method == "add":
            return model.list_add_all(name, [args[0]])
        if method == "add_all":
            return model.list_add_all(name, args[0])
        return model.list_update(name, args[0])
    if kind == "map":
        if method == "get":
            return model.map_get(name, args[0])
        if method == "contains":
            return model.map_contains(name, args[0])
        if method == "remove":
            return model.map_remove(name, args[0])
        if method == "put":
            return model.map_put(name, args[0], args[1])
        if method == "put_all":
            for k, v in args[0].items():
                model.map_put(name, k, v)
            return None
        if method == "items":
            return model.map_items(name)
        if method == "is_empty":
            return not model.map_items(name)
        return len(model.map_items(name))
    if method == "get":
        return model.folded_get(name)
    return model.folded_add(name, args[0])
