"""PyFlink's two-input spellings (``connect``, ``ConnectedStreams``, ``CoMapFunction``,
``CoFlatMapFunction``, ``CoProcessFunction``, ``KeyedCoProcessFunction``) and ``union``: the
functions in the two-input harness (no Spark), the plans' errors, and the ported job
``tests/pyflink/jobs/enrich_clicks.py`` on Spark.

The job's expected output, from Flink's semantics: both inputs have monotonous timestamps, so
the connected operator's watermark is the smaller of its inputs' (each the largest timestamp
seen minus 1 ms), and a click's timer at its time ``t`` fires only once both inputs passed
``t``: every profile update at or before ``t`` was processed by then, whatever the
interleaving of the two sources. Each click gets the tier of the user's latest profile at or
before it: ann's click at 1000 none, at 3000 gold (2500), at 6000 platinum (5000); bob's
clicks silver (500). In BATCH Flink fires a key's timers at the end of the key, after all its
elements: the same lines. Across keys the order of timer output is PyFlink's own (see
tests/pyflink/test_datastream_jobs.py), so the lines are compared per key, in order.
"""

from __future__ import annotations

from typing import Any

import pytest

from statecore.config import StatecoreConfig
from statecore.errors import PyFlinkUnsupportedError
from statecore.pyflink.common import Types
from statecore.pyflink.datastream import (
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    KeyedCoProcessFunction,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
)
from statecore.pyflink.datastream import functions as pyflink_functions
from statecore.pyflink.datastream.connected_streams import CoMapRunner, CoProcessRunner
from statecore.pyflink.datastream.state import ValueStateDescriptor
from statecore.testing import KeyedTwoInputHarness
from tests.pyflink.jobs import enrich_clicks

BACKENDS = ["heap", "rocksdb"]

ENRICHED = {
    "ann": ["('ann', '/', 'unknown')", "('ann', '/cart', 'gold')", "('ann', '/pay', 'platinum')"],
    "bob": ["('bob', '/', 'silver')", "('bob', '/help', 'silver')"],
}


def test_two_input_pyflink_names_importable_as_from_pyflink() -> None:
    for name in ("CoMapFunction", "CoFlatMapFunction", "CoProcessFunction"):
        assert getattr(pyflink_functions, name) is globals()[name]
    assert pyflink_functions.KeyedCoProcessFunction is KeyedCoProcessFunction


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_input_pyflink_enrich_clicks_in_the_harness(backend: str) -> None:
    """The job's function, with Flink's watermark of two monotonous inputs (the smaller of
    the two) advanced after each element."""
    function = enrich_clicks.EnrichClicks()
    key = (lambda c: c[1], lambda p: p[1])
    elements = sorted(
        [(c[0], 1, c) for c in enrich_clicks.CLICKS]
        + [(p[0], 2, p) for p in enrich_clicks.PROFILES]
    )
    with KeyedTwoInputHarness(function, key=key, backend=backend) as harness:
        seen = {1: -(1 << 63), 2: -(1 << 63)}
        for timestamp, which, element in elements:
            feed = harness.process_element1 if which == 1 else harness.process_element2
            feed(element, timestamp=timestamp)
            seen[which] = timestamp - 1
            harness.advance_watermark(max(harness.watermark, min(seen.values())))
        harness.end_input()
        lines = [str(out) for out in harness.output]
    assert {k: [line for line in lines if f"'{k}'" in line] for k in ENRICHED} == ENRICHED


class Tag(CoMapFunction):
    def map1(self, value: Any) -> Any:
        return "click", value

    def map2(self, value: Any) -> Any:
        return "profile", value


class Split(CoFlatMapFunction):
    def flat_map1(self, value: Any) -> Any:
        yield from value.split()

    def flat_map2(self, value: Any) -> Any:
        return None


class Counting(CoMapFunction):
    """A keyed co-map with state shared by both inputs (a rich function in Flink)."""

    def open(self, runtime_context: Any) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def map1(self, value: Any) -> Any:
        self.count.update((self.count.value() or 0) + 1)
        return value, self.count.value()

    map2 = map1


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_input_pyflink_co_map_and_co_flat_map_dispatch_per_input(backend: str) -> None:
    with KeyedTwoInputHarness(CoMapRunner(Tag(), keyed=False), key=id) as harness:
        assert harness.process_element1("a") == [("click", "a")]
        assert harness.process_element2("b") == [("profile", "b")]
    with KeyedTwoInputHarness(CoMapRunner(Split(), keyed=False), key=id) as harness:
        assert harness.process_element1("to be") == ["to", "be"]
        assert harness.process_element2("ignored") == []
    keyed = CoMapRunner(Counting(), keyed=True)
    with KeyedTwoInputHarness(keyed, key=lambda e: e, backend=backend) as harness:
        harness.process_element1("ann")
        assert harness.process_element2("ann") == [("ann", 2)]


def test_two_input_pyflink_co_process_function_has_no_keyed_state_or_timers() -> None:
    class Stateful(CoProcessFunction):
        def open(self, runtime_context: Any) -> None:
            runtime_context.get_state(ValueStateDescriptor("s", Types.LONG()))

        def process_element1(self, value: Any, ctx: Any) -> Any:
            yield value, ctx.timestamp()

        def process_element2(self, value: Any, ctx: Any) -> Any:
            ctx.timer_service()

    with pytest.raises(PyFlinkUnsupportedError, match="key_by"):
        KeyedTwoInputHarness(CoProcessRunner(Stateful()), key=id)

    class Timers(Stateful):
        def open(self, runtime_context: Any) -> None:
            pass

    with KeyedTwoInputHarness(CoProcessRunner(Timers()), key=id) as harness:
        assert harness.process_element1("a", timestamp=5) == [("a", 5)]
        with pytest.raises(PyFlinkUnsupportedError, match="only on keyed streams"):
            harness.process_element2("b")


def test_two_input_pyflink_plans_refuse_what_flink_refuses() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    ds = env.from_collection([("a", 1)])
    keyed = ds.key_by(lambda e: e[0])
    cases = [
        (lambda: keyed.connect(ds).process(enrich_clicks.EnrichClicks()), "key both inputs"),
        (lambda: ds.connect(ds).process(enrich_clicks.EnrichClicks()), "key both inputs"),
        (lambda: keyed.connect(keyed).map(lambda e: e), "CoMapFunction"),
        (lambda: ds.connect(ds).key_by(lambda e: e, lambda e: e).process(None), "statecore runs"),
        (lambda: keyed.reduce(lambda a, b: a).connect(ds), "before their keyed functions"),
        (lambda: ds.connect(object()), "connects two DataStreams"),
        (lambda: keyed.reduce(lambda a, b: a).union(ds), "union the streams before it"),
        (lambda: ds.union(keyed.reduce(lambda a, b: a)), "union after a keyed function"),
    ]
    for call, hint in cases:
        with pytest.raises(PyFlinkUnsupportedError, match=hint):
            call()


@pytest.mark.spark
@pytest.mark.parametrize(
    ("mode", "backend"),
    [(RuntimeExecutionMode.STREAMING, "heap"), (RuntimeExecutionMode.BATCH, "rocksdb")],
)
def test_two_input_pyflink_enrich_clicks_job_prints_flinks_output(
    spark: Any,
    statecore_home: StatecoreConfig,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    mode: Any,
    backend: str,
) -> None:
    if backend == "rocksdb":
        from statecore.pyflink.datastream import EmbeddedRocksDBStateBackend

        made = StreamExecutionEnvironment.get_execution_environment
        monkeypatch.setattr(
            StreamExecutionEnvironment,
            "get_execution_environment",
            staticmethod(lambda *a: made(*a).set_state_backend(EmbeddedRocksDBStateBackend())),
        )
    enrich_clicks.enrich_clicks_demo(mode=mode)
    lines = capsys.readouterr().out.splitlines()
    assert {k: [line for line in lines if f"'{k}'" in line] for k in ENRICHED} == ENRICHED
    assert len(lines) == 5


@pytest.mark.spark
def test_two_input_pyflink_union_and_co_map_on_spark(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """``union`` of three streams keyed and reduced (Flink: a running sum per key in input
    order within each source; sources interleave, so compared as the final sums), and a
    ``CoMapFunction`` over two unkeyed streams (one line per element)."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.set_parallelism(1)
    a = env.from_collection([("x", 1), ("y", 2)])
    b = env.from_collection([("x", 10)])
    c = env.from_collection([("y", 20), ("x", 100)]).map(lambda e: (e[0], e[1] * 2))
    a.union(b, c).key_by(lambda e: e[0]).reduce(lambda p, q: (p[0], p[1] + q[1])).print()
    env.execute("union")
    assert sorted(capsys.readouterr().out.splitlines()) == ["('x', 211)", "('y', 42)"]

    # a keyed stream's union is its elements' (PyFlink's KeyedStream.union): keyed again after
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.set_parallelism(1)
    a = env.from_collection([("x", 1), ("y", 2)]).key_by(lambda e: e[1])
    b = env.from_collection([("x", 10)]).key_by(lambda e: e[0])
    a.union(b).key_by(lambda e: e[0]).reduce(lambda p, q: (p[0], p[1] + q[1])).print()
    env.execute("union_of_keyed")
    assert sorted(capsys.readouterr().out.splitlines()) == ["('x', 11)", "('y', 2)"]

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    clicks = env.from_collection(["/", "/cart"])
    profiles = env.from_collection(["gold"])
    clicks.connect(profiles).map(Tag()).print()
    env.execute("co_map")
    assert sorted(capsys.readouterr().out.splitlines()) == [
        "('click', '/')",
        "('click', '/cart')",
        "('profile', 'gold')",
    ]
