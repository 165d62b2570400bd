"""Windows through the harness against the model of Flink's ``WindowOperator``
(:mod:`.windows`): every assigner (tumbling, sliding, session with merging, global), the
event-time, count and purging triggers, allowed lateness and the late side output, and each
window function (``process``, incremental ``reduce`` and ``aggregate``), with the watermark
advancing and snapshots restored on the other backend mid-program.

A program is a list of commands: an element (key, value, timestamp), a watermark advance, or a
restore (snapshot, close, reopen on the other backend). After each command the windows fired
must equal the model's (as multisets: the order among windows firing at one timestamp is the
timer queue's), and at the end the late side output too. The end of input fires what is left.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from statecore.testing import KeyedProcessFunctionHarness

from .keyed import backend_parameters
from .windows import FUNCTIONS, LATE, MAX, WindowModel, WindowSpec, operator, window_specs

PROFILE = settings(
    settings.get_profile("reference_model"),
    # a quarter of the profile's examples: each opens harnesses (RocksDB ones too) per restore
    max_examples=max(settings.get_profile("reference_model").max_examples // 4, 20),
)

Command = namedtuple("Command", "op key value timestamp")


def commands() -> st.SearchStrategy[list[Command]]:
    element = st.builds(
        Command,
        st.just("element"),
        st.sampled_from("abc"),
        st.integers(1, 9),
        st.integers(0, 60),
    )
    advance = st.builds(Command, st.just("advance"), st.just(""), st.just(0), st.integers(0, 70))
    restore = st.just(Command("restore", "", 0, 0))
    return st.lists(st.one_of(element, element, advance, restore), max_size=30)


@PROFILE
@given(
    spec=st.sampled_from(FUNCTIONS).flatmap(window_specs),
    first_backend=st.sampled_from(["heap", "rocksdb"]),
    program=commands(),
)
def test_reference_model_window_operator_matches_flinks_windows(
    spec: WindowSpec, first_backend: str, program: list[Command]
) -> None:
    model = WindowModel(spec)
    backend = first_backend
    keys: dict[int, str] = {}
    late: list[Any] = []  # the late side output of the harnesses closed so far

    def open_harness(restore: Any = None) -> KeyedProcessFunctionHarness:
        return KeyedProcessFunctionHarness(
            operator(spec),
            key=lambda element: keys[element[1]],
            backend=backend_parameters(backend),
            restore=restore,
        )

    harness = open_harness()
    try:
        for step, command in enumerate(program):
            if command.op == "element":
                keys[step] = command.key
                element = (0, step, command.value)
                got = harness.process_element(element, command.timestamp)
                expected = model.element(command.key, element, command.timestamp)
            elif command.op == "advance":
                watermark = max(command.timestamp, harness.watermark)
                got = harness.advance_watermark(watermark)
                expected = model.advance(watermark)
            else:
                saved = harness.snapshot()
                late += harness.side_output(LATE)
                harness.close()
                backend = "rocksdb" if backend == "heap" else "heap"
                harness = open_harness(saved)
                continue
            assert sorted(got) == sorted(expected), (step, command)
        assert sorted(harness.end_input()) == sorted(model.advance(MAX))
        assert late + harness.side_output(LATE) == model.late
        if spec.event_time:
            assert harness.timers() == []
    finally:
        harness.close()
