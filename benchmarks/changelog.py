"""Changelog checkpoints: time and bytes written per checkpoint, with and without changelog.

In-process (no Spark): one heap task per run keeps its backend warm across checkpoints, each
micro-batch of ``batch`` events updates a running total of uniformly drawn keys, and each
checkpoint goes through the real coordinator, catalog and Delta commits. Run it as
``python -m benchmarks.changelog [--keys 1000000] [--batch 10000] [--checkpoints 10]``.
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import tempfile
import time
from typing import Any

from statecore.backends import HeapKeyedStateBackend
from statecore.catalog import Catalog
from statecore.checkpoint.coordinator import CheckpointCoordinator
from statecore.config import StatecoreConfig
from statecore.descriptors import ValueStateDescriptor
from statecore.keygroups import KeyGroupRange
from statecore.runtime import Context, KeyedProcessFunction, RuntimeContext
from statecore.runtime.task import KeyedOperatorTask
from statecore.snapshot import state_table_uri
from statecore.snapshot.changelog import ChangelogConfig
from statecore.types import TypeInfo

MAX_P = 128


class Total(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total", int, default=0))

    def process_element(self, value: Any, ctx: Context) -> None:
        self.total.update(self.total.value() + value)


def run(keys: int, batch: int, checkpoints: int, changelog: ChangelogConfig | None) -> dict:
    home = tempfile.mkdtemp(prefix="bench-changelog-")
    config = StatecoreConfig.resolve(env={"STATECORE_HOME": home})
    backend = HeapKeyedStateBackend(
        key_type=TypeInfo.of(int),
        key_group_range=KeyGroupRange(0, MAX_P - 1),
        max_parallelism=MAX_P,
    )
    uris = functools.partial(state_table_uri, config.warehouse, "bench", "main")
    function = Total()
    rng = random.Random(1)
    times, written = [], []
    with Catalog.connect(config.catalog_url) as catalog:
        coordinator = CheckpointCoordinator(config, catalog, job="bench", operator="main")
        for checkpoint_id in range(checkpoints + 1):
            records = (
                [(k, None, 1) for k in range(keys)]  # checkpoint 0 builds the state
                if checkpoint_id == 0
                else [(rng.randrange(keys), None, 1) for _ in range(batch)]
            )
            planned = coordinator.plan(
                checkpoint_id, parallelism=1, max_parallelism=MAX_P, default_parallelism=1
            )
            task = KeyedOperatorTask(
                function,
                backend,
                job="bench",
                operator="main",
                subtask_index=0,
                parallelism=1,
                restore=planned.restore,
                changelog=changelog,
            )
            if checkpoint_id == 0:
                task.open()
            task.process(records)
            start = time.perf_counter()
            results = task.snapshot(uris, checkpoint_id=checkpoint_id)
            coordinator.commit(planned, results)
            elapsed = time.perf_counter() - start
            if checkpoint_id:
                times.append(elapsed)
                written.append(sum(f.size for r in results for f in r.files))
    return {
        "keys": keys,
        "changelog": changelog is not None,
        "median_s": statistics.median(times),
        "max_s": max(times),
        "median_bytes": statistics.median(written),
        "max_bytes": max(written),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--checkpoints", type=int, default=10)
    args = parser.parse_args()
    print("| keys | changelog | median s | max s | median bytes | max bytes |")
    print("|---:|---|---:|---:|---:|---:|")
    for keys in args.keys:
        for changelog in (None, ChangelogConfig()):
            r = run(keys, args.batch, args.checkpoints, changelog)
            print(
                f"| {r['keys']:,} | {'yes' if r['changelog'] else 'no'} | {r['median_s']:.3f} "
                f"| {r['max_s']:.3f} | {r['median_bytes']:,} | {r['max_bytes']:,} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
