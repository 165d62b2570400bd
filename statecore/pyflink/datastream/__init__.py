"""PyFlink's ``pyflink.datastream`` names: the environment and streams
(``StreamExecutionEnvironment``, ``RuntimeExecutionMode``, ``DataStream``, ``KeyedStream``),
the functions (``KeyedProcessFunction``, ``RuntimeContext``, ``MapFunction``...; also in
``statecore.pyflink.datastream.functions``), the state descriptors and ``StateTtlConfig``
(also in ``statecore.pyflink.datastream.state``), the state backends, and ``TimeDomain``,
``TimerService``, ``WindowedStream``, ``ProcessWindowFunction`` and ``WindowFunction`` (window
assigners, triggers and evictors are in ``statecore.pyflink.datastream.window``). Connectors
are in ``statecore.pyflink.datastream.connectors``."""

from statecore.pyflink.datastream.connected_streams import ConnectedStreams
from statecore.pyflink.datastream.data_stream import DataStream, DataStreamSink, KeyedStream
from statecore.pyflink.datastream.execution_mode import RuntimeExecutionMode
from statecore.pyflink.datastream.functions import (
    AggregateFunction,
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    FilterFunction,
    FlatMapFunction,
    Function,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    ProcessFunction,
    ProcessWindowFunction,
    ReduceFunction,
    RuntimeContext,
    TimeDomain,
    TimerService,
    WindowFunction,
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
from statecore.pyflink.datastream.windowed_stream import WindowedStream

__all__ = [
    "AggregateFunction",
    "CoFlatMapFunction",
    "CoMapFunction",
    "CoProcessFunction",
    "ConnectedStreams",
    "KeyedCoProcessFunction",
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
    "ProcessFunction",
    "ProcessWindowFunction",
    "WindowFunction",
    "WindowedStream",
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
