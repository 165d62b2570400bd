"""``RocksDBOptions``: the memory, compression and disk settings of the embedded RocksDB backend.

One frozen dataclass, validated on construction, and one translator to ``rocksdict.Options``.
The memory a task's RocksDB uses is bounded by ``block_cache_size`` (data, index and filter
blocks of every column family share one LRU cache) plus ``write_buffer_size *
max_write_buffer_number`` (the memtables of all column families together), so state may be
many times larger than memory:

>>> opts = RocksDBOptions(block_cache_size=8 << 20, write_buffer_size=4 << 20)
>>> opts.memory_budget
16777216
>>> RocksDBOptions(compression="brotli")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
statecore.errors.ConfigError: RocksDBOptions.compression must be one of ...; got 'brotli'

Outside that budget, each ``ValueState`` of an immutable scalar type keeps up to
``value_cache_entries`` recently used values as Python objects in a write-back cache
(:mod:`statecore.backends.rocksdb.cache`): its memory is bounded by that count and the values'
sizes, not by the size of the state.
"""

from __future__ import annotations

from dataclasses import dataclass

import rocksdict

from statecore.errors import ConfigError

__all__ = ["RocksDBOptions", "COMPRESSIONS"]

_MIB = 1 << 20

COMPRESSIONS = ("none", "snappy", "lz4", "zstd", "zlib")
"""The compression names :class:`RocksDBOptions` accepts."""


@dataclass(frozen=True, kw_only=True)
class RocksDBOptions:
    """How a task's embedded RocksDB instance is configured.

    ``local_directory`` is the root of the task-local instances; ``None`` means
    ``<STATECORE_HOME>/rocksdb`` when the backend runs in a job, or a temporary directory
    (removed on close) when it is created directly.
    """

    block_cache_size: int = 64 * _MIB
    write_buffer_size: int = 16 * _MIB
    max_write_buffer_number: int = 2
    block_size: int = 4 * 1024
    compression: str = "lz4"
    bloom_filter_bits_per_key: int = 10
    max_background_jobs: int = 2
    local_directory: str | None = None
    ttl_cleanup_batch: int = 1000
    value_cache_entries: int = 100_000
    """Per ``ValueState`` of an immutable scalar type (int, float, str, bytes, bool): how many
    recently used keys keep their value in memory, written to RocksDB in one batch when the
    cache is full and before snapshots and scans; ``0`` turns the cache off."""

    def __post_init__(self) -> None:
        for name in ("block_cache_size", "write_buffer_size", "block_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 4096:
                raise ConfigError(
                    f"RocksDBOptions.{name} must be an int of at least 4096 bytes, got {value!r}"
                )
        for name in ("max_write_buffer_number", "max_background_jobs", "ttl_cleanup_batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"RocksDBOptions.{name} must be a positive int, got {value!r}")
        entries = self.value_cache_entries
        if not isinstance(entries, int) or isinstance(entries, bool) or entries < 0:
            raise ConfigError(
                "RocksDBOptions.value_cache_entries must be an int >= 0 "
                f"(0 disables the cache), got {entries!r}"
            )
        bloom = self.bloom_filter_bits_per_key
        if not isinstance(bloom, int) or isinstance(bloom, bool) or bloom < 0:
            raise ConfigError(
                "RocksDBOptions.bloom_filter_bits_per_key must be an int >= 0 "
                f"(0 disables the filter), got {bloom!r}"
            )
        if self.compression not in COMPRESSIONS:
            raise ConfigError(
                f"RocksDBOptions.compression must be one of "
                f"{', '.join(COMPRESSIONS)}; got {self.compression!r}"
            )
        if self.local_directory is not None and not (
            isinstance(self.local_directory, str) and self.local_directory
        ):
            raise ConfigError(
                "RocksDBOptions.local_directory must be a non-empty path or None, "
                f"got {self.local_directory!r}"
            )

    @property
    def memory_budget(self) -> int:
        """Bytes of block cache plus memtables: what RocksDB holds in memory at most."""
        return self.block_cache_size + self.write_buffer_size * self.max_write_buffer_number

    def to_options(self) -> rocksdict.Options:
        """The ``rocksdict.Options`` for the database and every column family (raw bytes mode)."""
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        options.create_missing_column_families(True)
        table = rocksdict.BlockBasedOptions()
        table.set_block_cache(rocksdict.Cache(self.block_cache_size))
        table.set_block_size(self.block_size)
        table.set_cache_index_and_filter_blocks(True)
        table.set_pin_l0_filter_and_index_blocks_in_cache(True)
        if self.bloom_filter_bits_per_key:
            table.set_bloom_filter(self.bloom_filter_bits_per_key, False)
        options.set_block_based_table_factory(table)
        options.set_write_buffer_size(self.write_buffer_size)
        options.set_max_write_buffer_number(self.max_write_buffer_number)
        options.set_db_write_buffer_size(self.write_buffer_size * self.max_write_buffer_number)
        options.set_compression_type(_compression(self.compression))
        options.set_max_background_jobs(self.max_background_jobs)
        options.set_keep_log_file_num(2)
        return options

    def to_write_options(self) -> rocksdict.WriteOptions:
        """Writes skip RocksDB's write-ahead log: durability comes from the Delta checkpoints."""
        write = rocksdict.WriteOptions()
        # a property at runtime, typed as a method in rocksdict's stubs
        write.disable_wal = True  # type: ignore[method-assign,assignment]
        return write


def _compression(name: str) -> rocksdict.DBCompressionType:
    factories = {
        "none": rocksdict.DBCompressionType.none,
        "snappy": rocksdict.DBCompressionType.snappy,
        "lz4": rocksdict.DBCompressionType.lz4,
        "zstd": rocksdict.DBCompressionType.zstd,
        "zlib": rocksdict.DBCompressionType.zlib,
    }
    return factories[name]()
