"""PyFlink's ``pyflink.datastream`` names: the environment and streams
(``StreamExecutionEnvironment``, ``RuntimeExecutionMode``, ``DataStream``, ``KeyedStream``),
the functions (``KeyedProcessFunction``, ``RuntimeContext``, ``MapFunction``...; also in
``statecore.pyflink.datastream.functions``), the state descriptors and ``StateTtlConfig``
(also in ``statecore.pyflink.datastream.state``), the state backends, and ``TimeDomain``,
``TimerService``, ``WindowedStream``, ``AllWindowedStream``, the window functions, the broadcast
state pattern's ``BroadcastStream``, ``BroadcastConnectedStream`` and its functions (window
assigners, triggers and evictors are in ``statecore.pyflink.datastream.window``). Connectors
are in ``statecore.pyflink.datastream.connectors``."""

from statecore.pyflink.datastream.broadcast import BroadcastConnectedStream, BroadcastStream
from statecore.pyflink.datastream.connected_streams import ConnectedStreams
from statecore.pyflink.datastream.data_stream import DataStream, DataStreamSink, KeyedStream
from statecore.pyflink.datastream.execution_mode import RuntimeExecutionMode
from statecore.pyflink.datastream.functions import (
    AggregateFunction,
    AllWindowFunction,
    BroadcastProcessFunction,
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    FilterFunction,
    FlatMapFunction,
    Function,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    ProcessAllWindowFunction,
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
from statecore.pyflink.datastream.windowed_stream import AllWindowedStream, WindowedStream

__all__ = [
    "AggregateFunction",
    "AllWindowFunction",
    "AllWindowedStream",
    "BroadcastConnectedStream",
    "BroadcastProcessFunction",
    "BroadcastStream",
    "KeyedBroadcastProcessFunction",
    "ProcessAllWindowFunction",
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
