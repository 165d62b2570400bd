"""PyFlink's ``WindowedStream`` (what ``KeyedStream.window`` and ``count_window`` return): its
settings (``trigger``, ``evictor``, ``allowed_lateness``, ``side_output_late_data``) and one of
``reduce``, ``aggregate``, ``process`` or ``apply`` make statecore's
:class:`~statecore.runtime.windows.operator.WindowOperator` the job's keyed function.

A window's elements are stored pickled (as the layer's other keyed functions store elements
without a declared state type), and so are aggregate accumulators.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from statecore.errors import COMING_FROM_PYFLINK, PyFlinkUnsupportedError
from statecore.pyflink.datastream.functions import RuntimeContext
from statecore.pyflink.datastream.rich import close_functions, open_functions
from statecore.pyflink.datastream.window import (
    statecore_trigger,
    statecore_window_function,
)
from statecore.runtime import windows as sc
from statecore.types import PICKLED

__all__ = ["AllWindowedStream", "RichWindowOperator", "WindowedStream"]


class RichWindowOperator(sc.WindowOperator):
    """A window operator that also opens (with the key's runtime context) and closes its
    reduce or aggregate function, as every PyFlink function is opened and closed."""

    rich: tuple[Any, ...] = ()

    def open(self, runtime_context: Any) -> None:
        open_functions(self.rich, RuntimeContext(runtime_context))
        super().open(runtime_context)

    def close(self) -> None:
        try:
            super().close()
        finally:
            close_functions(self.rich)


def _opening(operator: sc.WindowOperator, function: Any) -> sc.WindowOperator:
    """``operator``, opening and closing ``function`` too when it has ``open``/``close``."""
    if not callable(getattr(function, "open", None)):
        return operator
    rich = RichWindowOperator.__new__(RichWindowOperator)
    rich.__dict__.update(vars(operator))
    rich.rich = (function,)
    return rich


@dataclass(frozen=True)
class _Settings:
    assigner: sc.WindowAssigner
    trigger: sc.Trigger | None = None
    evictor: sc.Evictor | None = None
    allowed_lateness: timedelta = timedelta(0)
    late_data: Any = None


class WindowedStream:
    """A keyed stream cut into windows; ``keyed`` makes a window operator the keyed stream's
    function with its output type (``KeyedStream._keyed``)."""

    def __init__(
        self,
        keyed: Callable[[Any, Any], Any],
        input_type: Any,
        settings: _Settings,
        environment: Any = None,
    ) -> None:
        self._keyed = keyed
        self._input_type = input_type
        self._settings = settings
        self._environment = environment

    @classmethod
    def of(
        cls, keyed: Callable[[Any, Any], Any], input_type: Any, assigner: Any, environment: Any
    ) -> WindowedStream:
        if not isinstance(assigner, sc.WindowAssigner):
            raise PyFlinkUnsupportedError(
                f"window({assigner!r}): give a window assigner (TumblingEventTimeWindows.of(...) "
                f"and the others of statecore.pyflink.datastream.window) ({COMING_FROM_PYFLINK})"
            )
        return cls(keyed, input_type, _Settings(assigner), environment)

    def _with(self, **changes: Any) -> WindowedStream:
        settings = dataclasses.replace(self._settings, **changes)
        return WindowedStream(self._keyed, self._input_type, settings, self._environment)

    def get_execution_environment(self) -> Any:
        return self._environment

    def get_input_type(self) -> Any:
        return self._input_type

    # -- settings ------------------------------------------------------------------------------
    def trigger(self, trigger: Any) -> WindowedStream:
        return self._with(trigger=statecore_trigger(trigger))

    def evictor(self, evictor: Any) -> WindowedStream:
        if not isinstance(evictor, sc.Evictor):
            raise PyFlinkUnsupportedError(
                f"evictor({evictor!r}): give CountEvictor.of(n), TimeEvictor.of(...) or a "
                f"statecore.windows.Evictor ({COMING_FROM_PYFLINK})"
            )
        return self._with(evictor=evictor)

    def allowed_lateness(self, time_ms: int) -> WindowedStream:
        return self._with(allowed_lateness=timedelta(milliseconds=time_ms))

    def side_output_late_data(self, output_tag: Any) -> WindowedStream:
        to_statecore = getattr(output_tag, "to_statecore", None)
        return self._with(late_data=output_tag if to_statecore is None else to_statecore())

    # -- what a window computes ------------------------------------------------------------
    def _windowing(self) -> sc.Windowing:
        s = self._settings
        return sc.window(
            s.assigner,
            element_type=PICKLED,
            trigger=s.trigger,
            evictor=s.evictor,
            allowed_lateness=s.allowed_lateness,
            late_data=s.late_data,
        )

    def reduce(
        self, reduce_function: Any, window_function: Any = None, output_type: Any = None
    ) -> Any:
        reduce = getattr(reduce_function, "reduce", reduce_function)
        function = statecore_window_function(window_function)
        operator = _opening(self._windowing().reduce(reduce, function), reduce_function)
        return self._keyed(operator, self._input_type if window_function is None else output_type)

    def aggregate(
        self,
        aggregate_function: Any,
        window_function: Any = None,
        accumulator_type: Any = None,
        output_type: Any = None,
    ) -> Any:
        function = statecore_window_function(window_function)
        operator = self._windowing().aggregate(
            aggregate_function, accumulator_type=PICKLED, function=function
        )
        return self._keyed(_opening(operator, aggregate_function), output_type)

    def process(self, process_window_function: Any, output_type: Any = None) -> Any:
        function = statecore_window_function(process_window_function)
        if not isinstance(function, sc.ProcessWindowFunction):
            raise PyFlinkUnsupportedError(
                f"process({process_window_function!r}) takes a ProcessWindowFunction "
                f"({COMING_FROM_PYFLINK})"
            )
        return self._keyed(self._windowing().process(function), output_type)

    def apply(self, window_function: Any, output_type: Any = None) -> Any:
        function = statecore_window_function(window_function)
        if not isinstance(function, sc.WindowFunction):
            raise PyFlinkUnsupportedError(
                f"apply({window_function!r}) takes a WindowFunction ({COMING_FROM_PYFLINK})"
            )
        return self._keyed(self._windowing().apply(function), output_type)


class AllWindowedStream:
    """A stream without a key cut into windows (``DataStream.window_all``): Flink runs its
    window operator at parallelism 1; statecore keys every element by one constant key on the
    same window operator, at parallelism 1. ``process`` takes a ``ProcessAllWindowFunction``,
    ``apply`` an ``AllWindowFunction``."""

    def __init__(self, windowed: WindowedStream) -> None:
        self._windowed = windowed

    def _with(self, windowed: WindowedStream) -> AllWindowedStream:
        return AllWindowedStream(windowed)

    @staticmethod
    def _one_task(stream: Any) -> Any:
        return stream._with(dataclasses.replace(stream._plan, parallelism=1))

    def get_execution_environment(self) -> Any:
        return self._windowed.get_execution_environment()

    def get_input_type(self) -> Any:
        return self._windowed.get_input_type()

    def trigger(self, trigger: Any) -> AllWindowedStream:
        return self._with(self._windowed.trigger(trigger))

    def evictor(self, evictor: Any) -> AllWindowedStream:
        return self._with(self._windowed.evictor(evictor))

    def allowed_lateness(self, time_ms: int) -> AllWindowedStream:
        return self._with(self._windowed.allowed_lateness(time_ms))

    def side_output_late_data(self, output_tag: Any) -> AllWindowedStream:
        return self._with(self._windowed.side_output_late_data(output_tag))

    def reduce(
        self, reduce_function: Any, window_function: Any = None, output_type: Any = None
    ) -> Any:
        return self._one_task(self._windowed.reduce(reduce_function, window_function, output_type))

    def aggregate(
        self,
        aggregate_function: Any,
        window_function: Any = None,
        accumulator_type: Any = None,
        output_type: Any = None,
    ) -> Any:
        stream = self._windowed.aggregate(
            aggregate_function, window_function, accumulator_type, output_type
        )
        return self._one_task(stream)

    def _over_elements(
        self, method: str, given: Any, kind: type, expected: str, output_type: Any
    ) -> Any:
        """``process`` or ``apply`` (``method``) with ``given``, adapted to a ``kind``."""
        function = statecore_window_function(given)
        if not isinstance(function, kind):
            raise PyFlinkUnsupportedError(
                f"{method}({given!r}) after window_all takes {expected} ({COMING_FROM_PYFLINK})"
            )
        windowed = self._windowed
        operator = getattr(windowed._windowing(), method)(function)
        return self._one_task(windowed._keyed(operator, output_type))

    def process(self, process_window_function: Any, output_type: Any = None) -> Any:
        return self._over_elements(
            "process",
            process_window_function,
            sc.ProcessWindowFunction,
            "a ProcessAllWindowFunction",
            output_type,
        )

    def apply(self, window_function: Any, output_type: Any = None) -> Any:
        return self._over_elements(
            "apply", window_function, sc.WindowFunction, "an AllWindowFunction", output_type
        )
