"""Two inputs over one keyed state (statecore.runtime.co_process) through the two-input
harness: no Spark, both backends."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import pytest

from statecore import (
    CheckpointedFunction,
    ConfigError,
    KeyedCoProcessFunction,
    ListStateDescriptor,
    ValueStateDescriptor,
)
from statecore.runtime.co_process import TaggedElement, TwoInputFunction
from statecore.testing import KeyedTwoInputHarness

Click = namedtuple("Click", "user page")
Profile = namedtuple("Profile", "user tier")
Order = namedtuple("Order", "order_id amount")
Payment = namedtuple("Payment", "order_ref paid")

BACKENDS = ["heap", "rocksdb"]


class Enrich(KeyedCoProcessFunction):
    """Clicks (input 1) enriched with the user's latest profile (input 2); clicks that come
    before any profile wait in state and are emitted when it arrives."""

    def open(self, ctx: Any) -> None:
        self.tier = ctx.get_state(ValueStateDescriptor("tier", str))
        self.waiting = ctx.get_list_state(ListStateDescriptor("waiting", str))

    def process_element1(self, click: Click, ctx: Any) -> Any:
        tier = self.tier.value()
        if tier is None:
            self.waiting.add(click.page)
            return
        yield click.user, click.page, tier

    def process_element2(self, profile: Profile, ctx: Any) -> Any:
        self.tier.update(profile.tier)
        for page in self.waiting.get():
            yield profile.user, page, profile.tier
        self.waiting.clear()


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_input_both_inputs_share_the_keys_state(backend: str) -> None:
    with KeyedTwoInputHarness(Enrich(), key="user", backend=backend) as harness:
        assert harness.process_element1(Click("ann", "/")) == []
        assert harness.process_element1(Click("bob", "/x")) == []
        assert harness.state("waiting", key="ann") == ["/"]
        assert harness.process_element2(Profile("ann", "gold")) == [("ann", "/", "gold")]
        assert harness.process_element1(Click("ann", "/cart")) == [("ann", "/cart", "gold")]
        assert harness.process_element2(Profile("ann", "silver")) == []
        assert harness.process_element1(Click("ann", "/pay")) == [("ann", "/pay", "silver")]
        # bob's state is his own: still waiting, no tier
        assert harness.state("waiting", key="bob") == ["/x"]
        assert harness.state("tier", key="bob") is None
        assert harness.keys("tier") == ["ann"]


class Match(KeyedCoProcessFunction):
    """Orders (input 1) matched with payments (input 2) by order id; an order unpaid 10 s
    after its event time times out (a timer registered by input 1, deleted by input 2)."""

    def open(self, ctx: Any) -> None:
        self.amount = ctx.get_state(ValueStateDescriptor("amount", int))
        self.deadline = ctx.get_state(ValueStateDescriptor("deadline", int))

    def process_element1(self, order: Order, ctx: Any) -> None:
        self.amount.update(order.amount)
        self.deadline.update(ctx.timestamp + 10_000)
        ctx.timer_service.register_event_time_timer(ctx.timestamp + 10_000)

    def process_element2(self, payment: Payment, ctx: Any) -> Any:
        deadline = self.deadline.value()
        if deadline is not None:
            ctx.timer_service.delete_event_time_timer(deadline)
            self.deadline.clear()
            yield "paid", ctx.current_key, self.amount.value()

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield "timed out", ctx.current_key, self.amount.value(), timestamp
        self.deadline.clear()


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_input_key_pair_selects_each_inputs_key(backend: str) -> None:
    keys = ("order_id", "order_ref")  # connect(...).key_by(k1, k2): a selector per input
    with KeyedTwoInputHarness(Match(), key=keys, key_type=int, backend=backend) as harness:
        harness.process_element1(Order(1, 30), timestamp=1_000)
        harness.process_element1(Order(2, 50), timestamp=2_000)
        assert harness.process_element2(Payment(1, True), timestamp=3_000) == [("paid", 1, 30)]
        assert [t.timestamp for t in harness.timers()] == [12_000]


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_input_timers_of_either_input_fire_on_timer(backend: str) -> None:
    keys = ("order_id", "order_ref")
    with KeyedTwoInputHarness(Match(), key=keys, key_type=int, backend=backend) as harness:
        harness.process_element1(Order(1, 30), timestamp=1_000)
        harness.process_element1(Order(2, 50), timestamp=2_000)
        harness.process_element2(Payment(2, True), timestamp=2_500)
        assert harness.advance_watermark(11_000) == [("timed out", 1, 30, 11_000)]
        assert harness.timers() == []
        assert harness.output == [("paid", 2, 50), ("timed out", 1, 30, 11_000)]


@pytest.mark.parametrize(("first", "second"), [("heap", "rocksdb"), ("rocksdb", "heap")])
def test_two_input_snapshot_restores_on_the_other_backend(first: str, second: str) -> None:
    keys = ("order_id", "order_ref")
    with KeyedTwoInputHarness(Match(), key=keys, key_type=int, backend=first) as harness:
        harness.process_element1(Order(7, 70), timestamp=5_000)
        harness.advance_watermark(6_000)
        saved = harness.snapshot()
    with KeyedTwoInputHarness(
        Match(), key=keys, key_type=int, backend=second, restore=saved
    ) as restored:
        assert restored.watermark == 6_000
        assert restored.state("amount", key=7) == 70
        assert restored.process_element2(Payment(7, True)) == [("paid", 7, 70)]
        assert restored.end_input() == []


def test_two_input_batch_feeds_each_input_in_order() -> None:
    with KeyedTwoInputHarness(Enrich(), key="user") as harness:
        harness.process_elements1([Click("ann", "/a"), Click("ann", "/b")])
        out = harness.process_elements2([Profile("ann", "gold")])
        assert out == [("ann", "/a", "gold"), ("ann", "/b", "gold")]
        assert harness.co_function.__class__ is Enrich


def test_two_input_checkpointed_function_keeps_operator_state() -> None:
    class Counted(Enrich, CheckpointedFunction):
        def initialize_state(self, context: Any) -> None:
            self.seen = context.operator_state_store.get_list_state(
                ListStateDescriptor("seen", int)
            )
            self.restored = context.is_restored

        def snapshot_state(self, context: Any) -> None:
            self.seen.update([sum(self.seen.get() or [0]) + 1])

    with KeyedTwoInputHarness(Counted(), key="user") as harness:
        assert harness.co_function.restored is False  # type: ignore[attr-defined]
        saved = harness.snapshot()
    again = Counted()
    with KeyedTwoInputHarness(again, key="user", restore=saved):
        assert again.restored is True
        assert again.seen.get() == [1]


def test_two_input_rejects_a_one_input_function() -> None:
    with pytest.raises(ConfigError, match="is not a KeyedCoProcessFunction"):
        TwoInputFunction(object())  # type: ignore[arg-type]


def test_two_input_untagged_record_is_a_clear_error() -> None:
    with KeyedTwoInputHarness(Enrich(), key=lambda e: "ann") as harness:
        with pytest.raises(ConfigError, match="not a TaggedElement"):
            harness.process_element(Click("ann", "/"))
        with pytest.raises(ConfigError, match="names input 3"):
            harness.process_element(TaggedElement(3, Click("ann", "/")))
        assert harness.keys("waiting") == []
