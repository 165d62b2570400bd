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
from tests.pyflink.jobs import tumbling_time_window

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
