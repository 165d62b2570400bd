"""Exactly-once after a SIGKILL of the stream's driver: a subprocess runs the stream of
:mod:`tests.spark.stream_job` armed with a kill point of :mod:`statecore.snapshot.faults` in its
second micro-batch; the query restarts here with the same checkpoint location, and its state
and output table equal those of a stream that never died. On the subprocess's ``local[1]`` (one
Python worker) a micro-batch continues the last one's state warm."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from statecore.config import StatecoreConfig
from statecore.snapshot.faults import FAULT_MARKER_ENV, FAULT_POINT_ENV
from tests.faults.harness import REPO, SUBPROCESS_TIMEOUT, _kill_group, subprocess_env

from .stream_job import start
from .test_stream import completed, delta_rows, spec, totals, write_file

pytestmark = pytest.mark.spark

FILES = [
    [("u1", 1000, 1), ("u2", 2000, 2)],
    [("u1", 15_000, 3), ("u3", 3000, 7)],
    [("u2", 16_000, 4), ("u1", 30_000, 5)],
]


@pytest.mark.parametrize("point", ["catalog:complete:after:2", "task:process:2"])
def test_stream_exactly_once_after_driver_kill(
    spark, statecore_home: StatecoreConfig, tmp_path, point
) -> None:  # type: ignore[no-untyped-def]
    s = spec(tmp_path, job="killed")
    for i, rows in enumerate(FILES):
        write_file(Path(s["input"]), f"f{i}", rows)
    marker = tmp_path / "fired"
    env = subprocess_env(statecore_home, **{FAULT_POINT_ENV: point, FAULT_MARKER_ENV: str(marker)})
    with (tmp_path / "driver.log").open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.spark.stream_job", json.dumps(s)],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            returncode = process.wait(timeout=SUBPROCESS_TIMEOUT)
        finally:
            _kill_group(process.pid)
    assert marker.exists(), (tmp_path / "driver.log").read_text()[-3000:]
    assert returncode != 0
    if point.startswith("catalog:complete:after"):  # micro-batches 0 and 1 completed there:
        # on local[1] (one Python worker) micro-batch 1 continued micro-batch 0's state warm
        assert [c.warm_share for c in completed(statecore_home, "killed")] == ["0/1", "1/1"]
    query = start(spark, s, trigger={"availableNow": True})  # the restart
    query.awaitTermination()
    reference = spec(tmp_path / "ref", job="reference")
    for i, rows in enumerate(FILES):
        write_file(Path(reference["input"]), f"f{i}", rows)
    never_died = start(spark, reference, trigger={"availableNow": True})
    never_died.awaitTermination()
    assert totals(statecore_home, "killed") == totals(statecore_home, "reference")
    assert delta_rows(Path(s["output_table"])) == delta_rows(Path(reference["output_table"]))
    got = [(c.checkpoint_id, c.watermark) for c in completed(statecore_home, "killed")]
    assert got == [(c.checkpoint_id, c.watermark) for c in completed(statecore_home, "reference")]
    assert got == [(0, 2000), (1, 15_000), (2, 30_000)]
