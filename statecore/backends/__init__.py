"""State backends: the keyed contract (``base``) with a heap and an embedded RocksDB
implementation, and operator state (``operator``, always on the heap)."""

from statecore.backends.base import KeyedStateBackend, RestoreSource
from statecore.backends.heap import HeapKeyedStateBackend
from statecore.backends.operator import BroadcastState, OperatorStateMode, OperatorStateStore

__all__ = ["KeyedStateBackend", "RestoreSource", "HeapKeyedStateBackend", "BroadcastState",
           "OperatorStateMode", "OperatorStateStore"]
