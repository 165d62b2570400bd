"""PyFlink's ``pyflink.datastream`` names for keyed functions: ``KeyedProcessFunction``,
``RuntimeContext``, ``TimeDomain``, ``TimerService``, ``ReduceFunction``, ``AggregateFunction``
(also in ``statecore.pyflink.datastream.functions``), and the state descriptors and
``StateTtlConfig`` (also in ``statecore.pyflink.datastream.state``, as in PyFlink)."""

from statecore.pyflink.datastream.functions import (
    AggregateFunction,
    Function,
    KeyedProcessFunction,
    ReduceFunction,
    RuntimeContext,
    TimeDomain,
    TimerService,
)
from statecore.pyflink.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)

__all__ = [
    "AggregateFunction",
    "Function",
    "KeyedProcessFunction",
    "ReduceFunction",
    "RuntimeContext",
    "TimeDomain",
    "TimerService",
    "AggregatingStateDescriptor",
    "ListStateDescriptor",
    "MapStateDescriptor",
    "ReducingStateDescriptor",
    "StateDescriptor",
    "StateTtlConfig",
    "ValueStateDescriptor",
]
