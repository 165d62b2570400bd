"""Two inputs and the broadcast state pattern through the harness against their models
(:mod:`.two_inputs`), with the watermark advancing (two inputs) and snapshots restored on the
other backend mid-program. After each element the outputs must equal the model's; the
broadcast program's restores also keep the instance's broadcast state (its operator state)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from statecore.backends.timers import MAX_WATERMARK
from statecore.testing import KeyedBroadcastHarness, KeyedTwoInputHarness

from .keyed import backend_parameters
from .two_inputs import (
    BroadcastModel,
    Enrich,
    Record,
    Rules,
    TwoInputModel,
    broadcast_records,
    rules_descriptor,
    two_input_records,
)

PROFILE = settings(
    settings.get_profile("reference_model"),
    max_examples=max(settings.get_profile("reference_model").max_examples // 4, 20),
)

Command = tuple[Any, ...]


def with_pauses(
    records: st.SearchStrategy[list[tuple[int, Record]]],
) -> st.SearchStrategy[list[Command]]:
    """``records`` with watermark advances and restores drawn between them."""
    pause = st.one_of(st.tuples(st.just("advance"), st.integers(0, 60)), st.just(("restore",)))
    between = st.lists(pause, max_size=2)

    @st.composite
    def interleaved(draw: st.DrawFn) -> list[Command]:
        out: list[Command] = []
        for side, record in draw(records):
            out += draw(between)
            out.append(("element", side, record))
        return out + draw(between)

    return interleaved()


@PROFILE
@given(
    first_backend=st.sampled_from(["heap", "rocksdb"]), program=with_pauses(two_input_records(0))
)
def test_reference_model_two_input_shares_state_and_timers(
    first_backend: str, program: list[Command]
) -> None:
    model = TwoInputModel()
    backend = first_backend

    def open_harness(restore: Any = None) -> KeyedTwoInputHarness:
        return KeyedTwoInputHarness(
            Enrich(), key="key", backend=backend_parameters(backend), restore=restore
        )

    harness = open_harness()
    try:
        for n, command in enumerate(program):
            if command[0] == "element":
                _, side, record = command
                feed = harness.process_element1 if side == 1 else harness.process_element2
                got, expected = feed(record, record.ts), model.element(side, record)
            elif command[0] == "advance":
                watermark = max(command[1], harness.watermark)
                got, expected = harness.advance_watermark(watermark), model.advance(watermark)
            else:
                saved = harness.snapshot()
                harness.close()
                backend = "rocksdb" if backend == "heap" else "heap"
                harness = open_harness(saved)
                # a restore advances to the snapshot's watermark: timers set behind it fire
                got, expected = harness.output, model.advance(saved.watermark)
            assert sorted(got) == sorted(expected), (n, command)
        assert sorted(harness.end_input()) == sorted(model.advance(MAX_WATERMARK))
    finally:
        harness.close()


@PROFILE
@given(
    first_backend=st.sampled_from(["heap", "rocksdb"]), program=with_pauses(broadcast_records(0))
)
def test_reference_model_broadcast_pattern_every_instance_has_the_rules(
    first_backend: str, program: list[Command]
) -> None:
    model = BroadcastModel(parallelism=1, max_parallelism=128)
    backend = first_backend

    def open_harness(restore: Any = None) -> KeyedBroadcastHarness:
        return KeyedBroadcastHarness(
            Rules(),
            key="key",
            states=[rules_descriptor(0)],
            backend=backend_parameters(backend),
            restore=restore,
        )

    harness = open_harness()
    try:
        for n, command in enumerate(program):
            if command[0] == "element":
                _, side, record = command
                if side == 1:
                    got = harness.process_element(record, record.ts)
                else:
                    got = harness.process_broadcast_element(record, record.ts)
                assert sorted(got) == sorted(model.element(side, record)), (n, command)
            elif command[0] == "restore":
                saved = harness.snapshot()
                harness.close()
                backend = "rocksdb" if backend == "heap" else "heap"
                harness = open_harness(saved)
                model.restore(1, 128)
            assert harness.broadcast_state(rules_descriptor(0)) == model.rules[0].get(0, {})
    finally:
        harness.close()
