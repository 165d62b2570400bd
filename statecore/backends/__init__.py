"""State backends: the keyed contract (``base``) with a heap and an embedded RocksDB
implementation, selected by name through ``registry`` (:class:`BackendParameters`), the current
key they share with their states (``context``), and operator state (``operator``, always on the
heap).

The RocksDB names load ``rocksdict`` on first use, so jobs on the heap backend never import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from statecore.backends.base import KeyedStateBackend, RestoreSource
from statecore.backends.context import KeyContext
from statecore.backends.heap import HeapKeyedStateBackend
from statecore.backends.operator import BroadcastState, OperatorStateMode, OperatorStateStore
from statecore.backends.registry import BackendParameters, backend_names, create_backend
from statecore.backends.scope import TaskScope

if TYPE_CHECKING:
    from statecore.backends.rocksdb import RocksDBKeyedStateBackend, RocksDBOptions

__all__ = [
    "BackendParameters",
    "KeyContext",
    "KeyedStateBackend",
    "RestoreSource",
    "backend_names",
    "create_backend",
    "HeapKeyedStateBackend",
    "BroadcastState",
    "OperatorStateMode",
    "OperatorStateStore",
    "TaskScope",
    "RocksDBKeyedStateBackend",
    "RocksDBOptions",
]


def __getattr__(name: str) -> Any:
    if name in ("RocksDBKeyedStateBackend", "RocksDBOptions"):
        from statecore.backends import rocksdb

        return getattr(rocksdb, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
