"""Warm state hosts (:mod:`statecore.spark.host`) end with their query.

A stream's hosts hold its state (and a RocksDB instance's files) between micro-batches. When
the query stops (``query.stop()``, an ``availableNow`` query that is done), a listener on the
driver asks the hosts of its job and operator on the driver's machine to exit (every executor
folder there: ``local[*]``, or a cluster's executors on that machine), unless another query of
the same job and operator is active by then. A query with live lookups on does not register
here (its hosts serve lookups of its last micro-batch until idle), and one that fails leaves
its hosts until they are idle for ``STATECORE_HOST_IDLE_SECONDS``, so a live lookup can read
what its last micro-batch left (a restarted query's tasks continue in them, and restore: the
failed checkpoint is not the one they hold). For the hosts on other machines the stopped query
leaves a stop marker with its last checkpoint id beside its state (:mod:`.host_stop`): they
read it once idle for ``STATECORE_HOST_STOP_POLL_SECONDS`` (default 30) and exit; they also
exit with their executor (a session that ends), or when idle.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener
from pyspark.sql.streaming.query import StreamingQuery

from statecore.spark.host import stop_job_hosts
from statecore.spark.host_stop import publish_stop

__all__ = ["stop_hosts_with"]

log = logging.getLogger(__name__)

_LISTENER = "_statecore_hosts_listener"


class _HostsOfStoppedQueries(StreamingQueryListener):
    """Asks the hosts of a query's job to exit when the query terminates."""

    def __init__(self, spark: Any) -> None:
        self.session = spark
        self.queries: dict[str, _Watched] = {}
        self.lock = threading.Lock()

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        pass

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        with self.lock:
            known = self.queries.pop(str(event.id), None)
        if known is None:
            return
        job, operator, name = known.job, known.operator, known.query.name
        if getattr(event, "exception", None):
            log.info(
                "job %s: query failed; its warm state hosts stay until idle for live lookups "
                "of what it left",
                job,
            )
            return
        try:
            if any(q.name == name for q in self.session.streams.active):
                return  # restarted already: its tasks use the hosts
            asked = stop_job_hosts(job, operator)
            last = known.last_checkpoint()
            if last is not None:
                publish_stop(known.marker, last)
        except Exception:  # the hosts exit when idle anyway
            log.warning("job %s: stopping its warm state hosts failed", job, exc_info=True)
            return
        log.info(
            "job %s: query stopped, asked %d warm state hosts here to exit%s",
            job,
            asked,
            "" if last is None else f" and left {known.marker} for the others",
        )


@dataclass(frozen=True)
class _Watched:
    """A query whose hosts stop with it: its job and operator, the checkpoint id of the last
    micro-batch it began (``None``: none) and its stop marker's URI."""

    query: StreamingQuery
    job: str
    operator: str
    last_checkpoint: Callable[[], int | None]
    marker: str


def stop_hosts_with(
    spark: Any,
    query: StreamingQuery,
    job: str,
    operator: str,
    *,
    last_checkpoint: Callable[[], int | None],
    marker: str,
) -> None:
    """Ask the hosts of ``job``'s ``operator`` to exit when ``query`` (of ``spark``; the
    checkpoint id of its last micro-batch from ``last_checkpoint``) terminates: those here
    directly, the others by the stop marker at ``marker``."""
    listener = getattr(spark, _LISTENER, None)
    if listener is None:
        listener = _HostsOfStoppedQueries(spark)
        spark.streams.addListener(listener)
        setattr(spark, _LISTENER, listener)
    with listener.lock:
        listener.queries[str(query.id)] = _Watched(query, job, operator, last_checkpoint, marker)
