"""Where a window element's time goes, in process (no Spark): the window benchmark's operator
(:func:`benchmarks.windows.window_operator`, a tumbling event-time window summing ``value``) run
by the task on the heap backend over the benchmark's Arrow batches, stage by stage.

    python -m benchmarks.window_breakdown --events 200000
    python -m benchmarks.window_breakdown --events 200000 --profile   # cProfile, top 25

Stages (each a run on a fresh backend; the fastest of ``--repeats`` counts):

1. **task loop, no window**: ``process_batch`` with event time ``seq``, the function doing
   nothing (Arrow to records, key made current, the call).
2. **window operator, elements**: ``process_batch`` with the window operator: assigning the
   window, its namespace, the aggregate's add, the trigger and the cleanup timer per element.
   The watermark stays put, so no window fires here.
3. **end of input**: plus the watermark at ``MAX_WATERMARK``: every window fires (the timer,
   the trigger, the aggregate's result, the window function, the window's state cleared).

Stage 2 is the window operator's own per-element cost; stage 3 is per window, shown per element
and per window (at 200,000 events the input has about 0.87 windows per element, at 2,000,000
about 0.2: each key's ~20 events fall into its ~4 windows).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as ``python benchmarks/window_breakdown.py``
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa

from benchmarks.measure import clock
from benchmarks.windows import reference, window_ms, window_operator
from benchmarks.workload import KEY_GROUP, VerificationError, Workload
from statecore.backends.timers import MAX_WATERMARK
from statecore.runtime import Context, KeyedProcessFunction

__all__ = ["window_breakdown", "main"]

HERE = Path(__file__).resolve().parent


class Nothing(KeyedProcessFunction):
    """Stage 1: the task's loop around a function that does nothing."""

    def process_element(self, value: Any, ctx: Context) -> None:
        return None


def _run(
    function: KeyedProcessFunction, batches: list[pa.RecordBatch], backend: Any, *, end: bool
) -> list[Any]:
    from statecore.runtime.task import KeyedOperatorTask

    task = KeyedOperatorTask(
        function, backend, job="bench", operator="main", subtask_index=0, parallelism=1
    )
    task.open()
    out: list[Any] = []
    for batch in batches:
        out += task.process_batch(
            batch, key="key", key_group=KEY_GROUP, event_time="seq", lateness_ms=None
        )
    if end:
        out += task.advance_watermark(MAX_WATERMARK)
    return out


def _once(run: Callable[[Any], list[Any]], home: str) -> tuple[float, list[Any]]:
    from benchmarks.inprocess import _backend
    from statecore.runtime.collector import task_gc_policy

    backend = _backend("heap", home)
    with task_gc_policy():
        start = clock()
        out = run(backend)
        seconds = clock() - start
    backend.close()
    return seconds, out


def _check(workload: Workload, rows: list[Any]) -> None:
    table = pa.table(
        {
            "key": [r[0] for r in rows],
            "window_start": [r[1] for r in rows],
            "total": [r[2] for r in rows],
        }
    )
    reference(workload).check("in-process window operator", table)


def window_breakdown(workload: Workload, repeats: int) -> list[tuple[str, float]]:
    """``(stage, µs per element added by it)`` for the three stages, then the total, then the
    last stage per window fired."""
    from benchmarks.inprocess import _batches

    batches = _batches(workload)
    size = window_ms(workload.events)
    stages: list[tuple[str, Callable[[Any], list[Any]]]] = [
        ("task loop, no window", lambda b: _run(Nothing(), batches, b, end=False)),
        (
            "window operator, elements",
            lambda b: _run(window_operator(size), batches, b, end=False),
        ),
        (
            "end of input: every window fires",
            lambda b: _run(window_operator(size), batches, b, end=True),
        ),
    ]
    best = [float("inf")] * len(stages)
    with tempfile.TemporaryDirectory(prefix="window-breakdown-") as home:
        for _ in range(repeats):
            for i, (_name, run) in enumerate(stages):
                seconds, out = _once(run, home)
                best[i] = min(best[i], seconds)
                if i == len(stages) - 1:
                    _check(workload, out)
    events = workload.events
    rows: list[tuple[str, float]] = []
    previous = 0.0
    for (name, _), seconds in zip(stages, best, strict=True):
        rows.append((name, (seconds - previous) * 1e6 / events))
        previous = seconds
    rows.append(("total", previous * 1e6 / events))
    windows = reference(workload).windows
    rows.append(("end of input, per window fired", (best[2] - best[1]) * 1e6 / windows))
    return rows


def profile(workload: Workload, top: int) -> None:
    """cProfile of the window stage (elements and the end of input), the ``top`` functions by
    their own time."""
    from benchmarks.inprocess import _batches

    batches = _batches(workload)
    operator = window_operator(window_ms(workload.events))
    with tempfile.TemporaryDirectory(prefix="window-profile-") as home:
        profiler = cProfile.Profile()
        profiler.enable()
        _, out = _once(lambda b: _run(operator, batches, b, end=True), home)
        profiler.disable()
    _check(workload, out)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="cProfile instead of stages")
    args = parser.parse_args(argv)
    workload = Workload.prepare(args.events, HERE / ".work")
    if args.profile:
        profile(workload, 25)
        return
    rows = window_breakdown(workload, args.repeats)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{args.events:,} events, best of {args.repeats}, load average {load}\n")
    print("| stage | µs per element |\n|---|---:|")
    for stage, micros in rows:
        print(f"| {stage} | {micros:.2f} |")
    total = dict(rows)["total"]
    print(f"\n{1e6 / total:,.0f} events/s in process on one core")


if __name__ == "__main__":
    try:
        main()
    except VerificationError as exc:
        raise SystemExit(str(exc)) from exc
