"""The cost of timers between records on the per-record path, in process (no Spark).

``python -m benchmarks.timer_order --events 200000 --reps 7`` runs ``RunningSum`` through
``KeyedOperatorTask.process_batch`` over the workload's batches twice per repetition, the order
alternating, both with ``seq`` as the event time (``ctx.timestamp``): as before this change,
the watermark advancing only at the end of a run (``lateness_ms=None``), and with the watermark
advancing between records (``lateness_ms=0``). The ``seq`` column rises with every record, so
every record raises the largest event time seen and the watermark moves after each one: the
worst case. The report gives each variant's best and their ratio (between records / at the
end).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from benchmarks.inprocess import operator_task
from benchmarks.workload import Workload


def _once(backend_name: str, workload: Workload, lateness: int | None) -> float:
    return operator_task(backend_name, workload, event_time="seq", lateness_ms=lateness).seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--backends", nargs="+", default=["heap", "rocksdb"])
    parser.add_argument(
        "--work", type=Path, default=Path(tempfile.gettempdir()) / "statecore-bench"
    )
    args = parser.parse_args(argv)
    workload = Workload.prepare(args.events, args.work)
    print(
        f"Timers between records, {args.events:,} events, {args.reps} alternating repetitions:\n\n"
        "| backend | timers at the end, best (s) | between records, best (s) | ratio | pairs |\n"
        "|---|---:|---:|---:|---|"
    )
    for backend in args.backends:
        runs: dict[int | None, list[float]] = {None: [], 0: []}
        for rep in range(args.reps):
            order = (None, 0) if rep % 2 == 0 else (0, None)
            for lateness in order:
                runs[lateness].append(_once(backend, workload, lateness))
            print(rep, backend, runs[None][-1], runs[0][-1], file=sys.stderr, flush=True)
        off, on = runs[None], runs[0]
        pairs = ", ".join(f"{b / a:.2f}" for a, b in zip(off, on, strict=True))
        print(
            f"| {backend} | {min(off):.3f} | {min(on):.3f} | {min(on) / min(off):.3f} | {pairs} |"
        )


if __name__ == "__main__":
    main()
