"""PyFlink's API for keyed functions, mapped onto statecore's Pythonic one: a PyFlink
``KeyedProcessFunction`` ports by changing its imports.

The modules mirror PyFlink's: ``statecore.pyflink.common`` (``pyflink.common``: ``Types``,
``Time``, ``Duration``; also ``.common.typeinfo`` and ``.common.time``) and
``statecore.pyflink.datastream`` (``pyflink.datastream``: ``KeyedProcessFunction``,
``RuntimeContext``, ``TimeDomain``, ``TimerService``; also ``.datastream.functions`` and
``.datastream.state`` with the descriptors and ``StateTtlConfig``). Every name is also here.

statecore's Pythonic API stays the primary one (see docs/pyflink.md, 'Coming from PyFlink'); this
layer is for porting. A ported function is a statecore ``KeyedProcessFunction``: the harness,
``keyed_process`` and ``keyed_stream`` run it as they run any other.
"""

from statecore.pyflink.common import Duration, Time, TypeInformation, Types
from statecore.pyflink.datastream import (
    AggregateFunction,
    AggregatingStateDescriptor,
    Function,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    ReduceFunction,
    ReducingStateDescriptor,
    RuntimeContext,
    StateDescriptor,
    StateTtlConfig,
    TimeDomain,
    TimerService,
    ValueStateDescriptor,
)

__all__ = [
    "KeyedProcessFunction",
    "RuntimeContext",
    "Function",
    "ReduceFunction",
    "AggregateFunction",
    "TimeDomain",
    "TimerService",
    "StateDescriptor",
    "ValueStateDescriptor",
    "ListStateDescriptor",
    "MapStateDescriptor",
    "ReducingStateDescriptor",
    "AggregatingStateDescriptor",
    "StateTtlConfig",
    "Time",
    "Duration",
    "TypeInformation",
    "Types",
]
