"""Warm state hosts on every machine end with their query (:mod:`statecore.spark.host_lifetime`).

The driver can ask only the hosts of its own machine to exit (their sockets are local). For the
others, a stopped query leaves a *stop marker* where every executor reads its state: a small
JSON file ``<warehouse>/<job>/_hosts/<operator>.stopped`` holding the last checkpoint id the
query ran. A host idle for :data:`POLL_ENV` seconds (default 30) reads its job's marker (one
small read per poll) and exits when its last task's checkpoint is at or below it; a restarted
query's tasks have higher ids, so the hosts that serve it stay.
"""

from __future__ import annotations

import hashlib
import json
import logging

import pyarrow.fs as pafs

from statecore.snapshot.storage import table_filesystem

__all__ = ["POLL_ENV", "DEFAULT_POLL", "publish_stop", "stop_marker_uri", "stopped_at"]

log = logging.getLogger(__name__)

POLL_ENV = "STATECORE_HOST_STOP_POLL_SECONDS"
DEFAULT_POLL = 30.0


def stop_marker_uri(warehouse: str, job: str, operator: str) -> str:
    """Where a stopped query of ``job``'s ``operator`` leaves its stop marker (not a table:
    nothing below ``<warehouse>/<job>/_hosts`` is one)."""
    name = hashlib.sha256(operator.encode()).hexdigest()[:16]
    return f"{warehouse.rstrip('/')}/{job}/_hosts/{name}.stopped"


def publish_stop(uri: str, checkpoint_id: int) -> None:
    """Leave the marker at ``uri``: hosts whose last checkpoint is at most ``checkpoint_id``
    exit (an earlier marker is replaced)."""
    fs, path = table_filesystem(uri)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path) as out:
        out.write(json.dumps({"checkpoint_id": checkpoint_id}).encode())


def stopped_at(uri: str) -> int | None:
    """The last checkpoint id of the stopped query the marker at ``uri`` names, or ``None``
    (no marker, or one that cannot be read: the host keeps its idle timeout)."""
    try:
        fs, path = table_filesystem(uri)
        if fs.get_file_info(path).type != pafs.FileType.File:
            return None
        with fs.open_input_stream(path) as stream:
            return int(json.loads(stream.read())["checkpoint_id"])
    except Exception:
        log.warning("could not read the stop marker %s", uri, exc_info=True)
        return None
