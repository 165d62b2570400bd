"""statecore: Apache Flink's state model for PySpark jobs.

The public API without Spark; the PySpark runtime is :mod:`statecore.spark`
(``from statecore.spark import keyed_process``). ``RocksDBKeyedStateBackend`` and
``RocksDBOptions`` load ``rocksdict`` on first use.

>>> import statecore
>>> statecore.ValueStateDescriptor("total", int, default=0).name
'total'
"""

from typing import TYPE_CHECKING, Any

from statecore.backends import (
    BackendParameters,
    BroadcastState,
    HeapKeyedStateBackend,
    KeyedStateBackend,
    OperatorStateMode,
    OperatorStateStore,
)
from statecore.config import StatecoreConfig
from statecore.descriptors import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    StateKind,
    ValueStateDescriptor,
)
from statecore.errors import (
    CatalogError,
    CheckpointCommitError,
    CheckpointGapError,
    CheckpointNotFoundError,
    CheckpointOrderError,
    ConcurrentRunError,
    ConfigError,
    CorruptSnapshotError,
    ForeignCommitError,
    JobNotFoundError,
    KeyGroupOutOfRangeError,
    KeyTypeError,
    MaintenanceLockedError,
    MaxParallelismMismatchError,
    OutputCommitPendingError,
    OutputOwnedError,
    PyFlinkSpellingError,
    PyFlinkUnsupportedError,
    ReplayMismatchError,
    SnapshotWriteError,
    StateAccessError,
    StateDescriptorConflictError,
    StateError,
    StateMigrationError,
    StateMismatchError,
    StateRepairError,
    TableOwnedError,
    UnknownStateError,
)
from statecore.keygroups import (
    KeyGroupRange,
    assign_to_key_group,
    compute_default_max_parallelism,
    compute_key_group_range_for_operator_index,
    compute_operator_index_for_key_group,
    spark_hash,
)
from statecore.runtime.broadcast import KeyedBroadcastProcessFunction
from statecore.runtime.co_process import KeyedCoProcessFunction, TaggedElement
from statecore.runtime.functions import (
    MAX_WATERMARK,
    MIN_WATERMARK,
    CheckpointedFunction,
    Context,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedProcessFunction,
    OnTimerContext,
    OutputContext,
    OutputTag,
    RuntimeContext,
    TimeDomain,
    Timer,
    TimerService,
)
from statecore.runtime.process_function import ProcessFunction
from statecore.runtime.vectorized import Aggregate, KeyedBatch, KeyedBatchFunction, RunningAggregate
from statecore.state import (
    AggregatingState,
    ListState,
    MapState,
    MergingState,
    ReducingState,
    State,
    ValueState,
)
from statecore.ttl import (
    CleanupStrategy,
    ManualTimeProvider,
    StateTtlConfig,
    StateVisibility,
    SystemTimeProvider,
    TtlTimeProvider,
    UpdateType,
)
from statecore.types import PICKLED

if TYPE_CHECKING:
    from statecore.backends.rocksdb import RocksDBKeyedStateBackend, RocksDBOptions

__all__ = [
    "Aggregate",
    "KeyedBatch",
    "KeyedBatchFunction",
    "RunningAggregate",
    "AggregateFunction",
    "AggregatingState",
    "AggregatingStateDescriptor",
    "BackendParameters",
    "BroadcastState",
    "CatalogError",
    "CheckpointCommitError",
    "CheckpointGapError",
    "CheckpointOrderError",
    "ConcurrentRunError",
    "CheckpointNotFoundError",
    "CheckpointedFunction",
    "CleanupStrategy",
    "ConfigError",
    "Context",
    "CorruptSnapshotError",
    "FunctionInitializationContext",
    "FunctionSnapshotContext",
    "HeapKeyedStateBackend",
    "JobNotFoundError",
    "KeyGroupOutOfRangeError",
    "KeyGroupRange",
    "KeyTypeError",
    "KeyedProcessFunction",
    "KeyedCoProcessFunction",
    "KeyedBroadcastProcessFunction",
    "ProcessFunction",
    "TaggedElement",
    "KeyedStateBackend",
    "ListState",
    "ListStateDescriptor",
    "MaintenanceLockedError",
    "OutputCommitPendingError",
    "OutputOwnedError",
    "TableOwnedError",
    "ForeignCommitError",
    "ReplayMismatchError",
    "ManualTimeProvider",
    "MapState",
    "MapStateDescriptor",
    "MaxParallelismMismatchError",
    "MergingState",
    "MAX_WATERMARK",
    "MIN_WATERMARK",
    "OnTimerContext",
    "OutputContext",
    "OutputTag",
    "OperatorStateMode",
    "OperatorStateStore",
    "PICKLED",
    "PyFlinkSpellingError",
    "PyFlinkUnsupportedError",
    "ReducingState",
    "ReducingStateDescriptor",
    "RocksDBKeyedStateBackend",
    "RocksDBOptions",
    "RuntimeContext",
    "SnapshotWriteError",
    "State",
    "StateAccessError",
    "StateDescriptor",
    "StateDescriptorConflictError",
    "StateError",
    "StateKind",
    "StateMigrationError",
    "StateMismatchError",
    "StateRepairError",
    "StateTtlConfig",
    "StateVisibility",
    "StatecoreConfig",
    "SystemTimeProvider",
    "TimeDomain",
    "Timer",
    "TimerService",
    "TtlTimeProvider",
    "UnknownStateError",
    "UpdateType",
    "ValueState",
    "ValueStateDescriptor",
    "assign_to_key_group",
    "compute_default_max_parallelism",
    "compute_key_group_range_for_operator_index",
    "compute_operator_index_for_key_group",
    "spark_hash",
]


def __getattr__(name: str) -> Any:
    if name in ("RocksDBKeyedStateBackend", "RocksDBOptions"):
        from statecore.backends import rocksdb

        return getattr(rocksdb, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
