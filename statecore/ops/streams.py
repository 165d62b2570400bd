"""Watch and stop a streaming query from outside its driver (an Airflow sensor, the command line).

A statecore streaming job (``jobs/clickstream_stream.py``) runs a Structured Streaming query
whose micro-batches are statecore checkpoints. Three things tell how it is doing, and none needs
the driver to answer a call:

- **Spark's checkpoint folder** (``checkpoint_location``): ``offsets/<n>`` is written when
  micro-batch ``n`` is planned, ``commits/<n>`` when it finished; a file source also logs, in
  ``sources/0/<n>`` (compacted every 10 batches into ``<n>.compact``), the input files each
  micro-batch took. Input files not in that log are the **lag**.
- **The catalog**: the job's latest completed checkpoint (a micro-batch's id is its checkpoint id).
- **A status file the driver keeps** (``<checkpoint_location>/_statecore/status.json``): its state
  (``RUNNING``, ``STOPPED``, ``FINISHED``, ``FAILED`` with the error), process, host, the last
  micro-batch, the run that started it (``run_id``: an Airflow DAG run's ``<dag_id>/<run_id>``),
  rewritten at least every few seconds while it runs. A ``RUNNING`` status older than
  ``stale_after`` means the driver died without a word (a SIGKILL, a lost node). A watcher that
  knows which run started its query reads a status of another run as not its query's
  (:func:`stream_progress` with ``run_id``): a folder's last status may be an earlier query's.

One location is one query's: a driver refuses, before it writes anything there
(:func:`check_location`), a location that holds another job's stream or where another query
runs now.

A graceful stop is a marker file (``<checkpoint_location>/_statecore/stop``, :func:`request_stop`)
that the driver polls between micro-batches: it then stops the query (``query.stop()``) and
records ``STOPPED``. A micro-batch interrupted anyway (the marker arrived as one began) is a
checkpoint that never completed: the next start rolls it back and Spark replays the micro-batch
from its offsets, so nothing is lost or counted twice.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import unquote, urlparse

import pyarrow.fs as pafs

from statecore.catalog import Catalog, CheckpointKind, CheckpointStatus
from statecore.config import StatecoreConfig, check_name
from statecore.errors import ConfigError
from statecore.processes import process_exists
from statecore.snapshot.files import table_filesystem

__all__ = [
    "RUNNING",
    "STREAM_METADATA",
    "StreamProgress",
    "StreamStatus",
    "check_location",
    "checkpoints_after",
    "clear_stop",
    "default_checkpoint_location",
    "read_record",
    "read_status",
    "request_stop",
    "stop_requested",
    "stream_progress",
    "write_record",
    "write_status",
]

RUNNING, STOPPED, FINISHED, FAILED = "RUNNING", "STOPPED", "FINISHED", "FAILED"
STALE, NOT_STARTED = "STALE", "NOT_STARTED"
_FOLDER = "_statecore"
STREAM_METADATA = "statecore.json"
"""The file in a query's checkpoint location naming its job and checkpoint id base
(:mod:`statecore.spark.stream` writes it when the query first starts)."""


def default_checkpoint_location(config: StatecoreConfig, job: str) -> str:
    """Where a job's streaming query keeps Spark's checkpoint unless told otherwise:
    ``<statecore home>/streaming/<job>``."""
    return f"{config.home}/streaming/{check_name('job', job)}"


_Record = TypeVar("_Record")


def _path(checkpoint_location: str, name: str) -> tuple[pafs.FileSystem, str]:
    fs, root = table_filesystem(checkpoint_location.rstrip("/"))
    return fs, f"{root}/{_FOLDER}/{name}"


@dataclass(frozen=True, kw_only=True)
class StreamStatus:
    """What the driver of a streaming query last said about it."""

    job: str
    state: str
    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=socket.gethostname)
    updated_at: float = field(default_factory=time.time)
    query_id: str | None = None
    batch_id: int | None = None
    error: str | None = None
    input_path: str | None = None
    """The folder the query's file source reads, for the lag."""
    run_id: str | None = None
    """The run that started the query (an Airflow DAG run's ``<dag_id>/<run_id>``)."""


def write_record(checkpoint_location: str, name: str, record: Any) -> None:
    """Replace the dataclass ``record`` as the JSON file ``name`` in the checkpoint location's
    statecore folder (written to a temporary name, then moved)."""
    fs, path = _path(checkpoint_location, name)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    temporary = f"{path}.{os.getpid()}.tmp"
    with fs.open_output_stream(temporary) as out:
        out.write(json.dumps(asdict(record)).encode())
    fs.move(temporary, path)


def read_record(checkpoint_location: str, name: str, cls: type[_Record]) -> _Record | None:
    """The ``cls`` :func:`write_record` last wrote as ``name`` (fields ``cls`` does not know
    ignored), else ``None``."""
    fs, path = _path(checkpoint_location, name)
    try:
        with fs.open_input_stream(path) as f:
            fields = json.loads(f.read())
    except FileNotFoundError:
        return None
    known = set(cls.__dataclass_fields__)  # type: ignore[attr-defined]
    return cls(**{k: v for k, v in fields.items() if k in known})


def write_status(checkpoint_location: str, status: StreamStatus) -> None:
    """Replace the query's status file."""
    write_record(checkpoint_location, "status.json", status)


def read_status(checkpoint_location: str) -> StreamStatus | None:
    """The query's last status, or ``None`` if its driver never wrote one."""
    return read_record(checkpoint_location, "status.json", StreamStatus)


def check_location(
    checkpoint_location: str,
    *,
    job: str,
    run_id: str | None = None,
    stale_after: timedelta = timedelta(seconds=60),
) -> None:
    """Refuse (:class:`~statecore.errors.ConfigError`) ``checkpoint_location`` for a new query of
    ``job`` (started by ``run_id``) when another query owns it: it holds the stream of another
    job; or its queries were started by another DAG (the ``<dag_id>/`` of the status's run id
    differs from ``run_id``'s: two DAGs' queries of one job on one location would read the same
    input twice, and Spark refuses a query of another shape, e.g. a continuous one after an
    ``availableNow`` one); or a query runs there now (its status RUNNING and fresh, its driver
    alive where it is on this host). A driver calls this before it writes anything there, so
    the other query's files stay as they were."""
    fs, root = table_filesystem(checkpoint_location.rstrip("/"))
    try:
        with fs.open_input_stream(f"{root}/{STREAM_METADATA}") as f:
            owner = json.loads(f.read()).get("job")
    except FileNotFoundError:
        owner = None
    if owner is not None and owner != job:
        raise ConfigError(
            f"checkpoint location {checkpoint_location} belongs to the stream of job "
            f"{owner!r}, not {job!r}: give each query a location of its own"
        )
    status = read_status(checkpoint_location)
    last_run = None if status is None else status.run_id
    theirs, ours = _dag_of(last_run), _dag_of(run_id)
    if theirs is not None and ours is not None and theirs != ours:
        raise ConfigError(
            f"checkpoint location {checkpoint_location} belongs to the query of job {job!r} "
            f"that the DAG {theirs!r} runs (its last run: {last_run}), not {ours!r}: give "
            f"{ours!r} a job or location of its own"
        )
    if status is None or status.state != RUNNING:
        return
    if time.time() - status.updated_at > stale_after.total_seconds():
        return  # its driver went silent: a query that died
    if status.host == socket.gethostname() and not process_exists(status.pid):
        return  # its driver is gone
    raise ConfigError(
        f"checkpoint location {checkpoint_location} is in use: a query of job {status.job!r} "
        f"runs there (query {status.query_id}, run {status.run_id}, process {status.pid} on "
        f"{status.host}); stop it first (the DAG streaming_query_stop, or request_stop), or "
        "give this query a location of its own"
    )


def _dag_of(run_id: str | None) -> str | None:
    """The DAG of a run id ``<dag_id>/<run_id>`` (``None`` for another form)."""
    if run_id is None or "/" not in run_id:
        return None
    return run_id.split("/", 1)[0] or None


def request_stop(checkpoint_location: str) -> str:
    """Ask the query's driver to stop after its current micro-batch; the marker's path."""
    fs, path = _path(checkpoint_location, "stop")
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path) as out:
        out.write(str(time.time()).encode())
    return path


def stop_requested(checkpoint_location: str) -> bool:
    fs, path = _path(checkpoint_location, "stop")
    return bool(fs.get_file_info(path).type == pafs.FileType.File)


def clear_stop(checkpoint_location: str) -> None:
    """Remove a stop marker (a driver does this as it starts)."""
    fs, path = _path(checkpoint_location, "stop")
    if fs.get_file_info(path).type == pafs.FileType.File:
        fs.delete_file(path)


@dataclass(frozen=True, kw_only=True)
class StreamProgress:
    """Where a streaming query is: its driver's state, Spark's offset and commit logs, the
    input files it has not taken yet, and the job's latest completed checkpoint."""

    job: str
    checkpoint_location: str
    state: str
    """RUNNING, STOPPED, FINISHED, FAILED, STALE (RUNNING but silent past ``stale_after``) or
    NOT_STARTED (no status file)."""
    heartbeat_age_s: float | None
    planned_batch: int | None
    committed_batch: int | None
    processed_files: int
    pending_files: tuple[str, ...]
    last_checkpoint: int | None
    last_checkpoint_at: datetime | None
    error: str | None = None
    query_id: str | None = None
    run_id: str | None = None
    """The run that started the query the status is of."""

    @property
    def failed(self) -> bool:
        """Whether the query died: it failed, or its driver went silent."""
        return self.state in (FAILED, STALE)

    @property
    def lag_files(self) -> int:
        return len(self.pending_files)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["pending_files"] = list(self.pending_files)
        out["lag_files"] = self.lag_files
        out["last_checkpoint_at"] = (
            None if self.last_checkpoint_at is None else self.last_checkpoint_at.isoformat()
        )
        return out


def _batch_ids(fs: pafs.FileSystem, folder: str) -> list[int]:
    infos = fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    return sorted(int(i.base_name) for i in infos if i.base_name.isdigit())


def _source_log_files(fs: pafs.FileSystem, root: str) -> set[str]:
    """The input files Spark's file source logged as taken (the newest compaction and the
    batches after it), as local paths or URIs without the ``file:`` scheme."""
    folder = f"{root}/sources/0"
    infos = fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    entries = {}
    for info in infos:
        name = info.base_name
        number = name.removesuffix(".compact")
        if number.isdigit():
            entries[int(number)] = info.path
    compacted = [n for n, p in entries.items() if p.endswith(".compact")]
    start = max(compacted, default=-1)
    files = set()
    for n in sorted(entries):
        if n < start:
            continue
        with fs.open_input_stream(entries[n]) as f:
            lines = f.read().decode().splitlines()
        for line in lines[1:]:  # the first line is the log's version ("v1")
            entry = _entry(line)
            if entry is not None:
                files.add(_normalize(entry))
    return files


def _entry(line: str) -> str | None:
    """The input file a line of a source log names; ``None`` for a line of another source's
    log (Kafka's holds the query's starting offsets, ``{"topic": {"0": 0}}``)."""
    try:
        entry = json.loads(line) if line.strip() else None
    except ValueError:
        return None
    path = entry.get("path") if isinstance(entry, dict) else None
    return path if isinstance(path, str) else None


def _normalize(uri: str) -> str:
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return os.path.normpath(unquote(parsed.path))
    return uri


def _input_files(input_path: str) -> list[str]:
    fs, root = table_filesystem(input_path.rstrip("/"))
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    local = "://" not in input_path
    return sorted(
        _normalize(i.path) if local else i.path
        for i in infos
        if i.type == pafs.FileType.File
        and not any(part.startswith(("_", ".")) for part in i.path[len(root) :].split("/"))
    )


def stream_progress(
    catalog: Catalog,
    *,
    job: str,
    checkpoint_location: str,
    input_path: str | None = None,
    stale_after: timedelta = timedelta(seconds=60),
    run_id: str | None = None,
) -> StreamProgress:
    """The progress of ``job``'s query at ``checkpoint_location``; with ``input_path`` (the
    folder its file source reads) also the input files it has not taken yet. With ``run_id``,
    only the query that run started counts: a status another run's query wrote reads as
    ``NOT_STARTED`` (that run's query has not written yet)."""
    fs, root = table_filesystem(checkpoint_location.rstrip("/"))
    status = read_status(checkpoint_location)
    if status is not None and run_id is not None and status.run_id != run_id:
        status = None
    age = None if status is None else max(0.0, time.time() - status.updated_at)
    state = NOT_STARTED if status is None else status.state
    if state == RUNNING and age is not None and age > stale_after.total_seconds():
        state = STALE
    planned = _batch_ids(fs, f"{root}/offsets")
    committed = _batch_ids(fs, f"{root}/commits")
    taken = _source_log_files(fs, root)
    input_path = input_path or (None if status is None else status.input_path)
    pending = (
        () if input_path is None else tuple(f for f in _input_files(input_path) if f not in taken)
    )
    latest = catalog.latest_restorable(job) if catalog.has_job(job) else None
    return StreamProgress(
        job=job,
        checkpoint_location=checkpoint_location,
        state=state,
        heartbeat_age_s=None if age is None else round(age, 1),
        planned_batch=planned[-1] if planned else None,
        committed_batch=committed[-1] if committed else None,
        processed_files=len(taken),
        pending_files=pending,
        last_checkpoint=None if latest is None else latest.checkpoint_id,
        last_checkpoint_at=None if latest is None else latest.completed_at,
        error=None if status is None else status.error,
        query_id=None if status is None else status.query_id,
        run_id=None if status is None else status.run_id,
    )


def checkpoints_after(catalog: Catalog, job: str, after: int | None) -> list[int]:
    """Ids of ``job``'s checkpoints (not maintenance) above ``after`` (all when ``None``) still
    in the catalog, completed or expired since, in id order."""
    if not catalog.has_job(job):
        return []
    return [
        c.checkpoint_id
        for c in catalog.list_checkpoints(job, with_tables=False, after=after)
        if c.kind == CheckpointKind.CHECKPOINT
        and c.status in (CheckpointStatus.COMPLETED, CheckpointStatus.EXPIRED)
    ]
