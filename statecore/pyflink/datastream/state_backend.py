"""PyFlink's state backends (``pyflink.datastream.state_backend``), each naming statecore's
keyed backend: ``HashMapStateBackend`` the heap, ``EmbeddedRocksDBStateBackend`` RocksDB.
Checkpoint storage is statecore's (Delta tables in the warehouse, the catalog)."""

from __future__ import annotations

from typing import Any

__all__ = ["EmbeddedRocksDBStateBackend", "HashMapStateBackend", "StateBackend"]


class StateBackend:
    statecore_backend = "heap"


class HashMapStateBackend(StateBackend):
    """State on the heap (statecore's ``heap`` backend)."""

    statecore_backend = "heap"


class EmbeddedRocksDBStateBackend(StateBackend):
    """State in RocksDB on local disk (statecore's ``rocksdb`` backend); statecore snapshots
    are always incremental at key-group granularity, so ``enable_incremental_checkpointing``
    changes nothing."""

    statecore_backend = "rocksdb"

    def __init__(self, enable_incremental_checkpointing: Any = None) -> None:
        self.enable_incremental_checkpointing = enable_incremental_checkpointing
