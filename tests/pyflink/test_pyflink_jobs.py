"""Every job of ``tests/pyflink/jobs`` differs from PyFlink code only in its imports; the three
PyFlink-style functions of ``tests/pyflink/jobs`` run in statecore's task (the harness,
no Spark) unchanged but for their imports, with the output Flink gives."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from statecore.testing import KeyedProcessFunctionHarness
from tests.pyflink.jobs.count_with_ttl import CountWithTtl
from tests.pyflink.jobs.deduplicate import RETENTION, Deduplicate
from tests.pyflink.jobs.session_timeout import SessionTimeout

JOBS = Path(__file__).parent / "jobs"
BACKENDS = ["heap", "rocksdb"]
END_OF_INPUT = (1 << 63) - 1
"""Flink's final watermark of a bounded input (``Long.MAX_VALUE``): every event-time timer fires."""

# The PyFlink modules the jobs import from, each replaced by statecore.pyflink's twin.
PYFLINK_MODULES = {
    "pyflink.common",
    "pyflink.common.typeinfo",
    "pyflink.common.time",
    "pyflink.datastream",
    "pyflink.datastream.functions",
    "pyflink.datastream.state",
    "pyflink.datastream.window",
    "pyflink.common.watermark_strategy",
    "pyflink.datastream.connectors",
    "pyflink.datastream.connectors.file_system",
    "pyflink.datastream.connectors.kafka",
    "pyflink.common.serialization",
}


@pytest.mark.parametrize("job", sorted(p.name for p in JOBS.glob("[a-z]*.py")))
def test_pyflink_jobs_differ_from_pyflink_code_only_in_their_imports(job: str) -> None:
    """statecore appears in a job only as ``from statecore.pyflink.X import ...`` under the
    comment ``# from pyflink.X import ...`` with the same names: PyFlink's import line."""
    lines = (JOBS / job).read_text().splitlines()
    ported = [i for i, line in enumerate(lines) if "statecore" in line]
    assert ported, job
    for i in ported:
        line = lines[i]
        if line.endswith(" import ("):  # one import of several names, as ruff formats it
            end = lines.index(")", i)
            line = line[: -len("(")] + " ".join(n.strip() for n in lines[i + 1 : end])[:-1]
        match = re.fullmatch(r"from statecore\.(pyflink[\w.]*) import (.+)", line)
        assert match is not None, line
        assert match[1] in PYFLINK_MODULES
        assert lines[i - 1] == f"# from {match[1]} import {match[2]}"


def run_with_watermarks(
    harness: KeyedProcessFunctionHarness,
    elements: Iterable[tuple[Any, int]],
    out_of_orderness: int,
) -> None:
    """Feed ``(element, timestamp)`` pairs as Flink's bounded-out-of-orderness watermark
    generator emitting after each element would (watermark = the largest timestamp seen minus
    ``out_of_orderness`` minus 1 ms, firing due timers before the next element), then end the
    bounded input with the final watermark."""
    largest = None
    for element, timestamp in elements:
        harness.process_element(element, timestamp=timestamp)
        largest = timestamp if largest is None else max(largest, timestamp)
        harness.advance_watermark(largest - out_of_orderness - 1)
    harness.advance_watermark(END_OF_INPUT)


@pytest.mark.parametrize("backend", BACKENDS)
def test_pyflink_session_timeout_with_event_time_timers_gives_flinks_output(backend: str) -> None:
    """Sessions end 5 s after a key's last element; the watermark trails by 1 s.

    After (c, 10500) the watermark is 9499: the timers at 6000, 7000 and 8000 are outdated,
    b's at 9000 closes its session of 2. (b, 8000) is then behind the watermark: the function
    drops it (it reaches the function, as in Flink). (a, 10000) is not late: a's session holds
    4. The end of input fires a's last timer (15000) and c's (15500).
    """
    elements = [
        (("a", 1), 1000),
        (("b", 1), 2000),
        (("a", 2), 3000),
        (("b", 2), 4000),
        (("a", 3), 6500),
        (("c", 1), 10500),
        (("b", 3), 8000),
        (("a", 4), 10000),
    ]
    with KeyedProcessFunctionHarness(
        SessionTimeout(), key=lambda e: e[0], backend=backend
    ) as harness:
        run_with_watermarks(harness, elements, out_of_orderness=1000)
        assert harness.output == [("b", 2), ("a", 4), ("c", 1)]
        assert harness.timers() == [] and harness.keys("count") == []


def test_pyflink_session_timeout_timers_fire_between_elements() -> None:
    """b's session closed before (b, 8000) came: fed with every timer held back to the end,
    b would count 3, the answer the issue saw before timers fired between records."""
    with KeyedProcessFunctionHarness(SessionTimeout(), key=lambda e: e[0]) as harness:
        harness.process_elements([("b", 1), ("b", 2)], timestamps=[2000, 4000])
        assert harness.advance_watermark(9499) == [("b", 2)]
        harness.process_element(("b", 3), timestamp=8000)  # late: dropped by the function
        assert harness.advance_watermark(END_OF_INPUT) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_pyflink_count_with_ttl_expires_on_the_processing_time_clock(backend: str) -> None:
    """TTL 10 s, refreshed on create and write; the harness's clock is TTL's."""
    with KeyedProcessFunctionHarness(
        CountWithTtl(), key=lambda e: e[0], backend=backend
    ) as harness:
        assert harness.process_element(("a", "x")) == [("a", 1)]
        harness.set_processing_time(6_000)
        assert harness.process_elements([("a", "y"), ("b", "z")]) == [("a", 2), ("b", 1)]
        harness.set_processing_time(15_999)  # a written at 6000: alive until 16000
        assert harness.process_element(("a", "w")) == [("a", 3)]
        harness.set_processing_time(16_000)  # b written at 6000: expired
        assert harness.process_element(("b", "v")) == [("b", 1)]
        harness.set_processing_time(40_000)
        assert harness.state("count", key="a") is None  # expired, never returned
        saved = harness.snapshot()
    assert "count" not in saved.keyed  # cleanup_full_snapshot leaves expired values out


@pytest.mark.parametrize("backend", BACKENDS)
def test_pyflink_map_state_deduplication(backend: str) -> None:
    with KeyedProcessFunctionHarness(Deduplicate(), key=lambda e: e[0], backend=backend) as harness:
        events = [("u1", "e1"), ("u1", "e2"), ("u1", "e1"), ("u2", "e1"), ("u2", "e1")]
        assert harness.process_elements(events) == [("u1", "e1"), ("u1", "e2"), ("u2", "e1")]
        harness.set_processing_time(1_000)
        assert harness.process_element(("u1", "e3")) == [("u1", "e3")]
        assert harness.state("seen", key="u1") == {"e1": 0, "e2": 0, "e3": 1_000}
        harness.set_processing_time(RETENTION)  # e1 and e2 forgotten, e3 not yet
        assert harness.state("seen", key="u1") == {"e3": 1_000}
        assert harness.process_elements([("u1", "e1"), ("u1", "e3")]) == [("u1", "e1")]
