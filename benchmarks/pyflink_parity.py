"""Run the PyFlink job files of ``tests/pyflink/jobs`` on real PyFlink and on statecore, and
compare what they print: ``python -m benchmarks.pyflink_parity --pyflink-python PATH``.

PyFlink is not a dependency of statecore: install it in a virtual environment of its own
(``python -m venv /tmp/pyflink-venv && /tmp/pyflink-venv/bin/pip install apache-flink``, Java
11+) and name that interpreter. Each job file is copied with ``statecore.pyflink`` replaced by
``pyflink`` in its imports (the only lines that differ) and run there in a subprocess; the same
call runs here on a local Spark session, each case as a statecore job in a fresh
``STATECORE_HOME``. Only cases whose Flink output is determinate are run (a collection in
``STREAMING`` mode whose timers could fire at any of Flink's periodic watermarks is not); a
batch's lines are compared as multisets (Flink orders a batch's output by key), and so are
those of timers firing at the end of a stream (PyFlink hands timers to its Python worker in
bundles, which may reorder the outputs of different keys); other streams' lines in order.
Writes ``benchmarks/PYFLINK_PARITY.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
JOBS = REPO / "tests" / "pyflink" / "jobs"

CASES: list[tuple[str, str, str, bool]] = [
    # (module, call, label, ordered)
    ("state_access", "state_access_demo()", "STREAMING collection", True),
    ("state_access", "state_access_demo(mode=RuntimeExecutionMode.BATCH)", "BATCH", False),
    ("event_time_timer", "event_timer_timer_demo(mode=RuntimeExecutionMode.BATCH)", "BATCH", False),
    ("word_count", "word_count(None, None)", "BATCH", False),
    ("basic_operations", "basic_operations()", "STREAMING collection", True),
    # the outputs of timers firing at the end: their order across keys is PyFlink's own
    ("count_with_timeout", "count_with_timeout()", "STREAMING collection", False),
    ("count_with_timeout", "count_with_timeout(mode=RuntimeExecutionMode.BATCH)", "BATCH", False),
    ("ttl_counter", "ttl_counter()", "STREAMING collection", True),
    ("ttl_counter", "ttl_counter(mode=RuntimeExecutionMode.BATCH)", "BATCH", False),
    ("deduplicate_events", "deduplicate()", "STREAMING collection", True),
    ("deduplicate_events", "deduplicate(mode=RuntimeExecutionMode.BATCH)", "BATCH", False),
    ("count_window_average", "count_window_average()", "STREAMING collection", True),
    (
        "count_window_average",
        "count_window_average(mode=RuntimeExecutionMode.BATCH)",
        "BATCH",
        False,
    ),
    ("process_function", "process_function_demo()", "STREAMING collection", True),
]

_IMPORTS = "from pyflink.datastream import RuntimeExecutionMode\n"


def pyflink_source(module: str) -> str:
    """The job file as PyFlink code: its ``statecore.pyflink`` imports made ``pyflink``."""
    text = (JOBS / f"{module}.py").read_text()
    return re.sub(r"^from statecore\.pyflink", "from pyflink", text, flags=re.M)


def run_on_pyflink(python: str, module: str, call: str, folder: Path) -> tuple[list[str], float]:
    (folder / f"{module}.py").write_text(pyflink_source(module))
    code = f"{_IMPORTS}import {module}\n{module}.{call}\n"
    started = time.perf_counter()
    # PyFlink's Python workers run the ``python`` on PATH: the interpreter's own first
    path = os.pathsep.join([str(Path(python).parent), os.environ.get("PATH", "")])
    done = subprocess.run(
        [python, "-c", code], cwd=folder, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PATH": path},
    )  # fmt: skip
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{module}.{call} failed on PyFlink:\n{done.stderr[-3000:]}")
    return done.stdout.splitlines(), seconds


def run_on_statecore(spark: object, module: str, call: str, home: Path) -> tuple[list[str], float]:
    import importlib

    from statecore.pyflink.datastream import RuntimeExecutionMode

    os.environ["STATECORE_HOME"] = str(home)
    job = importlib.import_module(f"tests.pyflink.jobs.{module}")
    out = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(out):
        eval(f"job.{call}", {"job": job, "RuntimeExecutionMode": RuntimeExecutionMode})
    return out.getvalue().splitlines(), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pyflink-python", required=True, help="an interpreter with PyFlink")
    parser.add_argument("--output", default=str(REPO / "benchmarks" / "PYFLINK_PARITY.md"))
    parser.add_argument("--only", nargs="*", help="the cases of these calls (e.g. word_count)")
    args = parser.parse_args()
    cases = [c for c in CASES if not args.only or any(c[1].startswith(o) for o in args.only)]
    sys.path.insert(0, str(REPO))
    from statecore.spark.session import build_session

    spark = build_session(
        master="local[2]",
        app_name="pyflink-parity",
        config={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
        log_level="ERROR",
    )
    version = subprocess.run(
        [args.pyflink_python, "-c", "import pyflink.version as v; print(v.__version__)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (module, call, label, ordered) in enumerate(cases):
            flink, flink_s = run_on_pyflink(args.pyflink_python, module, call, Path(tmp))
            ours, ours_s = run_on_statecore(spark, module, call, Path(tmp) / f"home-{i}")
            same = flink == ours if ordered else sorted(flink) == sorted(ours)
            rows.append((module, call, label, len(flink), same, flink_s, ours_s))
            print(f"{module}.{call}: {'same' if same else 'DIFFERENT'}", file=sys.stderr)
            if not same:
                print(f"  PyFlink:   {flink}\n  statecore: {ours}", file=sys.stderr)
    spark.stop()
    lines = [
        "# The PyFlink job files on PyFlink and on statecore",
        "",
        f"`python -m benchmarks.pyflink_parity` with PyFlink {version} (its own venv, local",
        "mini-cluster) and statecore on Spark `local[2]`: each job file of `tests/pyflink/jobs`,",
        "imports `pyflink` there and `statecore.pyflink` here, the printed lines compared",
        "(a batch's, and a stream's timer outputs at its end, as multisets). Times are wall-clock",
        "per run, including each job's start.",
        "",
        "| job | call | mode | lines | same output | PyFlink s | statecore s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {m} | `{c}` | {label} | {n} | {'yes' if same else 'NO'} | {a:.1f} | {b:.1f} |"
        for m, c, label, n, same, a, b in rows
    ]
    Path(args.output).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
