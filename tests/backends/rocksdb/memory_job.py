"""A keyed job whose state is many times its RocksDB memory budget, run as its own process.

``python memory_job.py --home DIR --backend rocksdb --checkpoint 1`` processes every key once and
completes checkpoint 1 (real Delta tables and catalog, no Spark); ``--checkpoint 2`` restores
checkpoint 1 cold (its local directory is removed first), checks every key's state and
completes checkpoint 2. It prints one JSON line: the state size, the memory budget, the
mismatches found, the resident set size at a few points and the peak of the process.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import shutil
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas  # noqa: F401  (pyarrow imports it on the first snapshot; part of the baseline)

from statecore.backends import BackendParameters, create_backend
from statecore.backends.rocksdb import RocksDBOptions
from statecore.backends.scope import TaskScope
from statecore.catalog import Catalog
from statecore.checkpoint.coordinator import CheckpointCoordinator
from statecore.config import StatecoreConfig
from statecore.descriptors import ListStateDescriptor, ValueStateDescriptor
from statecore.keygroups import KeyGroupRange
from statecore.runtime import Context, KeyedProcessFunction, RuntimeContext
from statecore.runtime.task import KeyedOperatorTask
from statecore.types import TypeInfo

JOB = "memory_job"
# RocksDB's own memory only: the value cache (``value_cache_entries``, bounded by a count of
# entries, not bytes) is off, so the resident set measures the block cache and the memtables.
OPTIONS = RocksDBOptions(
    block_cache_size=1 << 20,
    write_buffer_size=512 << 10,
    max_write_buffer_number=2,
    value_cache_entries=0,
)


def profile(key: str) -> str:
    return hashlib.blake2b(key.encode(), digest_size=50).hexdigest()  # 100 characters


class Profiles(KeyedProcessFunction):
    """Keeps a 100-character profile, a visit count and recent values per key."""

    def __init__(self, checking: bool) -> None:
        self.checking = checking
        self.mismatches = 0

    def open(self, ctx: RuntimeContext) -> None:
        self.profile = ctx.get_state(ValueStateDescriptor("profile", str))
        self.visits = ctx.get_state(ValueStateDescriptor("visits", int, default=0))
        self.recent = ctx.get_list_state(ListStateDescriptor("recent", int))

    def process_element(self, value: Any, ctx: Context) -> None:
        key = ctx.current_key
        visits = self.visits.value()
        if self.checking and (
            self.profile.value() != profile(key) or visits != 1 or self.recent.get() != [value - 1]
        ):
            self.mismatches += 1
        self.profile.update(profile(key))
        self.visits.update(visits + 1)
        self.recent.add(value)


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--home", required=True)
    parser.add_argument("--backend", choices=["heap", "rocksdb"], default="rocksdb")
    parser.add_argument("--checkpoint", type=int, choices=[1, 2], required=True)
    parser.add_argument("--keys", type=int, default=200_000)
    args = parser.parse_args(argv)
    baseline = rss_mb()
    started = time.perf_counter()

    config = StatecoreConfig.resolve(home=args.home, env={})
    local = Path(config.home) / "rocksdb"
    if args.checkpoint == 2:
        shutil.rmtree(local, ignore_errors=True)  # a cold restore: bulk load from Delta
    catalog = Catalog.connect(config.catalog_url)
    try:
        coordinator = CheckpointCoordinator(
            config, catalog, job=f"{JOB}_{args.backend}", operator="main"
        )
        planned = coordinator.plan(
            args.checkpoint, parallelism=1, max_parallelism=128, default_parallelism=1
        )
        key_groups, key_type = KeyGroupRange(0, 127), TypeInfo.of(str)
        restore = planned.restore
        scope = TaskScope(
            job=coordinator.job,
            operator="main",
            subtask_index=0,
            checkpoint_id=args.checkpoint,
            home=config.home,
            restored_checkpoint_id=restore.checkpoint_id,
            restored_files=restore.file_paths(key_groups),
            restore_source_for=lambda kgs: restore.source(kgs, key_type),
        )
        backend = create_backend(
            BackendParameters.of(args.backend, OPTIONS if args.backend == "rocksdb" else None),
            key_type=key_type,
            key_group_range=key_groups,
            max_parallelism=128,
            restore_source=restore.source(key_groups, key_type),
            scope=scope,
        )
        before_backend = rss_mb()
        function = Profiles(checking=args.checkpoint == 2)
        task = KeyedOperatorTask(
            function, backend, job=coordinator.job, operator="main", subtask_index=0, parallelism=1
        )
        task.open()
        records: Iterable[tuple[Any, int | None, Any]] = (
            (f"user-{i:07d}", None, args.checkpoint) for i in range(args.keys)
        )
        task.process(records)
        after_process = rss_mb()
        uris = {name: coordinator.table_uri(name) for name in backend.descriptors}
        results = task.snapshot(uris, checkpoint_id=args.checkpoint)
        restored = backend.restore_metrics()
        task.close()
        record = coordinator.commit(planned, results)
    finally:
        catalog.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    state_bytes = sum(len(f"user-{i:07d}") + 3 for i in range(args.keys)) * 3 + args.keys * (
        100 + 8 + 8 * args.checkpoint
    )
    print(
        json.dumps(
            {
                "backend": args.backend,
                "checkpoint": args.checkpoint,
                "keys": args.keys,
                "state_bytes": state_bytes,
                "delta_bytes": record.total_bytes,
                "memory_budget_bytes": OPTIONS.memory_budget,
                "mismatches": function.mismatches,
                "restore": restored,
                "baseline_rss_mb": round(baseline, 1),
                "rss_before_backend_mb": round(before_backend, 1),
                "rss_after_processing_mb": round(after_process, 1),
                "peak_rss_mb": round(peak, 1),
                "seconds": round(time.perf_counter() - started, 1),
                "local_bytes": sum(p.stat().st_size for p in local.rglob("*") if p.is_file())
                if local.exists()
                else 0,
            }
        )
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
