"""A job of reference-model programs through Spark: runs with rescales, a kill, and a retry.

A job is cut into runs (a :class:`Run` each: backend, parallelism, max parallelism), one
checkpoint each, with a rescale past the max parallelism
(:func:`statecore.ops.rescale.rescale`) before a run that names another max parallelism. In the
run ``kill_run`` the task processing the record of the job's :class:`~.two_inputs.KillPoint` is
SIGKILLed (its Python process: the run fails, nothing of it is committed) and the run is
retried, as a scheduler retries a failed task: the retry must give what a run that never died
gives.

**The watermark of a run.** Each run's input is processed at the watermark the last run ended
with, then the watermark moves to the run's own: the job's out-of-orderness
(``allowed_lateness`` of ``keyed_process``) is :data:`OUT_OF_ORDERNESS`, far beyond the
programs' timestamps, so no record moves it, and one record of program ``-1`` (ignored by the
functions) at the run's watermark plus :data:`OUT_OF_ORDERNESS` sets where the run ends
(``statecore.spark.keyed``: a batch run ends at its largest event time minus the lateness).
The last run ends the input (``end_of_input``: the watermark at its maximum).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from statecore.catalog import Catalog, CheckpointStatus
from statecore.config import StatecoreConfig
from statecore.ops.rescale import rescale
from statecore.spark import KeyedRun

__all__ = ["OUT_OF_ORDERNESS", "Rows", "Run", "carrier_time", "draw", "run_job"]

OUT_OF_ORDERNESS = timedelta(seconds=1000)
Rows = list[tuple[Any, ...]]
T = TypeVar("T")


@dataclass(frozen=True)
class Run:
    """One Spark run: its backend and parallelism, and the max parallelism (of the first run;
    of a later one, a rescale past the max parallelism to it before the run)."""

    backend: str
    parallelism: int
    max_parallelism: int | None = None


def draw(strategy: st.SearchStrategy[T], pool: int) -> list[T]:
    """The first ``pool`` examples a derandomized Hypothesis draws (the same on every run)."""
    drawn: list[T] = []

    @settings(
        max_examples=pool,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(example: T) -> None:
        drawn.append(example)

    collect()
    return drawn


def carrier_time(watermark: int) -> int:
    """The event time of the record that makes a run end at ``watermark``."""
    return watermark + int(OUT_OF_ORDERNESS / timedelta(milliseconds=1))


Submit = Callable[[int, Run, int], KeyedRun]
"""Starts run ``n`` (0-based) of the schedule at ``Run``, with the max parallelism the job
has then."""


def run_job(
    home: StatecoreConfig,
    job: str,
    schedule: tuple[Run, ...],
    submit: Submit,
    *,
    kill_run: int | None = None,
    marker: Path | None = None,
) -> list[Rows]:
    """Every run of ``schedule`` through ``submit`` (run ``kill_run``, if any, killed at the
    function's kill point, which creates ``marker``, then retried); each run's output rows."""
    max_parallelism = schedule[0].max_parallelism
    assert max_parallelism is not None
    outputs: list[Rows] = []
    for n, run in enumerate(schedule):
        if n > 0 and run.max_parallelism not in (None, max_parallelism):
            with Catalog.connect(home.catalog_url) as catalog:
                rescale(
                    home,
                    catalog,
                    job,
                    parallelism=run.parallelism,
                    max_parallelism=run.max_parallelism,
                )
            max_parallelism = run.max_parallelism
        if n == kill_run:
            assert marker is not None
            with pytest.raises(Exception):  # noqa: B017 (Spark's error of a task whose process died)
                submit(n, run, max_parallelism)
            assert marker.exists(), f"run {n + 1} failed before its kill point"
            with Catalog.connect(home.catalog_url) as catalog:
                assert catalog.checkpoint_status(job, n + 1) is not CheckpointStatus.COMPLETED
        done = submit(n, run, max_parallelism)
        rows = [tuple(r) for r in done.output.collect()]
        done.unpersist()
        assert done.checkpoint.status is CheckpointStatus.COMPLETED
        assert (done.checkpoint.parallelism, done.checkpoint.max_parallelism) == (
            run.parallelism,
            max_parallelism,
        )
        outputs.append(rows)
    return outputs
