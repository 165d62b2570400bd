"""Two inputs over one keyed state: :class:`KeyedCoProcessFunction` and the adapter that runs it
as one keyed input with a tag (Flink's ``KeyedCoProcessOperator``).

Flink runs a two-input operator with two input gates; statecore runs it, on Spark as in the
harness, as a one-input keyed operator whose records carry the input they came from: each record
of the tagged stream is a :class:`TaggedElement` (``input`` 1 or 2 and the element), and
:class:`TwoInputFunction` (a :class:`~statecore.runtime.functions.KeyedProcessFunction`)
dispatches it to ``process_element1`` or ``process_element2``. Both inputs share the key's
state and timers: the key is made current before either method runs, and ``on_timer`` fires
for timers registered by either.

>>> from statecore.descriptors import ValueStateDescriptor
>>> class Enrich(KeyedCoProcessFunction):
...     def open(self, ctx):
...         self.profile = ctx.get_state(ValueStateDescriptor("profile", str))
...     def process_element1(self, click, ctx):
...         yield ctx.current_key, click[1], self.profile.value()
...     def process_element2(self, profile, ctx):
...         self.profile.update(profile[1])
>>> from statecore.testing import KeyedTwoInputHarness
>>> with KeyedTwoInputHarness(Enrich(), key=lambda e: e[0]) as harness:
...     harness.process_element2(("ann", "gold"))
...     harness.process_element1(("ann", "/cart"))
[]
[('ann', '/cart', 'gold')]

Ordering: within a key, the records of both inputs reach the function in one sequence, the
processing order of the keyed runtime (event time when the job has one, then what the job orders
by); Flink guarantees no order between its two inputs, so a function must not rely on one input
arriving first unless the job orders it so (see ``keyed_co_process``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from statecore.errors import ConfigError
from statecore.runtime.functions import (
    CheckpointedFunction,
    Context,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedProcessFunction,
    OnTimerContext,
    RuntimeContext,
)

__all__ = [
    "KeyedCoProcessFunction",
    "TaggedElement",
    "TwoInputFunction",
    "as_tagged",
    "two_input_function",
]


class TaggedElement(NamedTuple):
    """An element of a two-input operator's tagged stream: the input it came from (1 or 2)
    and the element itself."""

    input: int
    value: Any


class KeyedCoProcessFunction(ABC):
    """A function over two keyed inputs sharing one keyed state and one timer service
    (Flink's ``KeyedCoProcessFunction``); yield output rows from any method."""

    def open(self, runtime_context: RuntimeContext) -> None:
        """Declare state here; it is shared by both inputs."""

    @abstractmethod
    def process_element1(self, value: Any, ctx: Context) -> Iterable[Any] | None:
        """Handle one element of the first input (its key is current)."""

    @abstractmethod
    def process_element2(self, value: Any, ctx: Context) -> Iterable[Any] | None:
        """Handle one element of the second input (its key is current)."""

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterable[Any] | None:
        """A timer of the current key fired (registered by either input)."""
        return None

    def close(self) -> None:
        """Release resources."""


Unpack = Callable[[Any], TaggedElement]
"""A tagged stream's record as its input and element (a Spark task's records are rows)."""


def as_tagged(record: Any) -> TaggedElement:
    if isinstance(record, TaggedElement):
        return record
    raise ConfigError(
        f"a two-input function got {type(record).__name__} {record!r}, not a TaggedElement: "
        "feed it through KeyedTwoInputHarness or keyed_co_process"
    )


class TwoInputFunction(KeyedProcessFunction):
    """The adapter: a :class:`KeyedCoProcessFunction` as the one-input function of the tagged
    stream. ``unpack`` turns a record into its :class:`TaggedElement` (by default the record
    must be one)."""

    def __init__(self, function: KeyedCoProcessFunction, unpack: Unpack | None = None) -> None:
        if not isinstance(function, KeyedCoProcessFunction):
            raise ConfigError(
                f"{type(function).__name__} is not a KeyedCoProcessFunction "
                "(process_element1, process_element2)"
            )
        self.function = function
        self.unpack: Unpack = as_tagged if unpack is None else unpack

    def open(self, runtime_context: RuntimeContext) -> None:
        self.function.open(runtime_context)
        self._first = self.function.process_element1
        self._second = self.function.process_element2

    def process_element(self, value: Any, ctx: Context) -> Iterable[Any] | None:
        tagged = self.unpack(value)
        if tagged.input == 1:
            return self._first(tagged.value, ctx)
        if tagged.input == 2:
            return self._second(tagged.value, ctx)
        raise ConfigError(f"a two-input function's record names input {tagged.input!r}, not 1 or 2")

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterable[Any] | None:
        return self.function.on_timer(timestamp, ctx)

    def close(self) -> None:
        self.function.close()

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_first", "_second")}


class _CheckpointedTwoInputFunction(TwoInputFunction, CheckpointedFunction):
    """The adapter of a function that also has operator state (a ``CheckpointedFunction``)."""

    def initialize_state(self, context: FunctionInitializationContext) -> None:
        self.function.initialize_state(context)  # type: ignore[attr-defined]

    def snapshot_state(self, context: FunctionSnapshotContext) -> None:
        self.function.snapshot_state(context)  # type: ignore[attr-defined]


def two_input_function(
    function: KeyedCoProcessFunction, unpack: Unpack | None = None
) -> TwoInputFunction:
    """The adapter of ``function``, a ``CheckpointedFunction`` too when ``function`` is one."""
    if isinstance(function, CheckpointedFunction):
        return _CheckpointedTwoInputFunction(function, unpack)
    return TwoInputFunction(function, unpack)
