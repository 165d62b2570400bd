"""Building a window operator: :func:`window` names how elements are windowed, and one of its
methods names what a window computes, giving a
:class:`~statecore.runtime.windows.operator.WindowOperator` (a ``KeyedProcessFunction`` to run
with the harness or ``keyed_process``).

>>> import operator
>>> from datetime import timedelta
>>> from statecore.runtime.windows.assigners import TumblingWindows
>>> sums = window(TumblingWindows(size=timedelta(seconds=5)), element_type=int).reduce(operator.add)
>>> type(sums).__name__, sums.contents.descriptor.name
('WindowOperator', 'window_contents')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from statecore.descriptors import AggregateFunction
from statecore.errors import ConfigError
from statecore.runtime.windows.assigners import WindowAssigner, millis
from statecore.runtime.windows.evictors import Evictor
from statecore.runtime.windows.functions import (
    AggregatingContents,
    ListContents,
    ProcessWindowFunction,
    ReducingContents,
    WindowFunction,
)
from statecore.runtime.windows.operator import WindowOperator
from statecore.runtime.windows.triggers import Trigger
from statecore.types import TypeSpec

__all__ = ["Windowing", "window"]


@dataclass(frozen=True, kw_only=True)
class Windowing:
    """How elements are windowed: the assigner, the elements' type (what a window's state
    stores), and optionally a trigger, an evictor, the allowed lateness and a side-output tag
    for late elements. Its methods give the operator."""

    assigner: WindowAssigner
    element_type: TypeSpec
    trigger: Trigger | None = None
    evictor: Evictor | None = None
    allowed_lateness: timedelta = timedelta(0)
    late_data: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.assigner, WindowAssigner):
            raise ConfigError(f"window() takes a window assigner, got {self.assigner!r}")
        if self.trigger is not None and not isinstance(self.trigger, Trigger):
            raise ConfigError(f"trigger must be a Trigger, got {self.trigger!r}")
        if self.evictor is not None and not isinstance(self.evictor, Evictor):
            raise ConfigError(f"evictor must be an Evictor, got {self.evictor!r}")
        if millis(self.allowed_lateness, "allowed_lateness") < 0:
            raise ConfigError(f"allowed_lateness must not be negative: {self.allowed_lateness}")

    def _operator(self, contents: Any, function: Any) -> WindowOperator:
        return WindowOperator(
            self.assigner,
            contents,
            function,
            trigger=self.trigger,
            evictor=self.evictor,
            allowed_lateness=millis(self.allowed_lateness, "allowed_lateness"),
            late_data=self.late_data,
        )

    def reduce(
        self,
        reduce: Callable[[Any, Any], Any],
        function: ProcessWindowFunction | WindowFunction | None = None,
    ) -> WindowOperator:
        """Each window's elements reduced incrementally (``reduce(a, b)`` returns the same type);
        emits the reduced value, or what ``function`` makes of it."""
        _check_function(function)
        return self._operator(ReducingContents(reduce, self.element_type), function)

    def aggregate(
        self,
        aggregate: AggregateFunction[Any, Any, Any],
        *,
        accumulator_type: TypeSpec,
        function: ProcessWindowFunction | WindowFunction | None = None,
    ) -> WindowOperator:
        """Each window's elements added to an accumulator incrementally; emits its result, or
        what ``function`` makes of it."""
        if not isinstance(aggregate, AggregateFunction):
            raise ConfigError(f"aggregate() takes an AggregateFunction, got {aggregate!r}")
        _check_function(function)
        contents = AggregatingContents(aggregate, accumulator_type, self.element_type)
        return self._operator(contents, function)

    def process(self, function: ProcessWindowFunction) -> WindowOperator:
        """``function.process(key, context, elements)`` over each window's elements."""
        if not isinstance(function, ProcessWindowFunction):
            raise ConfigError(f"process() takes a ProcessWindowFunction, got {function!r}")
        return self._operator(ListContents(self.element_type), function)

    def apply(self, function: WindowFunction) -> WindowOperator:
        """``function.apply(key, window, elements)`` over each window's elements."""
        if not isinstance(function, WindowFunction):
            raise ConfigError(f"apply() takes a WindowFunction, got {function!r}")
        return self._operator(ListContents(self.element_type), function)


def _check_function(function: object) -> None:
    if function is not None and not isinstance(function, (ProcessWindowFunction, WindowFunction)):
        raise ConfigError(
            f"a window function must be a ProcessWindowFunction or a WindowFunction, got "
            f"{function!r}"
        )


def window(
    assigner: WindowAssigner,
    *,
    element_type: TypeSpec,
    trigger: Trigger | None = None,
    evictor: Evictor | None = None,
    allowed_lateness: timedelta = timedelta(0),
    late_data: Any = None,
) -> Windowing:
    """Window a keyed stream's elements with ``assigner``; see :class:`Windowing`."""
    return Windowing(
        assigner=assigner,
        element_type=element_type,
        trigger=trigger,
        evictor=evictor,
        allowed_lateness=allowed_lateness,
        late_data=late_data,
    )
