"""Operator list, union and broadcast state redistributed over chains of rescales, against the
reference model's ``RoundRobinOperatorStateRepartitioner``.

statecore's side is :class:`~statecore.backends.OperatorStateStore` per subtask, its snapshot
rows, :func:`~statecore.backends.operator.repartition` over them the way a restore applies it
(``RestorePlan.operator_state``, which reads the rows from Delta tables: the index ranges of each
old subtask's rows, then ``take``), and a new store restored from the rows each subtask gets."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from statecore.backends import OperatorStateStore
from statecore.backends.operator import OperatorStateMode, repartition
from statecore.descriptors import ListStateDescriptor, MapStateDescriptor

from .model import redistribute

PROFILE = settings.get_profile("reference_model")

MODES = {"offsets": "split", "positions": "split", "everyone": "union", "rules": "broadcast"}


def open_states(store: OperatorStateStore) -> dict[str, Any]:
    return {
        "offsets": store.get_list_state(ListStateDescriptor("offsets", int)),
        "positions": store.get_list_state(ListStateDescriptor("positions", int)),
        "everyone": store.get_union_list_state(ListStateDescriptor("everyone", int)),
        "rules": store.get_broadcast_state(MapStateDescriptor("rules", str, int)),
    }


def read(state: Any, name: str) -> Any:
    return sorted(state.items()) if MODES[name] == "broadcast" else state.get()


def restore_rows(
    snapshots: list[dict[str, pa.Table]], parallelism: int
) -> list[dict[str, pa.Table]]:
    """Each new subtask's rows per state (the glue of ``RestorePlan.operator_state``)."""
    old_p = len(snapshots)
    states: dict[str, tuple[OperatorStateMode, list[range]]] = {}
    tables: dict[str, pa.Table] = {}
    for name in MODES:
        parts = [s[name] for s in snapshots]
        if not any(p.num_rows for p in parts):
            continue
        offset, ranges = 0, []
        for part in parts:
            ranges.append(range(offset, offset + part.num_rows))
            offset += part.num_rows
        mode = OperatorStateMode(_mode(parts))
        states[name] = (mode, ranges)
        tables[name] = pa.concat_tables(parts)
    return [
        {name: tables[name].take(pa.array(indices, pa.int64())) for name, indices in mine.items()}
        for mine in repartition(states, old_p, parallelism)
    ]


def _mode(parts: list[pa.Table]) -> str:
    return next(p.column("mode")[0].as_py() for p in parts if p.num_rows)


def model_redistribute(
    contents: list[dict[str, list[Any]]], parallelism: int
) -> list[dict[str, list[Any]]]:
    out: list[dict[str, list[Any]]] = [{} for _ in range(parallelism)]
    start = 0
    for name in sorted(MODES):
        parts = [c[name] for c in contents]
        if MODES[name] == "split":
            mine, start = redistribute("split", parts, parallelism, start)
        else:
            mine, _ = redistribute(MODES[name], parts, parallelism)
        for i in range(parallelism):
            out[i][name] = mine[i]
    return out


ADDITIONS = st.lists(
    st.tuples(st.sampled_from(sorted(MODES)), st.integers(0, 99)), min_size=0, max_size=6
)


@settings(PROFILE)
@given(
    parallelisms=st.lists(st.integers(1, 5), min_size=2, max_size=4),
    data=st.data(),
)
def test_reference_model_operator_state_redistribution(
    parallelisms: list[int], data: st.DataObject
) -> None:
    snapshots: list[dict[str, pa.Table]] | None = None
    expected: list[dict[str, list[Any]]] | None = None
    for stage, parallelism in enumerate(parallelisms):
        restored = (
            [{} for _ in range(parallelism)]
            if snapshots is None
            else restore_rows(snapshots, parallelism)
        )
        if expected is not None:
            expected = model_redistribute(expected, parallelism)
        else:
            expected = [{name: [] for name in MODES} for _ in range(parallelism)]
        snapshots = []
        for i in range(parallelism):
            store = OperatorStateStore(restored=restored[i])
            states = open_states(store)
            mine = expected[i]
            for name in MODES:
                got = read(states[name], name)
                want = sorted(mine[name]) if MODES[name] == "broadcast" else mine[name]
                assert got == want, f"stage {stage}, subtask {i}/{parallelism}, state {name!r}"
            for name, value in data.draw(ADDITIONS, label=f"additions {stage}/{i}"):
                if MODES[name] == "broadcast":
                    states[name].put(f"r{value % 4}", value)
                    entries = dict(mine[name])
                    entries[f"r{value % 4}"] = value
                    mine[name] = list(entries.items())
                else:
                    states[name].add(value)
                    mine[name] = [*mine[name], value]
            snapshots.append({name: store.snapshot(name) for name in MODES})
