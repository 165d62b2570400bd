"""Run the PyFlink job files of ``tests/pyflink/jobs`` on real PyFlink and on statecore, and
compare what they print.

Install PyFlink (it is not a dependency of statecore, and no test needs it) in a virtual
environment of its own, with Java 11 or newer on the machine::

    python3.11 -m venv /work/pyflink-venv
    /work/pyflink-venv/bin/pip install apache-flink==2.3.0

then, from the repository with its own ``.venv`` set up (``make setup jars``)::

    .venv/bin/python -m benchmarks.pyflink_parity --pyflink-python /work/pyflink-venv/bin/python
    .venv/bin/python -m benchmarks.pyflink_parity --pyflink-python ... --only side_outputs

``--only`` takes job modules, or ``module.call`` starts (``side_outputs.large_orders_demo``);
without it every case runs. The rows of the cases run are written to
``benchmarks/PYFLINK_PARITY.md`` (or ``--output``) after each case, the rows it has of the
other cases kept. Each job file is copied with ``statecore.pyflink`` replaced by ``pyflink``
in its imports (the only lines that differ) and run there in a subprocess; the same call runs
here on a local Spark session, each case as a statecore job in a fresh ``STATECORE_HOME``. A
case over files writes the job's input as the job's test writes it and passes its path as
``INPUT``.

Only cases whose Flink output is determinate are run: a collection in ``STREAMING`` mode whose
timers or windows could fire at any of Flink's periodic watermarks is not (``EXCLUDED`` says
why for each case left out). How lines are compared, per case: in order, or as multisets where
Flink's order is its own (a batch orders its output by key; timers firing at the end of a stream
are handed to PyFlink's Python worker in bundles, which may reorder different keys' outputs);
and per sink where a job prints more than one stream (Flink's sinks print as their records
arrive, so their lines interleave in no fixed way): each sink's lines apart, told by a pattern
(a print identifier's ``name> `` or the side output's own text). A difference is reported with
the first differing lines of each side. Job files in ``tests/pyflink/jobs`` that are neither in
``CASES`` nor in ``EXCLUDED`` are named at the end of a run.
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
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
JOBS = REPO / "tests" / "pyflink" / "jobs"


@dataclass(frozen=True, kw_only=True)
class Case:
    """One call of a job file, run on both sides.

    ``call`` is evaluated as ``module.call`` with ``RuntimeExecutionMode`` and ``INPUT`` (the
    path of the written input, when ``input_lines`` is given) in scope. ``ordered`` compares in
    order, else as multisets; ``sinks`` is a pattern whose match at a line's start names the
    sink the line came from (no match: the main sink), each sink's lines compared apart.
    ``input_file`` is where ``input_lines`` are written (below the case's folder) and
    ``input_arg`` the path the job is given: that file, or the folder holding it.
    """

    module: str
    call: str
    label: str
    ordered: bool
    sinks: str | None = None
    input_lines: tuple[str, ...] = ()
    input_file: str = "input/part-0.txt"
    input_arg: str = "input"


_STATE_ACCESS = ("Alice,110.1", "Bob,30.2", "Alice,20.0", "Bob,53.1", "Alice,13.1", "Bob,3.1")
_WORDS = (
    "To be, or not to be,--that is the question:--",
    "Whether 'tis nobler in the mind to suffer",
)
_CLICKS = ("1000,hi", "2000,hello", "3000,hi", "4000,hello", "5000,hi")
_EVENTS = ("u1,e1", "u1,e2", "u1,e1", "u2,e1", "u2,e1", "u1,e3")
_ORDERS = ("ann,20", "bob,150", "ann,300", "bob,5", "ann,100")
_BATCH = "mode=RuntimeExecutionMode.BATCH"
_STREAMING = "mode=RuntimeExecutionMode.STREAMING"

CASES: list[Case] = [
    Case(module="word_count_file", call="word_count(INPUT)", label="STREAMING one file",
         ordered=True, input_lines=("to be or not to be", "that is"),
         input_file="my words [1].txt", input_arg="my words [1].txt"),
    Case(module="count_window_average", call="count_window_average()",
         label="STREAMING collection", ordered=True),
    Case(module="count_window_average", call=f"count_window_average({_BATCH})", label="BATCH",
         ordered=False),
    Case(module="count_window_average", call="count_window_average(INPUT)",
         label="STREAMING one file", ordered=True,
         input_lines=("1,3", "2,10", "1,5", "2,20", "1,7"), input_file="pairs.txt",
         input_arg="pairs.txt"),
    Case(module="process_function", call="process_function_demo()",
         label="STREAMING collection", ordered=True),
    Case(module="process_function", call=f"process_function_demo({_BATCH})", label="BATCH",
         ordered=True),
    # one key, timestamps in order: a window fires only once every element of it has come,
    # whenever Flink's periodic watermarks come, and windows fire in the order of their ends
    Case(module="tumbling_time_window", call="tumbling_time_window()",
         label="STREAMING collection", ordered=True),
    Case(module="tumbling_time_window", call=f"tumbling_time_window({_BATCH})", label="BATCH",
         ordered=True),
    Case(module="sliding_window_reduce", call="sliding_window_reduce()",
         label="STREAMING collection", ordered=True),
    Case(module="sliding_window_reduce", call=f"sliding_window_reduce({_BATCH})", label="BATCH",
         ordered=True),
    Case(module="session_window_aggregate", call="session_window_aggregate()",
         label="STREAMING collection", ordered=True),
    Case(module="session_window_aggregate", call=f"session_window_aggregate({_BATCH})",
         label="BATCH", ordered=True),
    Case(module="count_window", call="count_window()", label="STREAMING collection",
         ordered=True),
    Case(module="count_window", call=f"count_window({_BATCH})", label="BATCH", ordered=False),
    # the broadcast state pattern: Flink's BATCH reads the broadcast side first (its STREAMING
    # run over two collections has no defined order between the inputs: left out)
    Case(module="broadcast_rules", call=f"broadcast_rules({_BATCH})", label="BATCH",
         ordered=False),
    Case(module="window_all_tumbling", call="window_all_tumbling()",
         label="STREAMING collection", ordered=True),
    Case(module="window_all_tumbling", call=f"window_all_tumbling({_BATCH})", label="BATCH",
         ordered=False),
    Case(module="session_dynamic_gap", call="session_dynamic_gap()",
         label="STREAMING collection", ordered=False),
    Case(module="session_dynamic_gap", call=f"session_dynamic_gap({_BATCH})", label="BATCH",
         ordered=False),
    Case(module="rich_window_aggregate", call="rich_window_aggregate()",
         label="STREAMING collection", ordered=True),
    Case(module="rich_window_aggregate", call=f"rich_window_aggregate({_BATCH})",
         label="BATCH", ordered=False),
    # a click's timer fires once both inputs passed its time: the lines are determinate, their
    # order across keys is not (timers at the end, and two sources)
    Case(module="enrich_clicks", call="enrich_clicks_demo()", label="STREAMING collection",
         ordered=False),
    Case(module="enrich_clicks", call=f"enrich_clicks_demo({_BATCH})", label="BATCH",
         ordered=False),
    # processing-time TTL of 10 s and timers an hour away: nothing expires within the run
    Case(module="count_with_ttl", call="count_with_ttl_demo()", label="STREAMING collection",
         ordered=True),
    Case(module="count_with_ttl", call=f"count_with_ttl_demo({_BATCH})", label="BATCH",
         ordered=False),
    Case(module="deduplicate", call="deduplicate_demo()", label="STREAMING collection",
         ordered=True),
    Case(module="deduplicate", call=f"deduplicate_demo({_BATCH})", label="BATCH",
         ordered=False),
    # times 1000..5500, 1 s out of orderness, sessions end 5 s after: every timer fires at the end
    Case(module="session_timeout", call="session_timeout_demo()", label="STREAMING collection",
         ordered=False),
    Case(module="session_timeout", call=f"session_timeout_demo({_BATCH})", label="BATCH",
         ordered=False),
    Case(module="side_outputs", call="side_output_demo()", label="STREAMING collection",
         ordered=True, sinks="sideout-"),
    Case(module="side_outputs", call=f"side_output_demo({_BATCH})", label="BATCH",
         ordered=True, sinks="sideout-"),
    Case(module="side_outputs", call="large_orders_demo(INPUT)", label="STREAMING files",
         ordered=True, sinks="large> ", input_lines=_ORDERS, input_file="orders/part-0.txt",
         input_arg="orders"),
    Case(module="side_outputs", call=f"large_orders_demo(INPUT, {_BATCH})", label="BATCH files",
         ordered=False, sinks="large> ", input_lines=_ORDERS, input_file="orders/part-0.txt",
         input_arg="orders"),
    Case(module="state_access", call="state_access_demo()", label="STREAMING collection",
         ordered=True),
    Case(module="state_access", call=f"state_access_demo({_BATCH})", label="BATCH",
         ordered=False),
    Case(module="state_access", call="state_access_demo(INPUT)", label="STREAMING files",
         ordered=True, input_lines=(*_STATE_ACCESS, "Bob,16.1", "Alice,20.1")),
    Case(module="event_time_timer", call=f"event_timer_timer_demo({_BATCH})", label="BATCH",
         ordered=False),
    # event times 1000..4500, 2 s out of orderness: no watermark passes a timer before the end
    Case(module="event_time_timer", call="event_timer_timer_demo(INPUT)",
         label="STREAMING files", ordered=False,
         input_lines=("1000,Alice,1.5", "2000,Bob,2.0", "1500,Alice,2.5", "3000,Bob,1.0",
                      "4500,Alice,1.0")),
    Case(module="word_count", call="word_count(None, None)", label="BATCH", ordered=False),
    Case(module="word_count", call=f"word_count(None, None, {_STREAMING})",
         label="STREAMING collection", ordered=True),
    Case(module="word_count", call="word_count(INPUT, None)", label="BATCH files",
         ordered=False, input_lines=_WORDS),
    Case(module="word_count", call=f"word_count(INPUT, None, {_STREAMING})",
         label="STREAMING files", ordered=True, input_lines=_WORDS),
    Case(module="basic_operations", call="basic_operations()", label="STREAMING collection",
         ordered=True),
    # the outputs of timers firing at the end: their order across keys is PyFlink's own
    Case(module="count_with_timeout", call="count_with_timeout()", label="STREAMING collection",
         ordered=False),
    Case(module="count_with_timeout", call=f"count_with_timeout({_BATCH})", label="BATCH",
         ordered=False),
    Case(module="count_with_timeout", call="count_with_timeout(INPUT)", label="STREAMING files",
         ordered=False, input_lines=_CLICKS),
    Case(module="ttl_counter", call="ttl_counter()", label="STREAMING collection", ordered=True),
    Case(module="ttl_counter", call=f"ttl_counter({_BATCH})", label="BATCH", ordered=False),
    Case(module="ttl_counter", call="ttl_counter(INPUT)", label="STREAMING files", ordered=True,
         input_lines=("flink", "spark", "flink", "state", "flink")),
    Case(module="deduplicate_events", call="deduplicate()", label="STREAMING collection",
         ordered=True),
    Case(module="deduplicate_events", call=f"deduplicate({_BATCH})", label="BATCH",
         ordered=False),
    Case(module="deduplicate_events", call="deduplicate(INPUT)", label="STREAMING files",
         ordered=True, input_lines=_EVENTS),
]  # fmt: skip

EXCLUDED: dict[str, str] = {
    "event_time_timer.event_timer_timer_demo()": (
        "STREAMING collection: event times 1000..10000 with 2 s out of orderness, so a periodic "
        "watermark may fire timers (each emitting the key's sum so far) before later elements "
        "come; the sums printed depend on when Flink's watermarks come"
    ),
    "word_count.word_count(INPUT, OUTPUT)": "writes a FileSink's part files, prints nothing",
    "kafka_clicks": (
        "needs a Kafka broker and Flink's Kafka connector jar, which apache-flink does not "
        "ship; its test runs it on a real broker (tests/kafka)"
    ),
}
"""Calls (and job files) not run, and why."""

KNOWN_DIFFERENCES: dict[str, str] = {
    "enrich_clicks.enrich_clicks_demo(mode=RuntimeExecutionMode.BATCH)": (
        "PyFlink 2.3.0 prints 2 of the 5 lines, on every run: bob's two clicks with the tier "
        "`unknown`, none of ann's. Flink's BATCH execution sorts both inputs by key and fires "
        "a key's timers at the end of the key, after both inputs' records of it: every click "
        "with the tier of the profile before it, statecore's 5 lines (the STREAMING case, "
        "where PyFlink's timers fire on watermarks, prints those 5 on PyFlink too); the "
        "job's test expects them (tests/pyflink/test_two_input_pyflink.py)"
    ),
    "session_dynamic_gap.session_dynamic_gap(mode=RuntimeExecutionMode.BATCH)": (
        "PyFlink 2.3.0 prints 1 of the 5 sessions, bob's last, `(bob,30,31,1)`: the sessions "
        "of merging windows fired at the end of each key are dropped but the last. Flink's "
        "BATCH execution fires every window of a key at the end of the key: statecore's 5 "
        "lines, the ones the STREAMING case prints on PyFlink too (the job's test expects "
        "them, tests/pyflink/test_window_all_pyflink.py); not looked into further"
    ),
}
"""Cases whose difference is PyFlink's, and why: reported, not counted as failures."""

_IMPORTS = "from pyflink.datastream import RuntimeExecutionMode\n"
_SHOWN = 6
"""How many lines of each side a difference shows."""


def pyflink_source(module: str) -> str:
    """The job file as PyFlink code: its ``statecore.pyflink`` imports made ``pyflink``."""
    text = (JOBS / f"{module}.py").read_text()
    return re.sub(r"^from statecore\.pyflink", "from pyflink", text, flags=re.M)


def write_input(case: Case, folder: Path) -> str | None:
    """The case's input written below ``folder``, as the job's test writes it; its path."""
    if not case.input_lines:
        return None
    path = folder / case.input_file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in case.input_lines))
    return str(folder / case.input_arg)


def by_sink(case: Case, lines: list[str]) -> dict[str, list[str]]:
    """The lines of each sink, in their order (one group, ``""``, without ``case.sinks``)."""
    groups: dict[str, list[str]] = {}
    for line in lines:
        match = re.match(case.sinks, line) if case.sinks else None
        groups.setdefault(match.group(0) if match else "", []).append(line)
    return groups


def differences(case: Case, flink: list[str], ours: list[str]) -> list[str]:
    """Where statecore's lines differ from PyFlink's, as the case compares them: for each sink,
    the first differing lines of each side (in order), or the lines one side has more of (as
    multisets). Empty when they are the same."""
    report: list[str] = []
    theirs, mine = by_sink(case, flink), by_sink(case, ours)
    for sink in sorted(set(theirs) | set(mine)):
        a, b = theirs.get(sink, []), mine.get(sink, [])
        name = f"sink {sink!r}" if sink else "main sink"
        if case.ordered and a != b:
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            report.append(f"{name}: line {first + 1} differs ({len(a)} lines vs {len(b)})")
            report.append(f"  PyFlink:   {a[first : first + _SHOWN]}")
            report.append(f"  statecore: {b[first : first + _SHOWN]}")
        elif not case.ordered and Counter(a) != Counter(b):
            only_a = sorted((Counter(a) - Counter(b)).elements())
            only_b = sorted((Counter(b) - Counter(a)).elements())
            report.append(f"{name}: as multisets, {len(a)} lines vs {len(b)}")
            report.append(f"  only PyFlink:   {only_a[:_SHOWN]}")
            report.append(f"  only statecore: {only_b[:_SHOWN]}")
    return report


def run_on_pyflink(
    python: str, case: Case, folder: Path, input_path: str | None
) -> tuple[list[str], float]:
    (folder / f"{case.module}.py").write_text(pyflink_source(case.module))
    code = f"{_IMPORTS}INPUT = {input_path!r}\nimport {case.module}\n{case.module}.{case.call}\n"
    started = time.perf_counter()
    # PyFlink's Python workers run the ``python`` on PATH: the interpreter's own first
    path = os.pathsep.join([str(Path(python).parent), os.environ.get("PATH", "")])
    done = subprocess.run(
        [python, "-c", code], cwd=folder, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PATH": path},
    )  # fmt: skip
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"failed on PyFlink:\n{done.stderr[-3000:]}")
    return done.stdout.splitlines(), seconds


def run_on_statecore(case: Case, home: Path, input_path: str | None) -> tuple[list[str], float]:
    import importlib

    from statecore.pyflink.datastream import RuntimeExecutionMode

    os.environ["STATECORE_HOME"] = str(home)
    for name in ("STATECORE_CATALOG_URL", "STATECORE_WAREHOUSE"):
        os.environ.pop(name, None)
    job = importlib.import_module(f"tests.pyflink.jobs.{case.module}")
    scope = {"job": job, "RuntimeExecutionMode": RuntimeExecutionMode, "INPUT": input_path}
    out = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(out):
        eval(f"job.{case.call}", scope)
    return out.getvalue().splitlines(), time.perf_counter() - started


def not_covered() -> list[str]:
    """Job files of ``tests/pyflink/jobs`` neither run by a case nor excluded."""
    named = {c.module for c in CASES} | {e.split(".")[0] for e in EXCLUDED}
    return sorted(p.stem for p in JOBS.glob("*.py") if p.stem != "__init__" and p.stem not in named)


def selected(only: list[str] | None) -> list[Case]:
    """The cases of the job modules named (``side_outputs``), or of ``module.call`` starting
    with a text (``side_outputs.large_orders_demo(INPUT,``); every case without ``only``."""
    if not only:
        return list(CASES)
    return [
        c
        for c in CASES
        if any(o == c.module or ("." in o and f"{c.module}.{c.call}".startswith(o)) for o in only)
    ]


def page_rows(page: str) -> dict[tuple[str, str], list[str]]:
    """The table rows of a page this module wrote, by ``(job, call)``: their cells."""
    rows = {}
    for line in page.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) >= 7 and cells[1].startswith("`"):
            rows[(cells[0], cells[1].strip("`"))] = cells
    return rows


def report_page(version: str, rows: dict[Case, list[str]]) -> str:
    """The page: a row per case measured (``rows``: its cells after job, call, mode and how
    compared: lines, same output, PyFlink s, statecore s, run), in the order of ``CASES``."""
    lines = [
        "# The PyFlink job files on PyFlink and on statecore",
        "",
        f"`python -m benchmarks.pyflink_parity` with PyFlink {version} (its own venv, local",
        "mini-cluster) and statecore on Spark `local[2]`: each job file of `tests/pyflink/jobs`,",
        "imports `pyflink` there and `statecore.pyflink` here, the printed lines compared in order",
        "(\"in order\"), or as multisets where Flink's order is its own (a batch's, and a stream's",
        "timer outputs at its end); a job printing two streams, each sink's lines apart (Flink's",
        "sinks interleave). A case over files writes the job's input as its test does. Times are",
        'wall-clock per run, including each job\'s start; "run" is the day of the run that',
        "measured the row (a run with `--only` measures its cases' rows and keeps the others;",
        '"earlier": a run before days were recorded).',
        "",
        "| job | call | mode | compared | lines | same output | PyFlink s | statecore s | run |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for case in CASES:
        if case not in rows:
            continue
        compared = "in order" if case.ordered else "multiset"
        if case.sinks:
            compared += ", per sink"
        cells = [case.module, f"`{case.call}`", case.label, compared, *rows[case]]
        if cells[5] == "NO" and f"{case.module}.{case.call}" in KNOWN_DIFFERENCES:
            cells[5] = "NO (PyFlink's, below)"
        lines.append("| " + " | ".join(cells) + " |")
    missing = [c for c in CASES if c not in rows]
    if missing:
        lines += ["", "Not measured yet: " + ", ".join(f"`{c.module}.{c.call}`" for c in missing)]
    lines += ["", "Known differences, PyFlink's:", ""]
    lines += [f"- `{name}`: {why}." for name, why in KNOWN_DIFFERENCES.items()]
    lines += ["", "Not run, and why:", ""]
    lines += [f"- `{name}`: {why}." for name, why in EXCLUDED.items()]
    lines += [
        "",
        "Measured on the shared 2-core machine (other work running beside it: the times are an",
        "upper bound); statecore's first case of a run includes the Spark session's first jobs",
        "and Python workers (warm-up), PyFlink's each start a local mini-cluster.",
    ]
    return "\n".join(lines) + "\n"


def kept_rows(path: Path) -> dict[Case, list[str]]:
    """The rows of ``path`` (a page written before) for the cases still in ``CASES``: the
    cells after job, call, mode and how compared (a page without the last column: run ``-``)."""
    if not path.is_file():
        return {}
    old = page_rows(path.read_text())
    rows = {}
    for case in CASES:
        cells = old.get((case.module, case.call))
        if cells is None:
            continue
        numbers = cells[4:] if len(cells) >= 9 else [*cells[3:7], "earlier"]
        rows[case] = numbers[:5]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pyflink-python", required=True, help="an interpreter with PyFlink")
    parser.add_argument("--output", help="the page to write (default: PYFLINK_PARITY.md)")
    parser.add_argument("--only", nargs="*", help="job modules (or module.call starts) to run")
    args = parser.parse_args()
    cases = selected(args.only)
    if not cases:
        parser.error(f"no case of {args.only}: job modules are {sorted({c.module for c in CASES})}")
    output = Path(args.output or REPO / "benchmarks" / "PYFLINK_PARITY.md")
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
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
    rows = kept_rows(output)
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(cases):
            folder = Path(tmp) / f"case-{i}"
            folder.mkdir()
            input_path = write_input(case, folder)
            name = f"{case.module}.{case.call} [{case.label}]"
            try:
                flink, flink_s = run_on_pyflink(args.pyflink_python, case, folder, input_path)
                ours, ours_s = run_on_statecore(case, folder / "home", input_path)
            except Exception as exc:  # one case's failure is reported, the others still run
                failed += 1
                rows[case] = ["-", "ERROR", "-", "-", time.strftime("%Y-%m-%d", time.gmtime())]
                print(f"{name}: ERROR {exc}", file=sys.stderr)
                output.write_text(report_page(version, rows))
                continue
            report = differences(case, flink, ours)
            known = f"{case.module}.{case.call}" in KNOWN_DIFFERENCES
            failed += bool(report) and not known
            day = time.strftime("%Y-%m-%d", time.gmtime())
            same = "NO" if report else "yes"
            rows[case] = [str(len(flink)), same, f"{flink_s:.1f}", f"{ours_s:.1f}", day]
            output.write_text(report_page(version, rows))  # after each case: a long run's so far
            verdict = (
                ("DIFFERENT (known: PyFlink's)" if known else "DIFFERENT") if report else "same"
            )
            print(f"{name}: {verdict}", file=sys.stderr)
            for line in report:
                print(f"  {line}", file=sys.stderr)
    spark.stop()
    for module in not_covered():
        print(f"tests/pyflink/jobs/{module}.py: in no case (add it to CASES)", file=sys.stderr)
    print(f"{len(cases) - failed} of {len(cases)} cases print the same lines", file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
