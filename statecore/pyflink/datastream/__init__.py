"""PyFlink's ``pyflink.datastream`` names: the environment and streams
(``StreamExecutionEnvironment``, ``RuntimeExecutionMode``, ``DataStream``, ``KeyedStream``),
the functions (``KeyedProcessFunction``, ``RuntimeContext``, ``MapFunction``...; also in
``statecore.pyflink.datastream.functions``), the state descriptors and ``StateTtlConfig``
(also in ``statecore.pyflink.datastream.state``), the state backends, and ``TimeDomain``,
``TimerService``. Connectors are in ``statecore.pyflink.datastream.connectors``."""

from statecore.pyflink.datastream.data_stream import DataStream, DataStreamSink, KeyedStream
from statecore.pyflink.datastream.execution_mode import RuntimeExecutionMode
from statecore.pyflink.datastream.functions import (
    AggregateFunction,
    FilterFunction,
    FlatMapFunction,
    Function,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    ReduceFunction,
    RuntimeContext,
    TimeDomain,
    TimerService,
)
from statecore.pyflink.datastream.output_tag import OutputTag
from statecore.pyflink.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from statecore.pyflink.datastream.state_backend import (
    EmbeddedRocksDBStateBackend,
    HashMapStateBackend,
)
from statecore.pyflink.datastream.stream_execution_environment import (
    JobExecutionResult,
    StreamExecutionEnvironment,
)

__all__ = [
    "AggregateFunction",
    "DataStream",
    "DataStreamSink",
    "EmbeddedRocksDBStateBackend",
    "FilterFunction",
    "FlatMapFunction",
    "Function",
    "HashMapStateBackend",
    "JobExecutionResult",
    "KeySelector",
    "KeyedProcessFunction",
    "KeyedStream",
    "MapFunction",
    "OutputTag",
    "ReduceFunction",
    "RuntimeContext",
    "RuntimeExecutionMode",
    "StreamExecutionEnvironment",
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
