"""Per-record ValueState access through the RocksDB backend vs raw ``rocksdict`` get + put.

Standalone: ``python benchmarks/bench_rocksdb_access.py [--keys N] [--events N] [--runs N]``
prints one JSON object. Every variant counts events per key over the same event sequence
(``--events`` events over ``--keys`` keys ``user-i``), each on its own fresh database with the
same RocksDB options (``RocksDBOptions()``: block cache, block size, bloom filter, write buffers,
no write-ahead log). Within a round the variants take turns block by block (``--block``
events), so a busy machine slows them alike; the median of the rounds is reported.

- ``backend``: ``set_current_key(key, key_group)`` then ``value()`` + ``update(value + 1)`` on a
  ``ValueState[int]``, as the runtime does per record (Spark computes the key group).
- ``backend_hashing``: the same, with the key group computed (and cached) by the backend.
- ``raw_bytes``: ``Rdict(raw_mode=True)``, the key UTF-8 encoded, the count packed as 8 bytes.
- ``raw_rocksdict``: ``Rdict`` in its default mode, ``str`` keys and ``int`` values encoded by
  ``rocksdict`` itself.

``ratio`` is the raw throughput's share the backend reaches: the faster raw variant's time over
the backend's (1.0 = as fast as raw; the target is 0.6).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rocksdict

from statecore.backends.rocksdb import RocksDBKeyedStateBackend, RocksDBOptions
from statecore.descriptors import ValueStateDescriptor
from statecore.keygroups import KeyGroupRange, assign_to_key_group
from statecore.types import TypeInfo

MAX_PARALLELISM = 128
COUNT = ValueStateDescriptor("count", int, default=0)


def workload(keys: int, events: int, seed: int = 42) -> tuple[list[str], list[int]]:
    rng = random.Random(seed)
    names = [f"user-{i}" for i in range(keys)]
    groups = [assign_to_key_group(n, MAX_PARALLELISM) for n in names]
    picks = [rng.randrange(keys) for _ in range(events)]
    return [names[i] for i in picks], [groups[i] for i in picks]


class Variant:
    """One way of counting events per key, on its own fresh database."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def run(self, events: list[str], groups: list[int]) -> float:
        """Process a block of events; the seconds it took."""
        raise NotImplementedError

    def count(self, key: str) -> int:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class Backend(Variant):
    def __init__(self, root: Path, *, pass_groups: bool) -> None:
        super().__init__(root)
        self.pass_groups = pass_groups
        self.backend = RocksDBKeyedStateBackend(
            key_type=TypeInfo.of(str),
            key_group_range=KeyGroupRange(0, MAX_PARALLELISM - 1),
            max_parallelism=MAX_PARALLELISM,
            options=RocksDBOptions(local_directory=str(root)),
        )
        self.state: Any = self.backend.get_partitioned_state(COUNT)

    def run(self, events: list[str], groups: list[int]) -> float:
        set_key, value, update = self.backend.set_current_key, self.state.value, self.state.update
        started = time.perf_counter()
        if self.pass_groups:
            for key, key_group in zip(events, groups):
                set_key(key, key_group)
                update(value() + 1)
        else:
            for key in events:
                set_key(key)
                update(value() + 1)
        return time.perf_counter() - started

    def count(self, key: str) -> int:
        self.backend.set_current_key(key)
        return int(self.state.value())

    def close(self) -> None:
        self.backend.close()


class RawBytes(Variant):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.db = _raw_db(root, raw_mode=True)

    def run(self, events: list[str], groups: list[int]) -> float:
        pack, unpack = struct.Struct("<q").pack, struct.Struct("<q").unpack
        get, put = self.db.get, self.db.put
        started = time.perf_counter()
        for key in events:
            k = key.encode()
            v = get(k)
            put(k, pack(1 if v is None else unpack(v)[0] + 1))
        return time.perf_counter() - started

    def count(self, key: str) -> int:
        stored = self.db.get(key.encode())
        assert isinstance(stored, bytes)
        return int(struct.unpack("<q", stored)[0])

    def close(self) -> None:
        self.db.close()


class RawRocksdict(Variant):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.db = _raw_db(root, raw_mode=False)

    def run(self, events: list[str], groups: list[int]) -> float:
        get, put = self.db.get, self.db.put
        started = time.perf_counter()
        for key in events:
            v = get(key)
            put(key, 1 if v is None else v + 1)
        return time.perf_counter() - started

    def count(self, key: str) -> int:
        stored = self.db.get(key)
        assert isinstance(stored, int)
        return stored

    def close(self) -> None:
        self.db.close()


def _raw_db(root: Path, *, raw_mode: bool) -> rocksdict.Rdict:
    defaults = RocksDBOptions()
    options = defaults.to_options()
    if not raw_mode:  # rocksdict's own encoding of str keys and int values
        options = rocksdict.Options()
        options.create_if_missing(True)
        table = rocksdict.BlockBasedOptions()
        table.set_block_cache(rocksdict.Cache(defaults.block_cache_size))
        table.set_block_size(defaults.block_size)
        table.set_bloom_filter(defaults.bloom_filter_bits_per_key, False)
        options.set_block_based_table_factory(table)
        options.set_write_buffer_size(defaults.write_buffer_size)
    db = rocksdict.Rdict(str(Path(tempfile.mkdtemp(dir=root)) / "db"), options)
    db.set_write_options(defaults.to_write_options())
    return db


VARIANTS: dict[str, Callable[[Path], Variant]] = {
    "backend": lambda root: Backend(root, pass_groups=True),
    "backend_hashing": lambda root: Backend(root, pass_groups=False),
    "raw_bytes": RawBytes,
    "raw_rocksdict": RawRocksdict,
}


def one_round(root: Path, events: list[str], groups: list[int], block: int) -> dict[str, float]:
    """Every variant over all events, block by block in rotating order, so that a busy machine
    slows them alike."""
    variants = {name: make(root) for name, make in VARIANTS.items()}
    seconds = dict.fromkeys(variants, 0.0)
    names = list(variants)
    try:
        for i, start in enumerate(range(0, len(events), block)):
            chunk, chunk_groups = events[start : start + block], groups[start : start + block]
            for name in names[i % len(names) :] + names[: i % len(names)]:
                seconds[name] += variants[name].run(chunk, chunk_groups)
        expected = events.count(events[0])
        for name, variant in variants.items():
            assert variant.count(events[0]) == expected, name
    finally:
        for variant in variants.values():
            variant.close()
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--block", type=int, default=2_000, help="events per turn when the variants take turns"
    )
    args = parser.parse_args(argv)
    events, groups = workload(args.keys, args.events)
    root = Path(tempfile.mkdtemp(prefix="statecore-bench-rocksdb-"))
    seconds: dict[str, list[float]] = {name: [] for name in VARIANTS}
    try:
        for _ in range(args.runs):
            for name, took in one_round(root, events, groups, args.block).items():
                seconds[name].append(took)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    median = {name: statistics.median(times) for name, times in seconds.items()}
    raw = min(median["raw_bytes"], median["raw_rocksdict"])
    print(
        json.dumps(
            {
                "benchmark": "rocksdb_value_state_access",
                "keys": args.keys,
                "events": args.events,
                "runs": args.runs,
                "block": args.block,
                "median_us_per_event": {
                    n: round(s / args.events * 1e6, 3) for n, s in median.items()
                },
                "seconds": {n: [round(s, 4) for s in times] for n, times in seconds.items()},
                "ratio": round(raw / median["backend"], 3),
                "ratio_with_hashing": round(raw / median["backend_hashing"], 3),
                "target": 0.6,
                "python": sys.version.split()[0],
                "rocksdict": getattr(rocksdict, "__version__", None),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
