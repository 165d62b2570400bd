"""Plain models of Flink's two-input operators, and the functions they are compared with.

- **Two inputs** (:class:`TwoInputModel`, Flink's ``KeyedCoProcessOperator``): both inputs of a
  key share its state and its timers. The first input adds to the key's ``total`` and sets a
  timer; the second sets or forgets the key's ``profile`` and sets or deletes a timer; each
  element emits what it saw of both, and each timer emits the key's state when the watermark
  passes it (one timer per key and timestamp).
- **Broadcast state** (:class:`BroadcastModel`, Flink's ``CoBroadcastWithKeyedOperator``): every
  parallel instance has its own copy of the broadcast state and every broadcast element reaches
  every instance (``set`` and ``remove`` a rule, each instance emitting the rules it now has;
  ``visit``: ``applyToKeyedState``, each instance adding to the ``count`` of every key it holds).
  A keyed element reaches the instance owning its key, counts, and reads that instance's
  rules. A restore at another parallelism gives instance ``i`` the broadcast state of old
  instance ``i % old_parallelism`` and each key's state to the
  instance owning its key group.

Elements are :class:`Record` s; a record of program ``-1`` carries the watermark of a Spark run
(see :mod:`.spark_runs`) and is ignored. Keys are ``"<program>:<key>"``.
"""

from __future__ import annotations

import copy
import os
import signal
from collections import namedtuple
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from statecore.descriptors import MapStateDescriptor, ValueStateDescriptor
from statecore.keygroups import assign_key_to_parallel_operator
from statecore.runtime import KeyedBroadcastProcessFunction, KeyedCoProcessFunction

from .model import TimerModel

__all__ = [
    "BroadcastModel",
    "Enrich",
    "KillPoint",
    "Record",
    "Rules",
    "TwoInputModel",
    "broadcast_records",
    "rules_descriptor",
    "two_input_records",
]

Record = namedtuple("Record", "program key step ts op value delay")
"""An element of either input (a broadcast element's ``key`` is its rule's name)."""
Out = tuple[int, str, int, str]
"""An output row: the program, the key (``""`` from a broadcast element), the step (``-1``
from a timer) and what it says, as text."""
CARRIER = -1
"""The program of a record that only carries a watermark."""

TOTAL = ValueStateDescriptor("total", int, default=0)
PROFILE = ValueStateDescriptor("profile", int)
COUNT = ValueStateDescriptor("count", int, default=0)


def program_of(key: str) -> int:
    return int(key.split(":", 1)[0])


def rules_descriptor(program: int) -> MapStateDescriptor:
    """The broadcast state of ``program``: each rule's name and value."""
    return MapStateDescriptor(f"rules_{program}", str, int)


@dataclass(frozen=True)
class KillPoint:
    """Where a task's process is killed (SIGKILL) once: at the record of ``program`` and
    ``step``, unless ``marker`` exists (it is created first, so the retry passes)."""

    program: int
    step: int
    marker: str

    def reached(self, program: int, step: int) -> None:
        if (program, step) != (self.program, self.step):
            return
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)


# -- two inputs -----------------------------------------------------------------------------
def two_input_records(program: int) -> st.SearchStrategy[list[tuple[int, Record]]]:
    """A program's elements, each with its input (1 or 2); steps are positions."""
    first = st.tuples(
        st.just(1), st.sampled_from("ab"), st.just("add"), st.integers(1, 9), st.integers(0, 10)
    )
    second = st.tuples(
        st.just(2),
        st.sampled_from("ab"),
        st.sampled_from(["profile", "profile", "forget"]),
        st.integers(1, 9),
        st.integers(0, 10),
    )
    drawn = st.lists(
        st.tuples(st.one_of(first, second), st.integers(0, 40)), min_size=1, max_size=16
    )
    return drawn.map(
        lambda elements: [
            (side, Record(program, f"{program}:{key}", step, ts, op, value, delay))
            for step, ((side, key, op, value, delay), ts) in enumerate(elements)
        ]
    )


class Enrich(KeyedCoProcessFunction):
    """The two-input function: see the module docstring."""

    def __init__(self, kill: KillPoint | None = None) -> None:
        self.kill = kill

    def open(self, ctx: Any) -> None:
        self.total = ctx.get_state(TOTAL)
        self.profile = ctx.get_state(PROFILE)

    def _seen(self, record: Record, what: str) -> list[Out]:
        seen = (what, self.total.value(), self.profile.value())
        return [(record.program, record.key, record.step, repr(seen))]

    def process_element1(self, value: Record, ctx: Any) -> list[Out] | None:
        if value.program == CARRIER:
            return None
        if self.kill is not None:
            self.kill.reached(value.program, value.step)
        self.total.update(self.total.value() + value.value)
        ctx.timer_service.register_event_time_timer(value.ts + value.delay)
        return self._seen(value, "add")

    def process_element2(self, value: Record, ctx: Any) -> list[Out]:
        if self.kill is not None:
            self.kill.reached(value.program, value.step)
        if value.op == "forget":
            self.profile.clear()
            ctx.timer_service.delete_event_time_timer(value.ts + value.delay)
        else:
            self.profile.update(value.value)
            ctx.timer_service.register_event_time_timer(value.ts + value.delay)
        return self._seen(value, value.op)

    def on_timer(self, timestamp: int, ctx: Any) -> Iterator[Out]:
        key = ctx.current_key
        state = (self.total.value(), self.profile.value())
        yield program_of(key), key, -1, repr(("timer", timestamp, *state))


@dataclass
class TwoInputModel:
    """Each key's ``total`` and ``profile``, and the timers of both inputs."""

    total: dict[str, int] = field(default_factory=dict)
    profile: dict[str, int] = field(default_factory=dict)
    timers: TimerModel = field(default_factory=TimerModel)

    def _seen(self, record: Record, what: str) -> list[Out]:
        key = record.key
        seen = (what, self.total.get(key, 0), self.profile.get(key))
        return [(record.program, key, record.step, repr(seen))]

    def element(self, side: int, record: Record) -> list[Out]:
        key, fires_at = record.key, record.ts + record.delay
        if side == 1:
            self.total[key] = self.total.get(key, 0) + record.value
            self.timers.register(key, fires_at)
            return self._seen(record, "add")
        if record.op == "forget":
            self.profile.pop(key, None)
            self.timers.delete(key, fires_at)
        else:
            self.profile[key] = record.value
            self.timers.register(key, fires_at)
        return self._seen(record, record.op)

    def advance(self, watermark: int) -> list[Out]:
        def fire(key: str, timestamp: int) -> list[Out]:
            state = (self.total.get(key, 0), self.profile.get(key))
            return [(program_of(key), key, -1, repr(("timer", timestamp, *state)))]

        return self.timers.advance(watermark, fire)


# -- broadcast state ------------------------------------------------------------------------
def broadcast_records(program: int) -> st.SearchStrategy[list[tuple[int, Record]]]:
    """A program's elements: keyed ones (input 1: count, read the rule ``op``) and broadcast
    ones (input 2: ``set`` or ``remove`` the rule ``key``, or ``visit`` every key)."""
    keyed = st.tuples(st.just(1), st.sampled_from("abcd"), st.sampled_from("xy"), st.just(0))
    broadcast = st.tuples(
        st.just(2),
        st.sampled_from("xy"),
        st.sampled_from(["set", "set", "remove", "visit"]),
        st.integers(1, 9),
    )
    drawn = st.lists(st.one_of(keyed, keyed, broadcast), min_size=1, max_size=16)
    return drawn.map(
        lambda elements: [
            (
                side,
                Record(program, f"{program}:{key}" if side == 1 else key, step, step, op, value, 0),
            )
            for step, (side, key, op, value) in enumerate(elements)
        ]
    )


class Rules(KeyedBroadcastProcessFunction):
    """The broadcast function: see the module docstring."""

    def __init__(self, kill: KillPoint | None = None) -> None:
        self.kill = kill

    def open(self, ctx: Any) -> None:
        self.count = ctx.get_state(COUNT)

    def process_element(self, value: Record, ctx: Any) -> list[Out] | None:
        if value.program == CARRIER:
            return None
        if self.kill is not None:
            self.kill.reached(value.program, value.step)
        self.count.update(self.count.value() + 1)
        rule = ctx.get_broadcast_state(rules_descriptor(value.program)).get(value.op)
        return [(value.program, value.key, value.step, repr(("event", self.count.value(), rule)))]

    def process_broadcast_element(self, value: Record, ctx: Any) -> list[Out]:
        if self.kill is not None:
            self.kill.reached(value.program, value.step)
        rules = ctx.get_broadcast_state(rules_descriptor(value.program))
        if value.op == "set":
            rules.put(value.key, value.value)
        elif value.op == "remove":
            rules.remove(value.key)
        else:
            out: list[Out] = []
            prefix = f"{value.program}:"

            def visit(key: str, state: Any) -> None:
                if key.startswith(prefix):
                    state.update(state.value() + value.value)
                    out.append((value.program, key, value.step, repr(("visit", state.value()))))

            ctx.apply_to_keyed_state(COUNT, visit)
            return out
        return [(value.program, "", value.step, repr(("rules", sorted(rules.items()))))]


@dataclass
class BroadcastModel:
    """Each instance's broadcast state (per program) and the keys' counts, at ``parallelism``
    instances of ``max_parallelism`` key groups."""

    parallelism: int
    max_parallelism: int
    rules: list[dict[int, dict[str, int]]] = field(default_factory=list)
    count: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rules = self.rules or [{} for _ in range(self.parallelism)]

    def instance_of(self, key: str) -> int:
        return assign_key_to_parallel_operator(key, self.max_parallelism, self.parallelism)

    def element(self, side: int, record: Record) -> list[Out]:
        program = record.program
        if side == 1:
            key = record.key
            self.count[key] = self.count.get(key, 0) + 1
            rule = self.rules[self.instance_of(key)].get(program, {}).get(record.op)
            return [(program, key, record.step, repr(("event", self.count[key], rule)))]
        out: list[Out] = []
        for instance, states in enumerate(self.rules):
            rules = states.setdefault(program, {})
            if record.op == "set":
                rules[record.key] = record.value
            elif record.op == "remove":
                rules.pop(record.key, None)
            if record.op != "visit":
                out.append((program, "", record.step, repr(("rules", sorted(rules.items())))))
                continue
            for key in sorted(self.count):
                if self.instance_of(key) == instance and key.startswith(f"{program}:"):
                    self.count[key] += record.value
                    out.append((program, key, record.step, repr(("visit", self.count[key]))))
        return out

    def restore(self, parallelism: int, max_parallelism: int) -> None:
        """A checkpoint restored at ``parallelism`` and ``max_parallelism`` (instance ``i``
        gets old instance ``i % old_parallelism``'s broadcast state, Flink's rule)."""
        old = self.rules
        self.rules = [copy.deepcopy(old[i % len(old)]) for i in range(parallelism)]
        self.parallelism, self.max_parallelism = parallelism, max_parallelism
