"""``benchmarks/pyflink_parity.py`` without PyFlink: its cases name calls the job files have and
inputs where the calls read them, its job copies differ from the files only in their imports,
and its comparison tells a difference apart from Flink's own orders (no Spark, no PyFlink)."""

from __future__ import annotations

import importlib
from pathlib import Path

from benchmarks.pyflink_parity import (
    CASES,
    JOBS,
    Case,
    differences,
    kept_rows,
    not_covered,
    pyflink_source,
    report_page,
    selected,
    write_input,
)


def test_pyflink_parity_cases_call_what_the_job_files_define(tmp_path: Path) -> None:
    for i, case in enumerate(CASES):
        job = importlib.import_module(f"tests.pyflink.jobs.{case.module}")
        function = case.call.split("(")[0]
        assert callable(getattr(job, function, None)), f"{case.module} has no {function}"
        folder = tmp_path / f"case-{i}"
        path = write_input(case, folder)
        assert ("INPUT" in case.call) == (path is not None), case
        if path is not None:
            written = (folder / case.input_file).read_text().splitlines()
            assert written == list(case.input_lines) and Path(path).exists()
    assert {c.module for c in CASES}.isdisjoint(not_covered())


def test_pyflink_parity_job_copies_differ_only_in_their_imports() -> None:
    for module in sorted({c.module for c in CASES}):
        ours = (JOBS / f"{module}.py").read_text().splitlines()
        theirs = pyflink_source(module).splitlines()
        changed = [(a, b) for a, b in zip(ours, theirs) if a != b]
        assert len(ours) == len(theirs) and changed, module
        for a, b in changed:
            assert a.startswith("from statecore.pyflink") and b == a.replace("statecore.", "", 1)
        code = [line for line in theirs if not line.lstrip().startswith("#")]
        assert not any("statecore" in line for line in code), module


def test_side_output_parity_compares_each_sink_apart() -> None:
    """Two sinks' lines interleave in Flink as their records arrive: only each sink's own order
    counts; a reordering within a sink is a difference, shown from its first differing line."""
    case = Case(module="m", call="f()", label="STREAMING", ordered=True, sinks="large> ")
    flink = ["(a,1)", "large> a", "(b,2)", "large> b"]
    assert differences(case, flink, ["(a,1)", "(b,2)", "large> a", "large> b"]) == []
    report = differences(case, flink, ["(a,1)", "(b,2)", "large> b", "large> a"])
    assert report == [
        "sink 'large> ': line 1 differs (2 lines vs 2)",
        "  PyFlink:   ['large> a', 'large> b']",
        "  statecore: ['large> b', 'large> a']",
    ]
    missing = differences(case, flink, ["(a,1)", "large> a", "large> b"])
    assert missing[0] == "main sink: line 2 differs (2 lines vs 1)"
    assert missing[1:] == ["  PyFlink:   ['(b,2)']", "  statecore: []"]


def test_pyflink_parity_multisets_name_the_lines_one_side_has_more_of() -> None:
    case = Case(module="m", call="f()", label="BATCH", ordered=False)
    assert differences(case, ["(b,1)", "(a,1)", "(a,1)"], ["(a,1)", "(b,1)", "(a,1)"]) == []
    assert differences(case, ["(a,1)", "(a,1)"], ["(a,1)", "(a,2)"]) == [
        "main sink: as multisets, 2 lines vs 2",
        "  only PyFlink:   ['(a,1)']",
        "  only statecore: ['(a,2)']",
    ]


def test_pyflink_parity_only_runs_the_job_modules_named() -> None:
    side = selected(["side_outputs"])
    assert side and {c.module for c in side} == {"side_outputs"}
    assert {c.call for c in selected(["side_outputs.large_orders_demo"])} == {
        "large_orders_demo(INPUT)",
        "large_orders_demo(INPUT, mode=RuntimeExecutionMode.BATCH)",
    }
    assert {c.module for c in selected(["deduplicate"])} == {"deduplicate"}
    assert selected(None) == CASES and selected(["no_such_job", "large_orders_demo"]) == []


def test_pyflink_parity_page_keeps_the_rows_of_cases_not_run(tmp_path: Path) -> None:
    """A run with ``--only`` rewrites its cases' rows; the page's other rows are read back as
    they were (a page of the older form too, without the last column)."""
    first, second = CASES[0], CASES[1]
    page = tmp_path / "PARITY.md"
    page.write_text(report_page("2.3.0", {first: ["3", "yes", "20.0", "2.5", "2026-11-29"]}))
    assert kept_rows(page) == {first: ["3", "yes", "20.0", "2.5", "2026-11-29"]}
    text = report_page("2.3.0", {**kept_rows(page), second: ["2", "NO", "9.0", "1.0", "today"]})
    assert f"| {second.module} | `{second.call}` | {second.label} |" in text
    (missing,) = [line for line in text.splitlines() if line.startswith("Not measured yet")]
    assert f"`{CASES[2].module}.{CASES[2].call}`" in missing
    assert f"`{first.module}.{first.call}`" not in missing
    old = f"| {first.module} | `{first.call}` | {first.label} | 8 | yes | 33.3 | 43.4 |\n"
    page.write_text(old)
    assert kept_rows(page) == {first: ["8", "yes", "33.3", "43.4", "earlier"]}
