"""The broadcast state pattern (statecore.runtime.broadcast) through KeyedBroadcastHarness: no
Spark, both backends; broadcast state checkpointed as the subtask's operator state and
redistributed on rescale as Flink does (instance i from old instance i % old parallelism)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pytest

from statecore import ConfigError, MapStateDescriptor, StateAccessError, ValueStateDescriptor
from statecore.backends.operator import OperatorStateMode, repartition
from statecore.runtime.broadcast import KeyedBroadcastFunction, KeyedBroadcastProcessFunction
from statecore.runtime.co_process import TaggedElement
from statecore.runtime.functions import OutputTag
from statecore.testing import KeyedBroadcastHarness

BACKENDS = ["heap", "rocksdb"]
LIMITS = MapStateDescriptor("limits", str, int)


class Alerts(KeyedBroadcastProcessFunction):
    """Payments (keyed by user) over the broadcast per-currency limit; a new limit resets the
    running totals of every user (apply_to_keyed_state)."""

    def open(self, ctx: Any) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total", int, default=0))

    def process_element(self, payment: tuple[str, str, int], ctx: Any) -> Any:
        _user, currency, amount = payment
        self.total.update(self.total.value() + amount)
        limit = ctx.get_broadcast_state(LIMITS).get(currency)
        if limit is not None and self.total.value() > limit:
            yield ctx.current_key, currency, self.total.value()

    def process_broadcast_element(self, rule: tuple[str, int], ctx: Any) -> Any:
        currency, limit = rule
        ctx.get_broadcast_state(LIMITS).put(currency, limit)
        reset: list[str] = []

        def clear(key: Any, state: Any) -> None:
            reset.append(key)
            state.clear()

        ctx.apply_to_keyed_state(ValueStateDescriptor("total", int, default=0), clear)
        yield "reset", sorted(reset)


@pytest.mark.parametrize("backend", BACKENDS)
def test_broadcast_pattern_keyed_elements_read_the_broadcast_rules(backend: str) -> None:
    with KeyedBroadcastHarness(
        Alerts(), key=lambda p: p[0], states=[LIMITS], backend=backend
    ) as harness:
        assert harness.process_element(("ann", "EUR", 80)) == []  # no rule yet
        assert harness.process_broadcast_element(("EUR", 100)) == [("reset", ["ann"])]
        assert harness.process_element(("ann", "EUR", 60)) == []
        assert harness.process_element(("ann", "EUR", 50)) == [("ann", "EUR", 110)]
        assert harness.process_element(("bob", "USD", 500)) == []
        assert harness.broadcast_state(LIMITS) == {"EUR": 100}


@pytest.mark.parametrize("backend", BACKENDS)
def test_broadcast_pattern_apply_to_keyed_state_visits_every_key(backend: str) -> None:
    with KeyedBroadcastHarness(
        Alerts(), key=lambda p: p[0], states=[LIMITS], backend=backend
    ) as harness:
        harness.process_elements([("ann", "EUR", 1), ("bob", "EUR", 2), ("cy", "USD", 3)])
        assert harness.process_broadcast_element(("USD", 10)) == [("reset", ["ann", "bob", "cy"])]
        assert [harness.state("total", key=k) for k in ("ann", "bob", "cy")] == [0, 0, 0]


def test_broadcast_pattern_state_is_read_only_in_process_element() -> None:
    class Writes(Alerts):
        def process_element(self, payment: Any, ctx: Any) -> Any:
            ctx.get_broadcast_state(LIMITS).put("EUR", 1)

    with KeyedBroadcastHarness(Writes(), key=lambda p: p[0], states=[LIMITS]) as harness:
        with pytest.raises(StateAccessError, match="read-only in process_element"):
            harness.process_element(("ann", "EUR", 1))
        assert harness.broadcast_state(LIMITS) == {}
        other = MapStateDescriptor("other", str, int)
        with pytest.raises(StateAccessError, match="was not declared"):
            harness.adapter._broadcast.state(other)


@pytest.mark.parametrize(("first", "second"), [("heap", "rocksdb"), ("rocksdb", "heap")])
def test_broadcast_pattern_broadcast_state_is_checkpointed_and_restored(
    first: str, second: str
) -> None:
    with KeyedBroadcastHarness(
        Alerts(), key=lambda p: p[0], states=[LIMITS], backend=first
    ) as harness:
        harness.process_broadcast_element(("EUR", 100))
        harness.process_element(("ann", "EUR", 90))
        saved = harness.snapshot()
    assert saved.operator["limits"].num_rows == 1
    with KeyedBroadcastHarness(
        Alerts(), key=lambda p: p[0], states=[LIMITS], backend=second, restore=saved
    ) as restored:
        assert restored.broadcast_state(LIMITS) == {"EUR": 100}
        assert restored.process_element(("ann", "EUR", 20)) == [("ann", "EUR", 110)]


def test_broadcast_pattern_rescale_gives_each_instance_a_whole_copy() -> None:
    """Two instances (parallelism 2), rescaled to 3: instance i restores old instance
    i % 2's broadcast state, as Flink's broadcast state does; every copy is whole."""
    snapshots = []
    for limit in (100, 200):  # the instances' copies (equal in a job; apart here to see which)
        with KeyedBroadcastHarness(Alerts(), key=lambda p: p[0], states=[LIMITS]) as harness:
            harness.process_broadcast_element(("EUR", limit))
            snapshots.append(harness.snapshot())
    parts = [s.operator["limits"].to_pylist() for s in snapshots]
    schema = snapshots[0].operator["limits"].schema
    plan = repartition({"limits": (OperatorStateMode.BROADCAST, parts)}, 2, 3)
    limits = []
    for mine in plan:
        operator = {"limits": pa.Table.from_pylist(mine["limits"], schema=schema)}
        restore = dataclasses.replace(snapshots[0], operator=operator)
        with KeyedBroadcastHarness(
            Alerts(), key=lambda p: p[0], states=[LIMITS], restore=restore
        ) as harness:
            limits.append(harness.broadcast_state(LIMITS))
    assert limits == [{"EUR": 100}, {"EUR": 200}, {"EUR": 100}]


def test_broadcast_pattern_rejects_other_functions_and_runs_input_two_as_broadcast() -> None:
    with pytest.raises(ConfigError, match="not a KeyedBroadcastProcessFunction"):
        KeyedBroadcastFunction(object())  # type: ignore[arg-type]
    with KeyedBroadcastHarness(Alerts(), key=lambda p: "x", states=[LIMITS]) as harness:
        with pytest.raises(ConfigError, match="names input 3"):
            harness.task.process([("x", None, TaggedElement(3, ("EUR", 1)))])
        # an instance's copy of a broadcast element, as a Spark task gets it: input 2
        assert harness.task.process([("x", None, TaggedElement(2, ("EUR", 1)))]) == [("reset", [])]
        assert harness.broadcast_state(LIMITS) == {"EUR": 1}


class _Flag(KeyedBroadcastProcessFunction):
    """Sends each keyed element over the limit, and each new limit, to side outputs."""

    def process_element(self, value: Any, ctx: Any) -> Iterable[Any]:
        limit = ctx.get_broadcast_state(LIMITS).get("limit")
        if limit is not None and value[1] > limit:
            ctx.output(OutputTag("over"), value)
        yield value

    def process_broadcast_element(self, value: Any, ctx: Any) -> None:
        ctx.get_broadcast_state(LIMITS).put("limit", value)
        ctx.output(OutputTag("limits"), value)


def test_broadcast_pattern_both_contexts_emit_to_side_outputs() -> None:
    with KeyedBroadcastHarness(_Flag(), key=lambda r: r[0], states=[LIMITS]) as harness:
        assert harness.process_broadcast_element(5) == []
        assert harness.process_elements([("a", 3), ("b", 9)]) == [("a", 3), ("b", 9)]
        assert harness.side_output("limits") == [5]
        assert harness.side_output("over") == [("b", 9)]
