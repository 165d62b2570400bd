"""Keyed state backends: one contract (``base``), a heap and an embedded RocksDB implementation."""

from statecore.backends.base import KeyedStateBackend, RestoreSource
from statecore.backends.heap import HeapKeyedStateBackend

__all__ = ["KeyedStateBackend", "RestoreSource", "HeapKeyedStateBackend"]
