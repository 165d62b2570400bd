"""Point lookups on a 1,000,000-key state: latency percentiles and bytes read per lookup.

A ValueState of ``--keys`` string keys (a running total each) is snapshotted by a heap backend
at parallelism 1 and committed as checkpoint 1 (Delta + catalog, max parallelism 128). Then
``--lookups`` random keys (and a tenth as many absent keys) are looked up two ways:

- ``statecore.query.lookup``: what ``statecore state get`` runs: open the catalog, resolve the
  checkpoint, open the Delta version, read the key group's file;
- ``lookup_at`` on a resolved checkpoint: what a service holding the point open pays per key;

and two live ways, the same backend served by a live lookup server (:mod:`statecore.runtime.live`,
on the loopback) as a running stream's task serves it:

- ``lookup(..., live=True)``: the catalog (checkpoint, endpoints, token), then one HTTP request
  to the task;
- ``live_lookup`` with the endpoints resolved: the HTTP request alone.

Targets (issue 14): p50 ≤ 10 ms, p99 ≤ 30 ms, and at most ``1/max_parallelism`` of the state's
bytes read per lookup. Run: ``python -m benchmarks.lookup`` (records ``benchmarks/LOOKUP.md``).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

JOB = "bench"
OPERATOR = "main"
MAX_PARALLELISM = 128
RESULTS = Path(__file__).with_name("LOOKUP.md")


def _checkpoint(home: str, keys: int) -> Any:
    """Checkpoint 1 of a ValueState ``total`` with ``keys`` keys; the config and the backend."""
    from statecore.backends import HeapKeyedStateBackend
    from statecore.catalog import Catalog
    from statecore.checkpoint.coordinator import CheckpointCoordinator
    from statecore.config import StatecoreConfig
    from statecore.descriptors import ValueStateDescriptor
    from statecore.keygroups import KeyGroupRange, assign_to_key_group
    from statecore.runtime import KeyedProcessFunction
    from statecore.runtime.task import KeyedOperatorTask, probe_states
    from statecore.types import TypeInfo

    total = ValueStateDescriptor("total", int)

    class Total(KeyedProcessFunction):
        def open(self, ctx: Any) -> None:
            self.total = ctx.get_state(total)

        def process_element(self, value: Any, ctx: Any) -> list[Any]:
            return []

    config = StatecoreConfig.resolve(home=home, env={})
    backend = HeapKeyedStateBackend(
        key_type=TypeInfo.of(str),
        key_group_range=KeyGroupRange(0, MAX_PARALLELISM - 1),
        max_parallelism=MAX_PARALLELISM,
    )
    state: Any = backend.get_partitioned_state(total)
    for i in range(keys):
        key = f"user-{i}"
        backend.set_current_key(key, assign_to_key_group(key, MAX_PARALLELISM))
        state.update(i)
    with Catalog.connect(config.catalog_url) as catalog:
        coordinator = CheckpointCoordinator(config, catalog, job=JOB, operator=OPERATOR)
        planned = coordinator.plan(
            1, parallelism=1, max_parallelism=MAX_PARALLELISM, default_parallelism=1
        )
        planned = coordinator.check_compatible(
            planned,
            probe_states(
                Total(),
                TypeInfo.of(str),
                job=JOB,
                operator=OPERATOR,
                parallelism=1,
                max_parallelism=MAX_PARALLELISM,
            ),
        )
        task = KeyedOperatorTask(
            Total(), backend, job=JOB, operator=OPERATOR, subtask_index=0, parallelism=1
        )
        task.open()
        coordinator.commit(
            planned, task.snapshot({"total": coordinator.table_uri("total")}, checkpoint_id=1)
        )
    return config, backend


def _serve_live(config: Any, backend: Any) -> tuple[Any, Any, str]:
    """The backend served for live lookups; the registry, the endpoints and the token."""
    from statecore.catalog import Catalog, LiveEndpoint
    from statecore.keygroups import KeyGroupRange
    from statecore.runtime.live import LiveRegistry

    os.environ.setdefault("STATECORE_LIVE_HOST", "127.0.0.1")
    registry = LiveRegistry()
    with Catalog.connect(config.catalog_url) as catalog:
        token = catalog.live_token(JOB, create=True)
        assert token is not None
        held, address = registry.hold(
            job=JOB,
            operator=OPERATOR,
            subtask=0,
            key_groups=KeyGroupRange(0, MAX_PARALLELISM - 1),
            token=token,
            backend=backend,
            checkpoint_id=1,
        )
        registry.snapshotted(held, 1)
        endpoint = LiveEndpoint(
            job=JOB,
            operator=OPERATOR,
            subtask=0,
            key_group_start=0,
            key_group_end=MAX_PARALLELISM - 1,
            address=address,
            checkpoint_id=1,
        )
        catalog.set_live_endpoints(JOB, OPERATOR, [endpoint])
        return registry, catalog.live_endpoints(JOB), token


def _percentiles(seconds: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in seconds)
    return {
        "p50": statistics.median(ms),
        "p95": ms[int(len(ms) * 0.95) - 1],
        "p99": ms[int(len(ms) * 0.99) - 1],
        "max": ms[-1],
    }


def run(keys: int, lookups: int, seed: int = 7) -> str:
    from statecore.catalog import Catalog
    from statecore.checkpoint.points import checkpoint_point
    from statecore.query.live import live_lookup
    from statecore.query.lookup import lookup, lookup_at

    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="bench-lookup-") as tmp:
        start = time.perf_counter()
        config, backend = _checkpoint(f"{tmp}/home", keys)
        build = time.perf_counter() - start
        registry, endpoints, token = _serve_live(config, backend)
        wanted = [f"user-{rng.randrange(keys)}" for _ in range(lookups)]
        absent = [f"nobody-{i}" for i in range(lookups // 10)]
        with Catalog.connect(config.catalog_url) as catalog:
            point = checkpoint_point(catalog, JOB)
        lookup(JOB, "total", wanted[0], config=config)  # imports, first open
        rows: dict[str, dict[str, float]] = {}
        read: list[int] = []
        state_bytes = 0
        for name, call in (
            ("lookup (catalog + Delta + file)", lambda k: lookup(JOB, "total", k, config=config)),
            ("lookup_at (resolved checkpoint)", lambda k: lookup_at(point, "total", k)),
            (
                "live: lookup(live=True) (catalog + the task over HTTP)",
                lambda k: lookup(JOB, "total", k, config=config, live=True),
            ),
            (
                "live: live_lookup (resolved endpoints, HTTP)",
                lambda k: live_lookup(point, endpoints, token, "total", k),
            ),
        ):
            live = name.startswith("live")
            seconds = []
            for key in [*wanted, *absent]:
                t0 = time.perf_counter()
                got = call(key)
                seconds.append(time.perf_counter() - t0)
                expected = key.startswith("user-")
                if got.found != expected or (expected and got.value != int(key[5:])):
                    raise AssertionError(f"lookup of {key} gave {got}")
                if got.live != live:
                    raise AssertionError(f"lookup of {key}: live={got.live} ({got.fallback})")
                if not live:
                    read.append(got.bytes_read)
                state_bytes = got.state_bytes
            rows[name] = _percentiles(seconds)
        registry.clear()
        backend.close()
    share = max(read) / state_bytes
    lines = [
        "# Point lookups (benchmarks/lookup.py)",
        "",
        f"A ValueState of {keys:,} string keys, max parallelism {MAX_PARALLELISM}, one "
        f"checkpoint ({state_bytes:,} bytes, built in {build:.1f} s); {lookups:,} random "
        f"present keys and {len(absent):,} absent keys per way. Shared 2-core machine.",
        "",
        "| way | p50 ms | p95 ms | p99 ms | max ms |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {name} | {p['p50']:.2f} | {p['p95']:.2f} | {p['p99']:.2f} | {p['max']:.2f} |"
            for name, p in rows.items()
        ),
        "",
        f"Bytes read per lookup: mean {statistics.mean(read):,.0f} "
        f"({statistics.mean(read) / state_bytes:.3%} of the state; 1/max_parallelism = "
        f"{1 / MAX_PARALLELISM:.3%}), at most {max(read):,} ({share:.3%}: key groups differ in "
        "size).",
        "",
        "Targets: p50 ≤ 10 ms, p99 ≤ 30 ms, ≤ 1/max_parallelism of the state's bytes (checkpoint "
        "lookups; a live lookup reads the task's memory, no file).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--lookups", type=int, default=1_000)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args(argv)
    report = run(args.keys, args.lookups)
    print(report)
    if not args.no_record:
        RESULTS.write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
