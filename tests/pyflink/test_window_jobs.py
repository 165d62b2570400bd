"""PyFlink's window jobs (tests/pyflink/jobs: PyFlink code but for the imports) on Spark, in
STREAMING and BATCH, with the output Flink gives for the same input (parallelism 1).

How the expectations follow from Flink's semantics: an event-time window [start, end) fires
once the watermark reaches ``end - 1``; a bounded input ends with ``MAX_WATERMARK``, so every
open window fires at the end; in BATCH every window fires once, at the end of its key. With one
key, or compared sorted across keys, the lines are the same in both modes.
"""

from __future__ import annotations

from typing import Any

import pytest

from statecore.config import StatecoreConfig
from statecore.pyflink.datastream import RuntimeExecutionMode
from tests.pyflink.jobs import (
    count_window,
    session_window_aggregate,
    sliding_window_reduce,
    tumbling_time_window,
)

pytestmark = pytest.mark.spark

BATCH = RuntimeExecutionMode.BATCH
STREAMING = RuntimeExecutionMode.STREAMING


def _lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().out.splitlines()


TUMBLING = ["(hi,0,5,4)", "(hi,5,10,3)", "(hi,15,20,1)"]
"""Timestamps 1..5, 8, 9, 15 in windows of 5 ms: [0, 5) holds 1-4, [5, 10) holds 5, 8, 9,
[15, 20) holds 15. The output type is a ``Types.TUPLE``, so Flink prints Java's ``Tuple4``
(``(hi,0,5,4)``), as this example prints on PyFlink."""


@pytest.mark.parametrize("mode", [STREAMING, BATCH], ids=["streaming", "batch"])
def test_window_operator_pyflink_tumbling_process_window_function_on_spark(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str], mode: Any
) -> None:
    tumbling_time_window.tumbling_time_window(mode)
    assert _lines(capsys) == TUMBLING


SLIDING = ["(hi,3)", "(hi,10)", "(hi,14)", "(hi,17)", "(hi,17)", "(hi,17)", "(hi,15)", "(hi,15)"]
"""Windows of 5 ms starting every 2 ms (at even times), in order of their ends: [-2, 3) holds 1, 2;
[0, 5) 1-4; [2, 7) 2-5; [4, 9) 4, 5, 8; [6, 11) and [8, 13) 8, 9; [10, 15) nothing (no
output); [12, 17) and [14, 19) 15. The reduced element keeps the input's ``TUPLE`` type."""


def test_window_operator_pyflink_sliding_reduce_on_spark_streaming(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    sliding_window_reduce.sliding_window_reduce()
    assert _lines(capsys) == SLIDING


def test_window_operator_pyflink_session_aggregate_on_spark_streaming(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """Gap 5 ms: 1, 2, 3, 4, 8, 9 chain into one session [1, 14) (each within 5 ms of the last),
    averaging 27 / 6; 15 starts another (14 < 15), averaging 15. ``DOUBLE`` prints as Java's."""
    session_window_aggregate.session_window_aggregate()
    assert _lines(capsys) == ["4.5", "15.0"]


@pytest.mark.parametrize("mode", [STREAMING, BATCH], ids=["streaming", "batch"])
def test_window_operator_pyflink_count_window_on_spark(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str], mode: Any
) -> None:
    """Every 2 elements of a key fire and purge its window: a 1+3, b 2+5, a 4+6; b's 7 waits
    for a second element that never comes (a count window does not fire at the end of input).
    STREAMING emits in input order; BATCH groups by key (compared sorted)."""
    count_window.count_window(mode)
    lines = _lines(capsys)
    expected = ["(a,4)", "(b,7)", "(a,10)"]
    assert lines == expected if mode == STREAMING else sorted(lines) == sorted(expected)
