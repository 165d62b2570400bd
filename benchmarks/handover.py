"""Warm state hand-over (issue 21 §3): the time a stream's task spends getting its state, with
warm state hosts and without, at parallelism 1, 2 and 4 on Spark ``local[2]``.

    python -m benchmarks.handover                    # 31 x 65,536 events -> RESULTS.md
    python -m benchmarks.handover --batches 6 --batch-events 4096 --no-write   # quick look
    python -m benchmarks.handover --backend rocksdb --hosts-only --section "RocksDB"

The workload of :mod:`benchmarks.stream` (100,000 keys, running sum, heap backend, its
defaults: changelog checkpoints, 10 retained), one Parquet file per micro-batch. Per
parallelism and mode, one stream of every micro-batch but the last; each run logs, per task,
the ms from the task's start to its state opened (``acquire_ms`` of the checkpoint's
metrics: with hosts, the connection to the host included) and whether it continued warm. Then,
with hosts, every host is asked to exit and a new query without hosts runs the last
micro-batch: its tasks restore the whole state from Delta (no worker held it), a **cold
restore** at that size, the yardstick. The aim:
in every micro-batch after the first, the slowest task's acquisition at most 10 % of the cold
restore's median. Without hosts (``warm_hosts=False``, the task in whichever Python worker
Spark picked), the share of tasks that paid a restore. Spark's ``triggerExecution`` median per
mode shows what the hand-over of the records to the host costs. Every output is checked
against a pandas reference.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.measure import clock
from benchmarks.on_spark import OUTPUT_SCHEMA, _fresh, _verify_output, session
from benchmarks.report import machine_info, replace_section
from benchmarks.stream import WORK, _batch_ms, _stream, prepare
from benchmarks.workload import Workload

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
HEADING = "## Warm state hand-over (hosts)"
PARALLELISMS = (1, 2, 4)
AIM = 0.10


@dataclass
class Run:
    """One micro-batch: per task, whether it continued warm and its acquisition ms, wall
    and the CPU time of the acquiring threads."""

    warm_tasks: int
    tasks: int
    acquire_ms: list[float]
    acquire_cpu_ms: list[float]

    def slowest(self) -> tuple[float, float]:
        """The slowest task's acquisition: wall and CPU ms."""
        return max(zip(self.acquire_ms, self.acquire_cpu_ms, strict=True))


class _Runs(logging.Handler):
    """The driver's "... state acquired in [...] ms" line of each completed run."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.runs: list[Run] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "state acquired in" in str(record.msg) and isinstance(record.args, tuple):
            args = record.args
            self.runs.append(
                Run(int(args[3]), int(args[4]), list(args[8]), list(args[9]))  # type: ignore[arg-type]
            )


@dataclass
class Variant:
    parallelism: int
    hosts: bool
    runs: list[Run] = field(default_factory=list)
    cold: Run | None = None
    batch_ms: list[float] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def label(self) -> str:
        return f"p={self.parallelism}, {'hosts' if self.hosts else 'worker (no hosts)'}"

    @property
    def later(self) -> list[Run]:
        return self.runs[1:]

    @property
    def restored_share(self) -> float:
        tasks = sum(r.tasks for r in self.later)
        return sum(r.tasks - r.warm_tasks for r in self.later) / tasks if tasks else 0.0

    def worst_ms(self) -> float:
        return max(max(r.acquire_ms) for r in self.later)

    def median_ms(self) -> float:
        return statistics.median(ms for r in self.later for ms in r.acquire_ms)

    def worst_cpu_ms(self) -> float:
        return max(max(r.acquire_cpu_ms) for r in self.later)

    def median_cpu_ms(self) -> float:
        return statistics.median(ms for r in self.later for ms in r.acquire_cpu_ms)


def stop_all_hosts() -> int:
    """Ask every host of this user on this machine to exit (the session's executor's)."""
    from statecore.spark.host import hosts_root, stop_hosts

    folders = [p for p in hosts_root().glob("*") if p.name.isdigit()]
    return sum(stop_hosts(int(p.name)) for p in folders)


def stream(
    spark: Any,
    workload: Workload,
    folder: Path,
    parallelism: int,
    hosts: bool,
    tag: str = "",
    backend: str = "heap",
) -> Variant:
    from benchmarks.functions import RunningSum
    from statecore.config import StatecoreConfig
    from statecore.spark import keyed_stream

    variant = Variant(parallelism, hosts)
    run_dir = _fresh(WORK / "handover-runs" / f"{tag}p{parallelism}-{hosts}")
    config = StatecoreConfig.resolve(home=str(run_dir / "home"), env={})
    files = sorted(folder.glob("batch-*.parquet"))
    inp = run_dir / "in"
    inp.mkdir()

    def feed(chosen: list[Path]) -> None:
        for f in chosen:
            (inp / f.name).symlink_to(f)  # Spark takes them by (the file's) modification time

    def query(hosts: bool) -> Any:
        q = keyed_stream(
            _stream(spark, inp),
            function=RunningSum(),
            key="key",
            output_schema=OUTPUT_SCHEMA,
            job="handover",
            checkpoint_location=str(run_dir / "offsets"),
            trigger={"availableNow": True},
            parallelism=parallelism,
            order_by=["seq"],
            config=config,
            output_table=str(run_dir / "output"),
            warm_hosts=hosts,
            backend=backend,
        )
        q.awaitTermination()
        if q.exception() is not None:
            raise RuntimeError(f"{variant.label}: {q.exception()}")
        return q

    runs = _Runs()
    driver_log = logging.getLogger("statecore.spark.keyed")
    driver_log.addHandler(runs)
    driver_log.setLevel(logging.INFO)
    try:
        feed(files[:-1] if hosts else files)
        start = clock()
        variant.batch_ms = _batch_ms(query(hosts))
        variant.seconds = clock() - start
        variant.runs = [Run(0, parallelism, [0.0], [0.0]), *runs.runs]  # the first restores nothing
        if hosts:  # the yardstick: the state restored from Delta, no host start in it
            stop_all_hosts()  # (the workers never held it: it was in the hosts)
            feed(files[-1:])
            query(False)
            variant.cold = runs.runs[-1]
            assert variant.cold.warm_tasks == 0, variant.cold
    finally:
        driver_log.removeHandler(runs)
    _verify_output(workload, variant.label, run_dir / "output")
    return variant


def render(variants: list[Variant], args: Any) -> str:
    cold = {v.parallelism: v.cold for v in variants if v.cold is not None}
    lines = [
        HEADING + (f", {args.section}" if args.section else ""),
        "",
        f"`python -m benchmarks.handover {' '.join(sys.argv[1:])}` "
        f"({time.strftime('%Y-%m-%d')}): {args.batches} micro-batches of "
        f"{args.batch_events:,} events, 100,000 keys, running sum, {args.backend} backend, "
        "`keyed_stream` "
        "defaults, Spark `local[2]`. Acquisition: a task's start to its state opened (with "
        "hosts, the connection to its host included), per task, wall clock and the CPU time "
        "of the acquiring threads (`acquire_ms`, `acquire_cpu_ms`; the difference is time "
        "spent waiting for a core, or for a restore's reader threads); the yardstick is a cold "
        "restore of the whole state (the last micro-batch run by a new query after every host "
        "was stopped: each task restored its key groups from Delta). Machine: "
        + "; ".join(f"{k} {v}" for k, v in machine_info().items())
        + ".",
        "",
        "| variant | tasks that restored (after the first) | acquisition ms, median / "
        "worst micro-batch | its CPU ms, median / worst | cold restore ms (median of its "
        "tasks) | worst / cold | worst CPU / cold | micro-batch median ms | stream s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    verdicts = []
    for v in variants:
        reference = cold.get(v.parallelism)
        cold_ms = statistics.median(reference.acquire_ms) if reference else None
        share = v.worst_ms() / cold_ms if cold_ms else None
        cpu_share = v.worst_cpu_ms() / cold_ms if cold_ms else None
        lines.append(
            f"| {v.label} | {v.restored_share:.0%} | {v.median_ms():,.1f} / {v.worst_ms():,.1f} "
            f"| {v.median_cpu_ms():,.1f} / {v.worst_cpu_ms():,.1f} "
            f"| {'' if cold_ms is None else f'{cold_ms:,.0f}'} "
            f"| {'' if share is None else f'{share:.1%}'} "
            f"| {'' if cpu_share is None else f'{cpu_share:.1%}'} "
            f"| {statistics.median(v.batch_ms):,.0f} | {v.seconds:.1f} |"
        )
        if v.hosts and share is not None and cold_ms:
            over = sum(r.slowest()[0] > AIM * cold_ms for r in v.later)
            verdicts.append(
                f"p={v.parallelism}: the worst micro-batch's slowest task took {share:.1%} of a "
                f"cold restore ({'within' if share <= AIM else '**not within**'} the 10 % aim; "
                f"{over} of {len(v.later)} micro-batches over it), its CPU time at most "
                f"{cpu_share:.1%}"
            )
    lines += ["", "; ".join(verdicts) + ".", ""]
    lines.append("Per micro-batch, the slowest task's acquisition, wall (CPU) ms, hosts:")
    lines.append("")
    for v in variants:
        if v.hosts:
            worst = ", ".join("{:.1f} ({:.1f})".format(*r.slowest()) for r in v.later)
            lines.append(f"- p={v.parallelism}: {worst}")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=31)
    parser.add_argument("--batch-events", type=int, default=65_536)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--backend", choices=("heap", "rocksdb"), default="heap")
    parser.add_argument("--hosts-only", action="store_true", help="skip the variants without hosts")
    parser.add_argument("--section", default="", help="appended to the results' heading")
    args = parser.parse_args(argv)
    workload, folder = prepare(args.batches, args.batch_events)
    workload.reference  # noqa: B018 (computed before any timing)
    spark = session()
    small, small_folder = prepare(3, 1024)
    modes = (True,) if args.hosts_only else (True, False)
    for hosts in modes:  # Spark's own start, untimed
        stream(spark, small, small_folder, 2, hosts, tag="warmup-", backend=args.backend)
    variants = []
    for p in PARALLELISMS:
        for hosts in modes:
            v = stream(spark, workload, folder, p, hosts, backend=args.backend)
            print(
                f"{v.label}: restored {v.restored_share:.0%}, acquisition median "
                f"{v.median_ms():.1f} worst {v.worst_ms():.1f} ms (CPU worst "
                f"{v.worst_cpu_ms():.1f}), cold "
                f"{v.cold.acquire_ms if v.cold else '-'}",
                file=sys.stderr,
                flush=True,
            )
            variants.append(v)
    spark.stop()
    section = render(variants, args)
    print(section)
    if not args.no_write:
        heading = HEADING + (f", {args.section}" if args.section else "")
        RESULTS.write_text(replace_section(RESULTS.read_text(), heading, section))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
