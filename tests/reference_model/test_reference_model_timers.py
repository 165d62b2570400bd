"""Event-time timers and the watermark through the harness
(:class:`~statecore.testing.KeyedProcessFunctionHarness`) against the reference model:
registrations and deletions per key, duplicates, timers registered while firing (later ones,
and ones already behind the watermark, which fire in the same advance), snapshots restored on
either backend (the restored watermark fires what is due)."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterator
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from statecore import KeyedProcessFunction, ValueStateDescriptor
from statecore.testing import KeyedProcessFunctionHarness, OperatorSubtaskState

from .keyed import KEYS, backend_parameters
from .model import TimerModel

PROFILE = settings.get_profile("reference_model")

Command = namedtuple("Command", "key op timestamp")


def follow_ups(timestamp: int) -> list[int]:
    """The timers ``on_timer`` registers: a later one, and one already behind the watermark."""
    out = []
    if timestamp % 3 == 0:
        out.append(timestamp + 2)
    if timestamp % 5 == 0:
        out.append(timestamp - 1)
    return out


class TimerProgram(KeyedProcessFunction):
    """Counts a key's commands; registers or deletes the command's timer; a timer emits
    ``(key, timestamp, count)`` and registers its :func:`follow_ups`."""

    def open(self, ctx: Any) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", int, default=0))

    def process_element(self, command: Command, ctx: Any) -> None:
        self.count.update(self.count.value() + 1)
        if command.op == "register":
            ctx.timer_service.register_event_time_timer(command.timestamp)
        else:
            ctx.timer_service.delete_event_time_timer(command.timestamp)

    def on_timer(self, timestamp: int, ctx: Any) -> Iterator[tuple[Any, int, int]]:
        yield (ctx.current_key, timestamp, self.count.value())
        for later in follow_ups(timestamp):
            ctx.timer_service.register_event_time_timer(later)


class Model:
    def __init__(self) -> None:
        self.timers = TimerModel()
        self.counts: dict[str, int] = {}

    def element(self, command: Command) -> None:
        self.counts[command.key] = self.counts.get(command.key, 0) + 1
        if command.op == "register":
            self.timers.register(command.key, command.timestamp)
        else:
            self.timers.delete(command.key, command.timestamp)

    def on_timer(self, key: str, timestamp: int) -> list[Any]:
        for later in follow_ups(timestamp):
            self.timers.register(key, later)
        return [(key, timestamp, self.counts.get(key, 0))]

    def advance(self, watermark: int, fired: list[tuple[Any, int, int]]) -> list[Any]:
        """What advancing the watermark emits, firing timers of one timestamp in the order
        statecore ``fired`` them where that order is valid."""
        order = [(ts, key) for key, ts, _ in fired]
        return self.timers.advance(watermark, self.on_timer, order)


STEPS = st.one_of(
    st.builds(
        lambda key, op, ts: ("element", Command(key, op, ts)),
        st.sampled_from(KEYS[:3]),
        st.sampled_from(["register", "register", "delete"]),
        st.integers(0, 30),
    ),
    st.tuples(st.just("watermark"), st.integers(0, 40)),
    st.just(("timers",)),
    st.just(("snapshot",)),
    st.tuples(st.just("restore"), st.sampled_from(["heap", "rocksdb"])),
)


def harness(backend: str, restore: OperatorSubtaskState | None) -> KeyedProcessFunctionHarness:
    return KeyedProcessFunctionHarness(
        TimerProgram(), key="key", backend=backend_parameters(backend), restore=restore
    )


@settings(PROFILE)
# Two keys' timers of one timestamp, each registering one behind the watermark while firing:
# statecore fires b@0, b@-1, a@0, a@-1, a valid order (the lowest timestamp first, ties open).
@example(
    backend="heap",
    program=[
        ("watermark", 0),
        ("element", Command("a", "register", 0)),
        ("element", Command("b", "register", 0)),
        ("watermark", 0),
    ],
)
@given(
    backend=st.sampled_from(["heap", "rocksdb"]),
    program=st.lists(STEPS, min_size=5, max_size=30),
)
def test_reference_model_timers_and_watermark(backend: str, program: list[tuple[Any, ...]]) -> None:
    model = Model()
    running = harness(backend, None)
    saved: tuple[OperatorSubtaskState, Model] | None = None
    try:
        for n, step in enumerate(program):
            where = f"step {n} {step!r}"
            if step[0] == "element":
                running.process_element(step[1], timestamp=step[1].timestamp)
                model.element(step[1])
            elif step[0] == "watermark":
                real = running.advance_watermark(step[1])
                assert real == model.advance(step[1], real), where
            elif step[0] == "timers":
                pending = sorted((t.key, t.timestamp) for t in running.timers())
                assert pending == sorted((k, ts) for ts, k in model.timers.timers), where
                for key in KEYS[:3]:
                    assert running.state("count", key=key) == model.counts.get(key, 0), where
            elif step[0] == "snapshot":
                saved = (running.snapshot(), _copy(model))
            elif saved is not None:
                running.close()
                running = harness(step[1], saved[0])
                model = _copy(saved[1])
                real = running.output
                expected = [] if model.timers.watermark is None else model.advance(0, real)
                assert real == expected, where
    finally:
        running.close()


def _copy(model: Model) -> Model:
    out = Model()
    out.counts = dict(model.counts)
    out.timers.timers = set(model.timers.timers)
    out.timers.watermark = model.timers.watermark
    return out
