"""A sensor that watches a statecore streaming query and an operator that stops it gracefully.

A continuous query is started by a ``SparkSubmitOperator`` task that submits the streaming job with
``--trigger-interval`` (that task runs as long as the query does; see the ``streaming_query`` DAG).
Both classes here read only what the query leaves in its Spark checkpoint folder and the catalog
(:mod:`statecore.ops.streams`), so they work from any worker that sees that folder:

- :class:`StreamSensor` logs progress (micro-batches planned and committed, input files not taken
  yet, the latest checkpoint) and succeeds once the query caught up with its input or ended
  (``wait_for="caught_up"``), or ended (``wait_for="end"``); it fails when the query failed or
  its driver went silent. Its XCom is the progress.
- :class:`StreamStopOperator` drops the stop marker the driver polls between micro-batches and
  waits until the driver reports the query stopped. Its XCom is the progress after the stop.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, BaseSensorOperator, Context, PokeReturnValue
from airflow.sdk.exceptions import AirflowException

from statecore_airflow.hooks import StatecoreHook

if TYPE_CHECKING:
    from statecore.ops.streams import StreamProgress

__all__ = ["QUERY_RUN_ID", "StreamSensor", "StreamStopOperator", "query_run_id"]

_WAIT_FOR = ("caught_up", "end")
_ENDED = ("STOPPED", "FINISHED")

QUERY_RUN_ID = "{{ dag.dag_id }}/{{ run_id }}"
"""The template of the run id a DAG passes to the streaming job it starts (``--run-id``):
what :func:`query_run_id` gives in the same DAG run."""


def query_run_id(context: Any) -> str:
    """The run id the query a DAG run started keeps in its status: ``<dag_id>/<run_id>``."""
    return f"{context['dag'].dag_id}/{context['run_id']}"


def _optional_str(value: Any) -> str | None:
    text = "" if value is None else str(value).strip()
    return None if text in ("", "None", "null") else text


class _StreamMixin:
    job: str
    checkpoint_location: str | None
    input_path: str | None
    stale_after_seconds: float | str
    statecore_conn_id: str
    log: Any

    def _location(self) -> str:
        """The query's Spark checkpoint folder (default: ``<statecore home>/streaming/<job>``)."""
        from statecore.ops.streams import default_checkpoint_location

        given = _optional_str(self.checkpoint_location)
        if given is not None:
            return given
        return default_checkpoint_location(
            StatecoreHook(self.statecore_conn_id).get_config(), self.job
        )

    def _progress(self, run_id: str | None = None) -> StreamProgress:
        """The query's progress; with ``run_id``, a status another run's query wrote reads as
        ``NOT_STARTED`` (the query of ``run_id`` has not written yet)."""
        from statecore.ops.streams import stream_progress

        with StatecoreHook(self.statecore_conn_id).catalog() as catalog:
            progress = stream_progress(
                catalog,
                job=self.job,
                checkpoint_location=self._location(),
                input_path=_optional_str(self.input_path),
                stale_after=timedelta(seconds=float(self.stale_after_seconds)),
                run_id=run_id,
            )
        self.log.info(
            "stream %s: %s, micro-batch %s planned / %s committed, %d input files not taken "
            "yet, latest checkpoint %s (%s), driver heard from %s s ago",
            progress.job,
            progress.state,
            progress.planned_batch,
            progress.committed_batch,
            progress.lag_files,
            progress.last_checkpoint,
            progress.last_checkpoint_at,
            progress.heartbeat_age_s,
        )
        if progress.failed:
            raise AirflowException(
                f"stream {progress.job} at {progress.checkpoint_location} is {progress.state}"
                + (f": {progress.error}" if progress.error else " (its driver went silent)")
            )
        return progress


class StreamSensor(_StreamMixin, BaseSensorOperator):
    """Watch ``job``'s query at ``checkpoint_location`` (default: ``<statecore
    home>/streaming/<job>``; the lag from ``input_path``, default: the folder the driver reads).

    Done when the query caught up (every input file taken, every planned micro-batch committed
    — Spark commits one once its checkpoint completed, or once it found nothing to do, as a
    micro-batch of ticks alone) or ended (stopped or finished: nothing is left to wait for);
    with ``wait_for="end"``, when it stopped or finished. Fails when the query FAILED, or its
    driver's status is older than ``stale_after_seconds``.

    ``query_of_this_run``: the query is started by another task of the same DAG run (as in
    ``streaming_query``, which passes the job ``--run-id`` :data:`QUERY_RUN_ID`), so only a
    status that names this run counts: another run's (an earlier query's, or one another DAG
    started) reads as ``NOT_STARTED``, and the sensor waits for this run's driver to write.
    """

    template_fields: Sequence[str] = (
        "job",
        "checkpoint_location",
        "input_path",
        "wait_for",
        "stale_after_seconds",
    )
    ui_color = "#e8f1fb"

    def __init__(
        self,
        *,
        job: str,
        checkpoint_location: str | None = None,
        input_path: str | None = None,
        wait_for: str = "caught_up",
        stale_after_seconds: float | str = 60,
        query_of_this_run: bool = False,
        statecore_conn_id: str = StatecoreHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job = job
        self.checkpoint_location = checkpoint_location
        self.input_path = input_path
        self.wait_for = wait_for
        self.stale_after_seconds = stale_after_seconds
        self.query_of_this_run = query_of_this_run
        self.statecore_conn_id = statecore_conn_id

    def poke(self, context: Context) -> PokeReturnValue:
        if self.wait_for not in _WAIT_FOR:
            raise AirflowException(f"wait_for={self.wait_for!r}: use one of {_WAIT_FOR}")
        run_id = query_run_id(context) if self.query_of_this_run else None
        progress = self._progress(run_id)
        ended = progress.state in _ENDED
        if self.wait_for == "end" or ended:
            if ended and self.wait_for == "caught_up":
                self.log.info("stream %s is %s: nothing left to catch up", self.job, progress.state)
            done = ended
        else:
            done = (
                progress.state == "RUNNING"
                and progress.lag_files == 0
                and progress.planned_batch is not None
                and progress.planned_batch == progress.committed_batch
            )  # Spark commits a micro-batch after its checkpoint completed (or had nothing to do)
        return PokeReturnValue(is_done=done, xcom_value=progress.to_dict())


class StreamStopOperator(_StreamMixin, BaseOperator):
    """Stop ``job``'s query at ``checkpoint_location`` after its current micro-batch, and wait
    up to ``timeout_seconds`` for its driver to report it stopped."""

    template_fields: Sequence[str] = ("job", "checkpoint_location", "timeout_seconds")
    ui_color = "#e8f1fb"

    def __init__(
        self,
        *,
        job: str,
        checkpoint_location: str | None = None,
        timeout_seconds: float | str = 300,
        statecore_conn_id: str = StatecoreHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job = job
        self.checkpoint_location = checkpoint_location
        self.timeout_seconds = timeout_seconds
        self.input_path = None
        self.stale_after_seconds = 60
        self.statecore_conn_id = statecore_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        from statecore.ops.streams import RUNNING, request_stop

        progress = self._progress()
        if progress.state != RUNNING:
            self.log.info("stream %s is %s: nothing to stop", self.job, progress.state)
            return progress.to_dict()
        marker = request_stop(self._location())
        self.log.info("stream %s: stop requested (%s)", self.job, marker)
        deadline = time.monotonic() + float(self.timeout_seconds)
        while time.monotonic() < deadline:
            time.sleep(1)
            progress = self._progress()
            if progress.state != RUNNING:
                return progress.to_dict()
        raise AirflowException(
            f"stream {self.job} did not stop within {self.timeout_seconds} s; the stop marker "
            f"{marker} stays, and its driver stops at its next poll"
        )
