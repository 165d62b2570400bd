"""The client side of live lookups: ask the running task that holds a key's key group.

The catalog says where the tasks of a job's latest run serve their state
(:meth:`~statecore.catalog.Catalog.live_endpoints`, key-group range -> address) and holds the
job's token. :func:`live_lookup` hashes the key as the job does, asks the task whose range holds
its key group for the key's rows (:mod:`statecore.runtime.live`) and turns them into a value as
a checkpoint lookup does (TTL visibility included). Anything that keeps it from an answer (no
endpoint, a task gone, a refused token, a timeout) raises :class:`LiveUnavailable`, and
:func:`statecore.query.lookup` then reads the latest checkpoint, saying why
(``LookupResult.fallback``).
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from statecore.catalog import LiveEndpoint
from statecore.checkpoint.points import RestorePoint
from statecore.errors import StateError
from statecore.query.key_rows import LookupResult, key_result, resolve_key
from statecore.runtime.live import encode_key
from statecore.state import VOID_NAMESPACE

__all__ = ["LiveUnavailable", "live_lookup"]

TIMEOUT = 2.0
"""Seconds a live lookup waits for the task (connecting, then answering)."""


class LiveUnavailable(StateError):
    """No running task answered; the lookup falls back to the latest checkpoint."""


def live_lookup(
    point: RestorePoint,
    endpoints: Sequence[LiveEndpoint],
    token: str | None,
    state: str,
    key: Any,
    *,
    namespace: str = VOID_NAMESPACE,
    user_key: Any = None,
    operator: str | None = None,
    now_ms: int | None = None,
    timeout: float = TIMEOUT,
) -> LookupResult:
    """``key`` in ``state`` as the running task holding it has it now. ``point`` is the job's
    latest checkpoint: it names the state's kind, schema and TTL, and tells whether the task's
    state is ahead of it (``uncommitted``)."""
    table, record, _, key, key_group = resolve_key(point, state, key, operator)
    endpoint = next(
        (e for e in endpoints if e.operator == table.operator and e.holds(key_group)), None
    )
    if endpoint is None or token is None:
        raise LiveUnavailable(
            f"no running task of job {point.job!r} serves key group {key_group} (run the "
            "stream with keyed_stream(..., live_lookups=True))"
        )
    body = json.dumps(
        {
            "job": point.job,
            "operator": table.operator,
            "state": table.state,
            "key_group": key_group,
            **encode_key(key),
        }
    )
    host, _, port = endpoint.address.rpartition(":")
    try:
        connection = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=timeout)
        try:
            connection.request(
                "POST",
                "/state",
                body,
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            )
            response = connection.getresponse()
            payload = response.read()
        finally:
            connection.close()
    except (OSError, http.client.HTTPException) as exc:
        raise LiveUnavailable(f"the task at {endpoint.address} did not answer: {exc}") from exc
    if response.status != 200:
        try:
            message = json.loads(payload).get("error", "")
        except ValueError:
            message = payload[:200].decode("utf-8", "replace")
        raise LiveUnavailable(
            f"the task at {endpoint.address} answered {response.status}: {message}"
        )
    rows = pa.ipc.open_stream(payload).read_all()
    live_checkpoint = int(response.getheader("X-Statecore-Checkpoint", "0"))
    running = response.getheader("X-Statecore-Running") == "1"
    subtask = response.getheader("X-Statecore-Subtask", str(endpoint.subtask))
    return key_result(
        point,
        table,
        record,
        rows,
        key,
        key_group,
        namespace=namespace,
        user_key=user_key,
        now_ms=now_ms,
        point_label=f"live state of subtask {subtask} of job {point.job!r} at {endpoint.address}",
        files_read=0,
        bytes_read=len(payload),
        live=True,
        live_checkpoint=live_checkpoint,
        uncommitted=running or live_checkpoint > (point.checkpoint_id or 0),
    )
