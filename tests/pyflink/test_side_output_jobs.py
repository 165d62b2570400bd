"""PyFlink's ``get_side_output``: the job file ``tests/pyflink/jobs/side_outputs.py`` (PyFlink
code but for the imports) on Spark in STREAMING and BATCH, a window's late data to a Delta
table, and the keyed stage's routing of side-output values (no Spark).

What PyFlink prints: each sink's lines in their order; lines of different sinks interleave in
Flink (each sink prints as its records arrive), so the lines are compared per sink. statecore
prints a checkpoint's main output first, then each side output's.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from deltalake import DeltaTable

from statecore.config import StatecoreConfig
from statecore.errors import PyFlinkUnsupportedError
from statecore.pyflink.common import Encoder, Time, Types
from statecore.pyflink.datastream import (
    KeyedProcessFunction,
    OutputTag,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
)
from statecore.pyflink.datastream.connectors.delta import DeltaSink
from statecore.pyflink.datastream.connectors.file_system import FileSink
from statecore.pyflink.datastream.execution import dataflow, job_plans
from statecore.pyflink.datastream.functions import ProcessWindowFunction
from statecore.pyflink.datastream.window import TumblingEventTimeWindows
from statecore.snapshot.output_rows import checkpoint_commits
from statecore.testing import KeyedProcessFunctionHarness
from tests.pyflink.jobs import side_outputs

BATCH = RuntimeExecutionMode.BATCH
STREAMING = RuntimeExecutionMode.STREAMING

ODD = OutputTag("odd", Types.TUPLE([Types.STRING(), Types.INT()]))
UNREAD = OutputTag("unread", Types.STRING())


class Split(KeyedProcessFunction):
    """Counts per key; odd values to ``odd`` (PyFlink's ``yield tag, value``), every value to
    ``unread`` with ``ctx.output`` (a tag no stream reads: dropped, as in Flink)."""

    def process_element(self, value: Any, ctx: Any) -> Any:
        if value[1] % 2:
            yield ODD, (ctx.get_current_key(), value[1])
        ctx.output(UNREAD, "x")
        yield value[0]


def _flow(env: StreamExecutionEnvironment) -> Any:
    plan, sides = job_plans(env._sinks())
    return dataflow(env, plan, "job", sides)


def _run_in_harness(flow: Any, elements: list[Any]) -> tuple[list[Any], dict[str, list[Any]]]:
    """The keyed stage of ``flow`` in the harness (its elements pickled, as the source stage
    hands them on): the main output's rows and each side output's."""
    keyed = [SimpleNamespace(value=pickle.dumps(e, protocol=5), key=e[0]) for e in elements]
    with KeyedProcessFunctionHarness(flow.function, key=lambda row: row.key) as harness:
        harness.process_elements(keyed)
        sides = {s.name: harness.side_output(s.name) for s in flow.side_outputs}
        return harness.output, sides


def test_side_output_pyflink_stage_routes_each_tag_to_its_streams() -> None:
    """One tag read by two streams (one with a map and a filter) is two side outputs; the
    value yielded to a tag goes to each, through its steps; ``unread`` is dropped."""
    env = StreamExecutionEnvironment.get_execution_environment()
    main = (
        env.from_collection([])
        .key_by(lambda e: e[0], Types.STRING())
        .process(Split(), Types.STRING())
    )
    main.print()
    main.get_side_output(ODD).print()
    main.get_side_output(ODD).map(lambda o: o[1] * 10, Types.INT()).filter(lambda n: n > 10).print(
        "big"
    )
    flow = _flow(env)
    assert [s.name for s in flow.side_outputs] == ["odd", "odd.2"]
    output, sides = _run_in_harness(flow, [("a", 1), ("b", 2), ("a", 3)])
    assert [text for _, text in output] == ["a", "b", "a"]
    assert sides == {"odd": [(0, "(a,1)"), (0, "(a,3)")], "odd.2": [(0, "30")]}


def test_side_output_pyflink_only_side_outputs_sunk() -> None:
    """A job that sinks only a side output runs its keyed stage with the main output dropped."""
    env = StreamExecutionEnvironment.get_execution_environment()
    main = (
        env.from_collection([])
        .key_by(lambda e: e[0], Types.STRING())
        .process(Split(), Types.STRING())
    )
    main.get_side_output(ODD).print()
    flow = _flow(env)
    assert flow.on_output is None
    output, sides = _run_in_harness(flow, [("a", 1), ("b", 2)])
    assert output == [] and sides == {"odd": [(0, "(a,1)")]}


def test_side_output_pyflink_plans_refuse_what_they_cannot_run(tmp_path: Path) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    ds = env.from_collection([("a", 1)])
    with pytest.raises(PyFlinkUnsupportedError, match="result of process"):
        ds.get_side_output(ODD)
    main = ds.key_by(lambda e: e[0]).process(Split())
    with pytest.raises(PyFlinkUnsupportedError, match="give an OutputTag"):
        main.get_side_output("odd")
    with pytest.raises(PyFlinkUnsupportedError, match="has no side outputs"):
        main.get_side_output(ODD).get_side_output(ODD)
    clash = StreamExecutionEnvironment.get_execution_environment()
    split = clash.from_collection([]).key_by(lambda e: e[0]).process(Split())
    for tag in (ODD, ODD, OutputTag("odd.2")):
        split.get_side_output(tag).print()
    with pytest.raises(PyFlinkUnsupportedError, match="rename one of the tags"):
        _flow(clash)
    untyped = StreamExecutionEnvironment.get_execution_environment()
    split = untyped.from_collection([]).key_by(lambda e: e[0]).process(Split())
    split.get_side_output(OutputTag("x")).sink_to(DeltaSink(str(tmp_path / "x")))
    with pytest.raises(PyFlinkUnsupportedError, match=r"give OutputTag\('x', ...\) a type_info"):
        _flow(untyped)
    other = env.from_collection([("b", 2)]).key_by(lambda e: e[0]).process(Split())
    main.print()
    other.get_side_output(ODD).print()
    with pytest.raises(PyFlinkUnsupportedError, match="another operator"):
        env.execute("mixed")


def _lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().out.splitlines()


@pytest.mark.spark
@pytest.mark.parametrize("mode", [STREAMING, BATCH], ids=["streaming", "batch"])
def test_side_output_pyflink_doc_example_on_spark(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str], mode: Any
) -> None:
    """PyFlink's documented ``ProcessFunction`` with ``yield output_tag, value``: the main
    stream prints 1..5, the side output ``sideout-1``..``sideout-5``, each in input order (one
    key per element, keyed by position: BATCH keeps the order too)."""
    result = side_outputs.side_output_demo(mode)
    lines = _lines(capsys)
    assert [line for line in lines if not line.startswith("sideout-")] == list("12345")
    assert [line for line in lines if line.startswith("sideout-")] == [
        f"sideout-{n}" for n in range(1, 6)
    ]
    assert lines[:5] == list("12345")  # the checkpoint's main output first
    assert result.checkpoints == [0]


@pytest.mark.spark
def test_side_output_pyflink_keyed_stream_over_files(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Structured Streaming query over a file source: the running totals per customer on the
    main output, orders of 100 or more on the side output, mapped, printed as ``large> ...``
    as Flink's print sink with an identifier prints them."""
    folder = tmp_path / "orders"
    folder.mkdir()
    orders = ["ann,20", "bob,150", "ann,300", "bob,5", "ann,100"]
    (folder / "part-0.txt").write_text("".join(f"{o}\n" for o in orders))
    side_outputs.large_orders_demo(str(folder))
    lines = _lines(capsys)
    assert [line for line in lines if not line.startswith("large> ")] == [
        "(ann,20)",
        "(bob,150)",
        "(ann,320)",
        "(bob,155)",
        "(ann,420)",
    ]
    assert [line for line in lines if line.startswith("large> ")] == [
        "large> large order of bob: 150",
        "large> large order of ann: 300",
        "large> large order of ann: 100",
    ]
    side_table = Path(statecore_home.warehouse) / "large_orders" / "side_outputs" / "large-orders"
    assert DeltaTable(str(side_table)).to_pyarrow_table().num_rows == 3


class Count(ProcessWindowFunction):
    def process(self, key: Any, context: Any, elements: Any) -> Any:
        yield key, context.window().start, len(list(elements))


def test_side_output_pyflink_window_late_data_is_a_side_output() -> None:
    """``side_output_late_data(tag)`` then ``get_side_output(tag)``: once the watermark passed
    window [0, 5), ``("a", 3)`` is late and goes to the tag's stream."""
    late = OutputTag("late", Types.TUPLE([Types.STRING(), Types.INT()]))
    env = StreamExecutionEnvironment.get_execution_environment()
    windows = (
        env.from_collection([])
        .key_by(lambda e: e[0], Types.STRING())
        .window(TumblingEventTimeWindows.of(Time.milliseconds(5)))
        .side_output_late_data(late)
        .process(Count(), Types.TUPLE([Types.STRING(), Types.LONG(), Types.INT()]))
    )
    windows.print()
    windows.get_side_output(late).print("late")
    flow = _flow(env)
    elements = [("a", 1), ("a", 2), ("a", 8)]
    keyed = [SimpleNamespace(value=pickle.dumps(e, protocol=5), key=e[0]) for e in elements]
    with KeyedProcessFunctionHarness(flow.function, key=lambda row: row.key) as harness:
        harness.process_elements(keyed, timestamps=[1, 2, 8])
        assert [t for _, t in harness.advance_watermark(7)] == ["(a,0,2)"]
        (late_one,) = [SimpleNamespace(value=pickle.dumps(("a", 3), protocol=5), key="a")]
        assert harness.process_element(late_one, timestamp=3) == []
        assert harness.side_output("late") == [(0, "(a,3)")]


@pytest.mark.spark
def test_side_output_pyflink_to_a_delta_sink_with_the_checkpoint(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A side output into a ``DeltaSink`` in BATCH: its rows (the tag's ``TUPLE`` fields as
    columns) committed with the job's checkpoint, the main output printed."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(BATCH)
    env.set_parallelism(1)
    main = (
        env.from_collection([("a", 1), ("b", 2), ("a", 3)])
        .key_by(lambda e: e[0], Types.STRING())
        .process(Split(), Types.STRING())
    )
    main.print()
    table = str(tmp_path / "odd")
    main.get_side_output(ODD).sink_to(DeltaSink(table))
    result = env.execute("odd_values")
    assert sorted(_lines(capsys)) == ["a", "a", "b"]
    rows = DeltaTable(table).to_pyarrow_table().to_pylist()
    assert sorted(r["f1"] for r in rows) == [1, 3] and {r["f0"] for r in rows} == {"a"}
    (commit,) = list(checkpoint_commits(table))
    assert result.checkpoints == [commit.checkpoint_id]


@pytest.mark.spark
def test_side_output_pyflink_to_a_file_sink_beside_the_main_one(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path
) -> None:
    """Main output and side output each into a ``FileSink`` of one folder (BATCH): the side
    output's part file is named apart (``part-<job>-<side output>-<checkpoint>``)."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(BATCH)
    env.set_parallelism(1)
    main = (
        env.from_collection([("a", 1), ("b", 2), ("a", 3)])
        .key_by(lambda e: e[0], Types.STRING())
        .process(Split(), Types.STRING())
    )
    out = tmp_path / "out"
    encoder = Encoder.simple_string_encoder()
    main.sink_to(FileSink.for_row_format(str(out), encoder).build())
    main.get_side_output(ODD).sink_to(FileSink.for_row_format(str(out), encoder).build())
    env.execute("odd_files")
    side_files = sorted(out.glob("part-odd_files-odd-*"))
    assert [f.name for f in side_files] == ["part-odd_files-odd-000000000000"]
    assert sorted(side_files[0].read_text().splitlines()) == ["(a,1)", "(a,3)"]
    main_lines = [
        line for f in out.glob("part-*") if f not in side_files for line in f.read_text().split()
    ]
    assert sorted(main_lines) == ["a", "a", "b"]


PAGE = Path(__file__).resolve().parents[2] / "docs" / "pyflink.md"


@pytest.mark.spark
def test_side_output_pyflink_doc_page_example_runs_as_written(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/pyflink.md's "Side outputs" example prints what its comment says."""
    text = PAGE.read_text()
    start = text.index("### Side outputs")
    match = re.search(r"```python\n(.*?)```", text[start:], re.S)
    assert match is not None
    code = match.group(1)
    assert "import pyflink" not in code.replace("# from pyflink", "")
    exec(compile(code, str(PAGE), "exec"), {"__name__": "pyflink_doc"})  # the page's own code
    lines = _lines(capsys)
    assert [line for line in lines if not line.startswith("side> ")] == ["1", "2", "3"]
    assert [line for line in lines if line.startswith("side> ")] == [
        "side> sideout-1",
        "side> sideout-2",
        "side> sideout-3",
    ]
