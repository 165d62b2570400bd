"""The embedded RocksDB keyed state backend (``rocksdict`` is imported only in this package)."""

from statecore.backends.rocksdb.backend import RocksDBKeyedStateBackend
from statecore.backends.rocksdb.options import RocksDBOptions

__all__ = ["RocksDBKeyedStateBackend", "RocksDBOptions"]
