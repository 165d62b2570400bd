"""A task's restore: its part of the plan, and its files read several at a time (issue 35).

Two ratios, each measured within one run so the machine's noise cancels:

- ``plan``: a restore plan of one keyed state at max parallelism 32,768 (fake file sizes, paths as
  statecore writes them) for parallelism 1,000. Before: every task unpickled the whole plan
  (Spark unpickles a task's function, the spec with it, in each task) and scanned every file for
  its own (``task_files``, ``bytes_to_restore``, ``file_paths``). Now: the driver cuts the plan
  into :class:`~statecore.runtime.shares.TaskShares` once, and a task unpickles the spec (the
  parts as bytes) and only its own part, then asks the same of it. Per task: bytes decoded and
  the time to find its share, sampled over 20 subtasks.
- ``reads``: one task's files (``--files`` small key-group files, written by statecore's own
  writer) read back by :func:`~statecore.snapshot.reads.read_table_files` one after another
  (1 thread) and from ``--threads`` threads, alternating, ``--repeat`` times; on a local folder
  and on the S3 test server (moto, ``tests/object_store/s3_server.py``, on 127.0.0.1).

Run: ``python -m benchmarks.restore_reads`` (about a minute); ``--record`` writes the section
of ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.report import machine_info, replace_section
from tests.object_store.process import running_s3_server

HERE = Path(__file__).parent
RESULTS = HERE / "RESULTS.md"
HEADING = "## A task's restore: its part of the plan, its files several at a time (issue 35)"
MAX_PARALLELISM = 32_768
PARALLELISM = 1_000


def plan_costs(max_parallelism: int, parallelism: int, sample: int = 20) -> dict[str, float]:
    """The whole plan against the cut one, per task (medians over ``sample`` subtasks)."""
    from statecore.keygroups import compute_key_group_range_for_operator_index
    from statecore.runtime.restore import RestoredState, RestorePlan
    from statecore.runtime.shares import TaskShares
    from statecore.snapshot import TableFile

    files = tuple(
        TableFile(
            f"key_group={kg}/cp-2-{kg * parallelism // max_parallelism}-"
            f"{uuid.uuid4().hex[:12]}.parquet",
            kg,
            30_000,
            3_000_000,
        )
        for kg in range(max_parallelism)
    )
    plan = RestorePlan(
        "scale",
        "main",
        checkpoint_id=2,
        states={"total": RestoredState("/warehouse/scale/main/keyed/total", "key: string", files)},
        parallelism=parallelism,
        registered={"total": ("value", "key: string, value: int64")},
    )
    whole = pickle.dumps(plan, pickle.HIGHEST_PROTOCOL)
    started = time.perf_counter()
    shares = TaskShares.cut(plan, parallelism=parallelism, max_parallelism=max_parallelism)
    cut_s = time.perf_counter() - started
    shipped = pickle.dumps(shares, pickle.HIGHEST_PROTOCOL)
    before, after, part_bytes = [], [], []
    for i in range(0, parallelism, max(1, parallelism // sample)):
        kgs = compute_key_group_range_for_operator_index(max_parallelism, parallelism, i)
        started = time.perf_counter()
        restore = pickle.loads(whole)
        restore.task_files(kgs, i), restore.bytes_to_restore(kgs), restore.file_paths(kgs)
        before.append(time.perf_counter() - started)
        started = time.perf_counter()
        mine = pickle.loads(shipped).share(i)
        mine.task_files(kgs, i), mine.bytes_to_restore(kgs), mine.file_paths(kgs)
        after.append(time.perf_counter() - started)
        assert mine.task_files(kgs, i) == plan.task_files(kgs, i)
        part_bytes.append(len(shares.parts[i]))
    common = len(pickle.dumps(shares.common, pickle.HIGHEST_PROTOCOL))
    return {
        "whole_bytes": len(whole),
        "shipped_bytes": len(shipped),
        "part_bytes": statistics.median(part_bytes),
        "common_bytes": common,
        "cut_s": cut_s,
        "before_s": statistics.median(before),
        "after_s": statistics.median(after),
    }


def write_files(uri: str, count: int, rows: int) -> list[Any]:
    """``count`` key-group files of ``rows`` rows each, written as a task writes them."""
    from statecore.snapshot import TableFile
    from statecore.snapshot.files import write_key_group_files

    parts = (
        (
            kg,
            pa.table(
                {
                    "key": [f"user-{kg}-{i}" for i in range(rows)],
                    "namespace": [""] * rows,
                    "value": pa.array(range(rows), pa.int64()),
                }
            ),
        )
        for kg in range(count)
    )
    written = write_key_group_files(uri, parts, checkpoint_id=1, subtask=0, threads=8)
    return [TableFile(f.path, f.key_group, f.rows, f.size) for f in written]


def read_ratio(uri: str, files: list[Any], threads: int, repeat: int) -> dict[str, float]:
    """Seconds to read ``files`` with 1 and with ``threads`` threads, alternating."""
    from statecore.snapshot.reads import read_table_files

    times: dict[int, list[float]] = {1: [], threads: []}
    for _ in range(repeat):
        for n in (1, threads):
            started = time.perf_counter()
            read = sum(t.num_rows for _, t in read_table_files(uri, files, label="b", threads=n))
            times[n].append(time.perf_counter() - started)
            assert read == sum(f.rows for f in files)
    sequential, parallel = statistics.median(times[1]), statistics.median(times[threads])
    ratios = [a / b for a, b in zip(times[1], times[threads], strict=True)]
    return {
        "sequential_s": sequential,
        "parallel_s": parallel,
        "ratio": statistics.median(ratios),
        "bytes": sum(f.size for f in files),
    }


def render(plan: dict[str, float], reads: dict[str, dict[str, float]], args: Any) -> str:
    info = machine_info()
    kb = 1e3
    lines = [
        HEADING,
        "",
        f"`python -m benchmarks.restore_reads {' '.join(sys.argv[1:])}` "
        f"({time.strftime('%Y-%m-%d')}). Machine: "
        + "; ".join(f"{k} {v}" for k, v in info.items() if k not in ("java", "pyspark"))
        + ".",
        "",
        f"**A task's share of the plan**, max parallelism {MAX_PARALLELISM:,}, parallelism "
        f"{PARALLELISM:,}, one keyed state (fake file sizes; medians over 20 subtasks):",
        "",
        "| | before (whole plan per task) | now (its part) | ratio |",
        "|---|---:|---:|---:|",
        f"| bytes a task decodes (before: unpickles) | {plan['whole_bytes'] / kb:,.0f} KB | "
        f"{(plan['part_bytes'] + plan['common_bytes']) / kb:,.1f} KB (its compressed part "
        f"{plan['part_bytes'] / kb:,.1f} KB + common {plan['common_bytes'] / kb:,.1f} KB) | "
        f"{plan['whole_bytes'] / (plan['part_bytes'] + plan['common_bytes']):,.0f}× |",
        f"| time to find its share (unpickle + task files, bytes, file paths) | "
        f"{plan['before_s'] * 1e3:,.1f} ms | {plan['after_s'] * 1e3:,.2f} ms | "
        f"{plan['before_s'] / plan['after_s']:,.0f}× |",
        f"| pickled with the tasks' spec (shipped once per executor) | "
        f"{plan['whole_bytes'] / kb:,.0f} KB | {plan['shipped_bytes'] / kb:,.0f} KB | "
        f"{plan['whole_bytes'] / plan['shipped_bytes']:,.2f}× |",
        f"| driver: cutting the plan (once per run) | — | {plan['cut_s'] * 1e3:,.0f} ms | |",
        "",
        f"**A task's files read back**: {args.files} key-group files of {args.rows} rows, 1 "
        f"thread against {args.threads}, alternating, {args.repeat} times (median of the "
        "paired ratios):",
        "",
        f"| storage | files | bytes | 1 thread | {args.threads} threads | ratio |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for where, r in reads.items():
        lines.append(
            f"| {where} | {args.files} | {r['bytes'] / 1e6:,.1f} MB | "
            f"{r['sequential_s'] * 1e3:,.0f} ms | {r['parallel_s'] * 1e3:,.0f} ms | "
            f"{r['ratio']:.2f}× |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-s3", action="store_true", help="only the local folder")
    parser.add_argument("--record", action="store_true", help="write RESULTS.md's section")
    args = parser.parse_args()
    plan = plan_costs(MAX_PARALLELISM, PARALLELISM)
    reads: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        files = write_files(folder, args.files, args.rows)
        reads["local folder"] = read_ratio(folder, files, args.threads, args.repeat)
    if not args.no_s3:
        with running_s3_server(["bench"], environ=True):
            uri = f"s3://bench/{uuid.uuid4().hex[:8]}/keyed/total"
            files = write_files(uri, args.files, args.rows)
            reads["S3 test server (moto, 127.0.0.1)"] = read_ratio(
                uri, files, args.threads, args.repeat
            )
    section = render(plan, reads, args)
    print(section)
    if args.record:
        RESULTS.write_text(replace_section(RESULTS.read_text(), HEADING, section))


if __name__ == "__main__":
    main()
