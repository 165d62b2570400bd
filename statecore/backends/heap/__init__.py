"""The heap keyed state backend: Python dicts per namespace and key group."""

from statecore.backends.heap.backend import HeapKeyedStateBackend

__all__ = ["HeapKeyedStateBackend"]
