"""PyFlink's broadcast state pattern (``DataStream.broadcast(MapStateDescriptor)``,
``connect`` to a ``BroadcastStream``, ``KeyedBroadcastProcessFunction`` and
``BroadcastProcessFunction``): the functions in the broadcast harness (no Spark), the plans
and their errors, and the stateless stage that gives every task of the keyed stage its copy of
each broadcast element; the job ``tests/pyflink/jobs/broadcast_rules.py`` on Spark.

The job's expected output, from Flink's semantics: in ``BATCH`` Flink processes the broadcast
side first (docs: "Execution Mode", order of processing), so both rules are in the broadcast
state before any item; per color the items come in their order, and an item whose shape is a
rule's second shape emits one match per item stored for that rule (the items whose shape is
the rule's first). red: rectangle, then triangle (a match), then triangle (nothing stored);
blue: rectangle twice, then triangle (two matches); green: circle, then triangle (a match of
the circle rule). No item completes two rules, so the lines of a color do not depend on the
order Flink iterates the broadcast state in. Across colors the order is the runtime's, so the
lines are compared per color, in order.
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from statecore.config import StatecoreConfig
from statecore.errors import PyFlinkUnsupportedError, StateAccessError
from statecore.keygroups import assign_key_to_parallel_operator
from statecore.pyflink.common import Types
from statecore.pyflink.datastream import (
    BroadcastConnectedStream,
    BroadcastProcessFunction,
    BroadcastStream,
    KeyedBroadcastProcessFunction,
    OutputTag,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
)
from statecore.pyflink.datastream import functions as pyflink_functions
from statecore.pyflink.datastream.broadcast import BroadcastFunctionRunner
from statecore.pyflink.datastream.execution import dataflow, job_plans
from statecore.pyflink.datastream.operators import CheckpointedPipelineFunction
from statecore.pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor
from statecore.runtime.co_process import TaggedElement
from statecore.testing import KeyedBroadcastHarness, KeyedProcessFunctionHarness
from tests.pyflink.jobs import broadcast_rules

BACKENDS = ["heap", "rocksdb"]

MATCHES = {
    "red": ["MATCH: ('red', 'rectangle') - ('red', 'triangle') (rectangle-then-triangle)"],
    "blue": ["MATCH: ('blue', 'rectangle') - ('blue', 'triangle') (rectangle-then-triangle)"] * 2,
    "green": ["MATCH: ('green', 'circle') - ('green', 'triangle') (circle-then-triangle)"],
}
RULES = broadcast_rules.RULE_STATE_DESCRIPTOR


def _per_color(lines: Iterable[str]) -> dict[str, list[str]]:
    return {c: [line for line in lines if f"('{c}'" in line] for c in MATCHES}


def _harness(function: Any, *, keyed: bool = True, **options: Any) -> KeyedBroadcastHarness:
    runner = BroadcastFunctionRunner(function, keyed=keyed)
    key = options.pop("key", lambda item: item[0])
    states = [d.to_statecore() for d in options.pop("states", [RULES])]
    return KeyedBroadcastHarness(runner, key=key, states=states, **options)


def test_broadcast_pattern_pyflink_names_importable_as_from_pyflink() -> None:
    for name in ("BroadcastProcessFunction", "KeyedBroadcastProcessFunction"):
        assert getattr(pyflink_functions, name) is globals()[name]
    assert issubclass(KeyedBroadcastProcessFunction, pyflink_functions.Function)
    assert KeyedBroadcastProcessFunction.ReadOnlyContext is not None
    assert KeyedBroadcastProcessFunction.Context is BroadcastProcessFunction.Context


@pytest.mark.parametrize("backend", BACKENDS)
def test_broadcast_pattern_pyflink_rules_job_matches_in_the_harness(backend: str) -> None:
    """The job's function as Flink's BATCH runs it: the rules first, then the items."""
    with _harness(broadcast_rules.PatternMatcher(), backend=backend) as harness:
        for rule in broadcast_rules.RULES:
            assert harness.process_broadcast_element(rule) == []
        lines = [line for item in broadcast_rules.ITEMS for line in harness.process_element(item)]
        stored = harness.broadcast_state(RULES.to_statecore())
    assert _per_color(lines) == MATCHES
    assert sorted(stored) == ["circle-then-triangle", "rectangle-then-triangle"]


class Limits(KeyedBroadcastProcessFunction):
    """A limit per account kind, broadcast; each payment over its kind's limit is flagged, and
    a reset (``apply_to_keyed_state``) zeroes every account's count of flags."""

    LIMITS = MapStateDescriptor("limits", Types.STRING(), Types.INT())
    FLAGS = ValueStateDescriptor("flags", Types.INT())

    def open(self, runtime_context: Any) -> None:
        self.flags = runtime_context.get_state(self.FLAGS)

    def process_element(self, payment: Any, ctx: Any) -> Any:
        limits = ctx.get_broadcast_state(self.LIMITS)
        limit = limits.get(payment[1])
        if limit is not None and payment[2] > limit:
            self.flags.update((self.flags.value() or 0) + 1)
            ctx.timer_service().register_event_time_timer(ctx.timestamp() + 10)
            yield ctx.get_current_key(), payment[2], self.flags.value(), sorted(limits.keys())

    def process_broadcast_element(self, update: Any, ctx: Any) -> Any:
        if update == "reset":
            visited: list[Any] = []

            def reset(key: Any, state: Any) -> None:
                visited.append((key, state.value()))
                state.clear()

            ctx.apply_to_keyed_state(self.FLAGS, reset)
            yield "reset", sorted(visited)
            return
        ctx.get_broadcast_state(self.LIMITS).put(update[0], update[1])

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        limits = ctx.get_broadcast_state(self.LIMITS)
        yield "timer", ctx.get_current_key(), timestamp, str(ctx.time_domain()), dict(limits)


@pytest.mark.parametrize("backend", BACKENDS)
def test_broadcast_pattern_pyflink_apply_to_keyed_state_and_timers(backend: str) -> None:
    with _harness(Limits(), key=lambda p: p[0], states=[Limits.LIMITS], backend=backend) as harness:
        harness.process_broadcast_element(("card", 100))
        harness.process_broadcast_element(("wire", 1000))
        assert harness.process_element(("ann", "card", 250), timestamp=5) == [
            ("ann", 250, 1, ["card", "wire"])
        ]
        assert harness.process_element(("bob", "wire", 500), timestamp=6) == []
        harness.process_element(("bob", "card", 101), timestamp=7)
        assert harness.process_broadcast_element("reset") == [("reset", [("ann", 1), ("bob", 1)])]
        assert harness.process_broadcast_element("reset") == [("reset", [])]
        fired = harness.advance_watermark(16)
    assert fired == [("timer", "ann", 15, "TimeDomain.EVENT_TIME", {"card": 100, "wire": 1000})]


def test_broadcast_pattern_pyflink_apply_to_keyed_state_decodes_pickled_keys() -> None:
    """A job keyed without a key type keys its state by the pickled key: the function gets
    the key itself."""
    pickled = lambda p: pickle.dumps(p[0], protocol=5)  # noqa: E731
    with _harness(Limits(), key=pickled, states=[Limits.LIMITS]) as harness:
        harness.process_broadcast_element(("card", 1))
        harness.process_element((("ann", 7), "card", 5), timestamp=1)
        assert harness.process_broadcast_element("reset") == [("reset", [(("ann", 7), 1)])]


class WritesInProcessElement(KeyedBroadcastProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        state = ctx.get_broadcast_state(RULES)
        assert dict(state.items()) == {"r": ("r", "a", "b")} and "r" in state
        state.put("x", ("x", "a", "b"))

    def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
        ctx.get_broadcast_state(RULES).put(value[0], value)


def test_broadcast_pattern_pyflink_state_is_read_only_in_process_element() -> None:
    with _harness(WritesInProcessElement()) as harness:
        harness.process_broadcast_element(("r", "a", "b"))
        with pytest.raises(StateAccessError, match="read-only in process_element"):
            harness.process_element(("red", "a"))


class Tagger(BroadcastProcessFunction):
    """A non-keyed broadcast function: each element tagged with the latest broadcast tag."""

    def open(self, runtime_context: Any) -> None:
        self.subtask = runtime_context.get_index_of_this_subtask()
        self.runtime_context = runtime_context

    def process_element(self, value: Any, ctx: Any) -> Any:
        tag = ctx.get_broadcast_state(RULES).get("tag")
        yield value, None if tag is None else tag[1], ctx.timestamp(), self.subtask

    def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
        ctx.get_broadcast_state(RULES).put("tag", ("tag", value, ""))
        yield f"tag {value} at watermark {ctx.current_watermark()}"


def test_broadcast_pattern_pyflink_broadcast_process_function_without_a_key() -> None:
    with _harness(Tagger(), keyed=False, key=len) as harness:
        assert harness.process_element("a", timestamp=1) == [("a", None, 1, 0)]
        assert harness.process_broadcast_element("v1") == [
            f"tag v1 at watermark {harness.watermark}"
        ]
        assert harness.process_element("b", timestamp=2) == [("b", "v1", 2, 0)]
        function = harness.adapter.function.function
        with pytest.raises(StateAccessError, match="keyed state"):
            function.runtime_context.get_state(ValueStateDescriptor("x", Types.INT()))


class NoKeyHere(BroadcastProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        return [ctx.get_current_key()]

    def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
        ctx.apply_to_keyed_state(ValueStateDescriptor("x", Types.INT()), print)


def test_broadcast_pattern_pyflink_without_a_key_has_no_key_and_no_keyed_state() -> None:
    with _harness(NoKeyHere(), keyed=False, key=lambda e: 1) as harness:
        with pytest.raises(PyFlinkUnsupportedError, match="no key"):
            harness.process_element("a")
        with pytest.raises(PyFlinkUnsupportedError, match="KeyedBroadcastProcessFunction"):
            harness.process_broadcast_element("b")


def _job(env: Any) -> tuple[Any, Any]:
    items = env.from_collection(broadcast_rules.ITEMS)
    rules = env.from_collection(broadcast_rules.RULES)
    return items, rules


def test_broadcast_pattern_pyflink_plans_refuse_what_they_cannot_run() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    items, rules = _job(env)
    keyed = items.key_by(lambda i: i[0])
    broadcast = rules.broadcast(RULES)
    assert isinstance(broadcast, BroadcastStream)
    assert isinstance(keyed.connect(broadcast), BroadcastConnectedStream)
    matcher = broadcast_rules.PatternMatcher()
    cases = [
        (lambda: rules.broadcast(), "without a MapStateDescriptor"),
        (lambda: rules.broadcast(ValueStateDescriptor("v", Types.INT())), "MapStateDescriptor"),
        (lambda: keyed.broadcast(RULES), "broadcast of a keyed stream"),
        (lambda: items.connect(broadcast).process(matcher), "beside a stream without a key"),
        (lambda: keyed.connect(broadcast).process(Tagger()), "beside a keyed stream"),
        (lambda: keyed.connect(broadcast).process(lambda e: e), "give a KeyedBroadcast"),
        (lambda: keyed.reduce(lambda a, b: a).connect(broadcast), "after a keyed function"),
    ]
    for call, hint in cases:
        with pytest.raises(PyFlinkUnsupportedError, match=hint):
            call()


@pytest.mark.parametrize("parallelism", [1, 3])
def test_broadcast_pattern_pyflink_every_task_gets_each_rule_first(parallelism: int) -> None:
    """The plan's broadcast input gives each rule once per task of the keyed stage (a key in
    each task's key-group range), numbered before the items so that a task processes the
    rules first; the keyed stage keeps the broadcast state as operator state."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.set_parallelism(parallelism)
    items, rules = _job(env)
    stream = items.key_by(lambda i: i[0], key_type=Types.STRING()).connect(rules.broadcast(RULES))
    stream.process(broadcast_rules.PatternMatcher(), Types.STRING()).print()
    flow = dataflow(env, env._plans[-1], "broadcast-plan")
    assert flow.parallelism == parallelism and flow.max_parallelism == 128
    assert isinstance(flow.function, CheckpointedPipelineFunction)
    (_, keyed), (_, copies) = flow.inputs
    records = [(pickle.dumps(r, protocol=5), None) for r in broadcast_rules.RULES]
    rows = list(copies(records, 0, 1))
    assert len(rows) == len(broadcast_rules.RULES) * parallelism
    tasks = {assign_key_to_parallel_operator(key, 128, parallelism) for key, *_ in rows}
    assert tasks == set(range(parallelism))
    assert {pickle.loads(value) for _, value, _, _ in rows} == {
        TaggedElement(2, rule) for rule in broadcast_rules.RULES
    }
    item_rows = list(keyed([(pickle.dumps(broadcast_rules.ITEMS[0]), None)], 0, 1))
    assert max(seq for *_, seq in rows) < min(seq for *_, seq in item_rows)


SEEN = OutputTag("seen", Types.STRING())


class Seen(KeyedBroadcastProcessFunction):
    """Emits to a side output from both sides: ``ctx.output`` on the broadcast side,
    ``yield tag, value`` on the keyed side."""

    def process_element(self, item: Any, ctx: Any) -> Any:
        rules = sorted(ctx.get_broadcast_state(RULES).keys())
        yield SEEN, f"{ctx.get_current_key()} saw {rules}"
        yield item[1]

    def process_broadcast_element(self, rule: Any, ctx: Any) -> Any:
        ctx.get_broadcast_state(RULES).put(rule[0], rule)
        ctx.output(SEEN, f"rule {rule[0]}")


def test_broadcast_pattern_pyflink_keyed_stage_routes_both_sides_side_outputs() -> None:
    """The job's keyed stage (the plan's pipeline function) in the harness, fed as the source
    stages feed it: the broadcast copies (input 2) and the items (input 1, keyed without a key
    type, so by the pickled key); each side's values for the tag reach the side output, and
    ``get_current_key()`` is the key itself."""
    env = StreamExecutionEnvironment.get_execution_environment()
    items, rules = _job(env)
    main = items.key_by(lambda i: i[0]).connect(rules.broadcast(RULES)).process(Seen())
    main.print()
    main.get_side_output(SEEN).print("seen")
    plan, sides = job_plans(env._sinks())
    flow = dataflow(env, plan, "job", sides)
    (_, keyed), (_, copies) = flow.inputs
    pickled = [(pickle.dumps(e, protocol=5), None) for e in broadcast_rules.RULES[:1]]
    rows = list(copies(pickled, 0, 1)) + list(
        keyed([(pickle.dumps(("red", "circle"), protocol=5), None)], 0, 1)
    )
    records = [SimpleNamespace(key=key, value=value) for key, value, _, _ in rows]
    with KeyedProcessFunctionHarness(flow.function, key=lambda r: r.key, key_type=bytes) as h:
        h.process_elements(records)
        assert [text for _, text in h.output] == ["circle"]
        assert [text for _, text in h.side_output("seen")] == [
            "rule rectangle-then-triangle",
            "red saw ['rectangle-then-triangle']",
        ]


@pytest.mark.spark
@pytest.mark.parametrize(
    ("mode", "backend"),
    [(RuntimeExecutionMode.BATCH, "rocksdb"), (RuntimeExecutionMode.STREAMING, "heap")],
    ids=["batch", "streaming"],
)
def test_broadcast_pattern_pyflink_rules_job_prints_flinks_output(
    spark: Any,
    statecore_home: StatecoreConfig,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    mode: Any,
    backend: str,
) -> None:
    """The job as written, on Spark: in BATCH the output Flink gives (see the module
    docstring); in STREAMING over collections Flink gives no order between the two inputs,
    and statecore's is BATCH's (the rules first), so the lines are the same."""
    if backend == "rocksdb":
        from statecore.pyflink.datastream import EmbeddedRocksDBStateBackend

        made = StreamExecutionEnvironment.get_execution_environment
        monkeypatch.setattr(
            StreamExecutionEnvironment,
            "get_execution_environment",
            staticmethod(lambda *a: made(*a).set_state_backend(EmbeddedRocksDBStateBackend())),
        )
    broadcast_rules.broadcast_rules(mode)
    lines = capsys.readouterr().out.splitlines()
    assert _per_color(lines) == MATCHES
    assert len(lines) == 4


PAGE = Path(__file__).resolve().parents[2] / "docs" / "pyflink.md"


@pytest.mark.spark
def test_broadcast_pattern_pyflink_doc_example_runs_as_written(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/pyflink.md's "Broadcast state" example prints what its comment says: in BATCH
    both thresholds are in the broadcast state before any reading (the broadcast side first);
    s1's humidity and s2's temperature are over theirs, s1's temperature is not."""
    text = PAGE.read_text()
    match = re.search(r"```python\n(.*?)```", text[text.index("### Broadcast state") :], re.S)
    assert match is not None
    code = match.group(1)
    assert "import pyflink" not in code.replace("# from pyflink", "")
    exec(compile(code, str(PAGE), "exec"), {"__name__": "pyflink_doc"})  # the page's own code
    assert sorted(capsys.readouterr().out.splitlines()) == ["s1: 80.0 > 70.0", "s2: 30.1 > 25.0"]


@pytest.mark.spark
def test_broadcast_pattern_pyflink_stream_over_files_at_parallelism_two(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The job's function in a Structured Streaming query over two folders of text files, at
    parallelism 2: each of the two tasks gets every rule (a copy under a key of its key-group
    range), before the items of the same micro-batch, and the matches are the job's (red and
    blue are keyed to one task, green to the other: both need the rules)."""
    from statecore.pyflink.common import WatermarkStrategy
    from statecore.pyflink.datastream.connectors.file_system import FileSource, StreamFormat

    folders = {}
    for name, rows in (("items", broadcast_rules.ITEMS), ("rules", broadcast_rules.RULES)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "part-0.txt").write_text("".join(",".join(r) + "\n" for r in rows))
        folders[name] = str(folder)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)

    def lines(folder: str) -> Any:
        source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), folder)
        return env.from_source(
            source.process_static_file_set().build(),
            watermark_strategy=WatermarkStrategy.no_watermarks(),
            source_name=folder,
        ).map(lambda line: tuple(line.split(",")))

    items, rules = lines(folders["items"]), lines(folders["rules"])
    items.key_by(lambda i: i[0], key_type=Types.STRING()).connect(rules.broadcast(RULES)).process(
        broadcast_rules.PatternMatcher(), Types.STRING()
    ).print()
    env.execute("broadcast_rules_files")
    printed = capsys.readouterr().out.splitlines()
    assert {line.split("> ", 1)[0] for line in printed} <= {"1", "2"}
    assert _per_color([line.split("> ", 1)[1] for line in printed]) == MATCHES
