"""Warm state hosts (:mod:`statecore.spark.host`) end with their query.

A stream's hosts hold its state (and a RocksDB instance's files) between micro-batches. When
the query stops (``query.stop()``, an ``availableNow`` query that is done), a listener on the
driver asks the hosts of its job and operator on the driver's machine to exit (every executor
folder there: ``local[*]``, or a cluster's executors on that machine), unless another query of
the same job and operator is active by then. A query with live lookups on does not register
here (its hosts serve lookups of its last micro-batch until idle), and one that fails leaves
its hosts until they are idle for ``STATECORE_HOST_IDLE_SECONDS``, so a live lookup can read
what its last micro-batch left (a restarted query's tasks continue in them, and restore: the failed
checkpoint is not the one they hold). Hosts on other machines exit when their executor does
(a session that ends), or when idle.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener
from pyspark.sql.streaming.query import StreamingQuery

from statecore.spark.host import stop_job_hosts

__all__ = ["stop_hosts_with"]

log = logging.getLogger(__name__)

_LISTENER = "_statecore_hosts_listener"


class _HostsOfStoppedQueries(StreamingQueryListener):
    """Asks the hosts of a query's job to exit when the query terminates."""

    def __init__(self, spark: Any) -> None:
        self.session = spark
        self.queries: dict[str, tuple[str, str, str]] = {}  # id: job, operator, name
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
        job, operator, name = known
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
        except Exception:  # the hosts exit when idle anyway
            log.warning("job %s: stopping its warm state hosts failed", job, exc_info=True)
            return
        log.info("job %s: query stopped, asked %d warm state hosts to exit", job, asked)


def stop_hosts_with(spark: Any, query: StreamingQuery, job: str, operator: str) -> None:
    """Ask the hosts of ``job``'s ``operator`` to exit when ``query`` (of ``spark``)
    terminates."""
    listener = getattr(spark, _LISTENER, None)
    if listener is None:
        listener = _HostsOfStoppedQueries(spark)
        spark.streams.addListener(listener)
        setattr(spark, _LISTENER, listener)
    with listener.lock:
        listener.queries[str(query.id)] = (job, operator, query.name)
