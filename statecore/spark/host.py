"""Warm state hosts: a stream's subtask keeps its state warm whichever Python worker Spark picks.

A task keeps its state warm in the process that ran it (:mod:`statecore.runtime.warm`), but
Spark hands each task to whichever of the executor's idle Python workers comes first, and kills
workers idle for a minute: on ``local[2]`` only 52-74 % of a stream's tasks found their state
warm, the others restored it from Delta. So a stream's task does not run its subtask in the
Python worker: it runs it in the subtask's *host*, a process of the same machine that lives as
long as the executor, started by the first task that needs it and addressed by a Unix socket
named after the executor (pyspark's worker daemon, the worker's parent), the job, the operator
and the subtask. The worker connects, sends the task (its :class:`TaskSpec`, function and
processing, pickled as Spark pickled them, broadcast variables by reference:
:mod:`.host_context`), and once the host replied that it took it, streams its partition's
Arrow batches from a thread while it passes the host's result batches on to Spark. In the host
the task is :func:`run_task` as before, warm pool, restore, snapshot, live lookups and fault
points included: what a worker would keep, the host keeps, and the next task of the subtask
finds it there whichever worker Spark picked. A task on another executor (a multi-executor
cluster) reaches another host, which restores.

Only the job's own user reaches a host, and nothing a host sends is unpickled
(:mod:`.host_wire`): a folder, socket or host the task may not trust makes it run in its worker
(a cold restore), as does a host that cannot load the task; a reply that is not the task's own
fails it. Failure stays a task failure. An error in the host comes back as text and is raised
as the task's error; a host that dies (a kill point, an OOM) ends the connection, the task
fails and Spark's retry starts a new host, which restores. A host that ends before it took the
task (it was exiting) is asked again, a new one. A worker that dies while its task runs makes
the host's task fail, its state closed, not kept. A host serves one task at a time (a second
attempt of the subtask waits for the first to end), and the warm pool's token decides as before
whether what it holds is the checkpoint to restore.

A host exits when its query stops (:mod:`.host_lifetime`), when its executor is gone, after
:data:`IDLE_ENV` seconds without a task (default 1,800), when more than :data:`MAX_HOSTS_ENV`
hosts (default 8) of its executor exist and it is the least recently used and idle for a minute
(the host decides, when it reads the request), or when its job's parallelism went down below
its subtask (the first task at the lower parallelism in another host of the job on its executor
asks it to), or when a task left it over its memory bound (:mod:`.host_memory`). The folder of
an executor that is gone is removed a day after its last change, by
the next host start. Hosts live in ``$STATECORE_HOST_DIR`` (default the temporary folder) under
``statecore-hosts-<uid>``, a folder only its owner may use; each host logs to ``<socket>.log``
beside its socket and starts with its worker's ``sys.path`` (``--py-files`` included).
``keyed_stream(..., warm_hosts=False)``, or ``STATECORE_WARM_HOST=0`` in the executors'
environment (``spark.executorEnv.STATECORE_WARM_HOST``), runs a stream's tasks in the worker,
as batch jobs always do.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import logging
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pyarrow as pa

from statecore.errors import ConfigError
from statecore.processes import process_exists
from statecore.spark.host_context import add_accumulators, dumps_task, task_context
from statecore.spark.host_memory import memory_bound
from statecore.spark.host_wire import (
    HostReplyError,
    WarmHostRefusedError,
    check_report,
    connect,
    error_from_text,
    error_text,
    private_folder,
)

__all__ = [
    "BATCH",
    "DONE",
    "ERROR",
    "EVICT",
    "EXIT",
    "READY",
    "REFUSED",
    "TASK",
    "EXECUTOR_ENV",
    "HOST_DIR_ENV",
    "IDLE_ENV",
    "MAX_HOSTS_ENV",
    "WARM_HOST_ENV",
    "from_ipc",
    "host_address",
    "host_name",
    "hosts_root",
    "hosted",
    "hosting",
    "stop_hosts",
    "stop_job_hosts",
    "stop_rescaled_hosts",
    "to_ipc",
]

log = logging.getLogger(__name__)

WARM_HOST_ENV = "STATECORE_WARM_HOST"
EXECUTOR_ENV = "STATECORE_HOST_EXECUTOR_PID"
"""Set in a host: the process its executor's tasks run under (pyspark's worker daemon); a host
is no child of the executor once the worker that started it has exited."""
HOST_DIR_ENV = "STATECORE_HOST_DIR"
IDLE_ENV = "STATECORE_HOST_IDLE_SECONDS"
MAX_HOSTS_ENV = "STATECORE_MAX_HOSTS"
DEFAULT_IDLE = 1800.0
DEFAULT_MAX_HOSTS = 8
EVICT_AFTER = 60.0
MAX_SOCKET_PATH = 107
SWEEP_AFTER = 86_400.0
"""Seconds an executor's folder is kept after its last change once the executor is gone."""
START_TIMEOUT = 120.0
"""Seconds a task waits for the host it started to listen (its imports, on a busy machine)."""

HANDOVER_ATTEMPTS = 3
"""Times a task asks a host (a new one after the first) to take it when they end before."""

TASK, READY, REFUSED = b"T", b"R", b"N"
"""The first byte of a message: a task follows (pickled, with the task's start on this machine's
monotonic clock and the CPU time its worker spent handing it over; a host reads it only from a
process of its own user), the host took it (its input may follow), it could not load it (text
follows)."""
BATCH, DONE, ERROR, EXIT, EVICT = b"B", b"D", b"E", b"X", b"V"
"""The first byte of a message: a result (or input) batch follows, the task (or its input) is
done (the accumulators' updates follow, JSON), an error follows (text), the host is asked to
exit, or to exit if it has been idle for the seconds that follow."""


def hosting() -> bool:
    """Whether this worker's environment lets stream tasks run in hosts (the default)."""
    return os.environ.get(WARM_HOST_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def hosts_root() -> Path:
    """The folder of this user's hosts (one folder per executor in it)."""
    base = Path(os.environ.get(HOST_DIR_ENV) or tempfile.gettempdir())
    return base / f"statecore-hosts-{os.getuid()}"


def host_folder(executor: int | None = None) -> Path:
    """The folder of the hosts of ``executor`` (default: this worker's, its parent process),
    created private to this user; refused (:class:`~statecore.spark.host_wire.
    WarmHostRefusedError`) when someone else could use it. Checked at every call."""
    return private_folder(hosts_root(), os.getppid() if executor is None else executor)


def host_name(job: str, operator: str, subtask: int) -> str:
    """The name of the socket of the host of ``subtask`` of ``job``'s ``operator`` (short: a
    Unix socket's path has at most 107 bytes), starting with :func:`_job_prefix`."""
    subtask_part = hashlib.sha256(f"{job}\0{operator}\0{subtask}".encode()).hexdigest()[:12]
    return f"{_job_prefix(job, operator)}{subtask_part}.sock"


def _job_prefix(job: str, operator: str) -> str:
    """What the names of the sockets of ``job``'s ``operator``'s hosts start with."""
    return hashlib.sha256(f"{job}\0{operator}".encode()).hexdigest()[:12]


def host_address(job: str, operator: str, subtask: int, executor: int | None = None) -> Path:
    """The socket of the host of ``subtask`` of ``job``'s ``operator`` on ``executor``;
    refused (before any folder is made) when a Unix socket cannot have that path."""
    address = _address(os.environ.get(HOST_DIR_ENV), job, operator, subtask, executor)
    host_folder(executor)
    return address


@functools.lru_cache(maxsize=256)
def _address(
    host_dir: str | None, job: str, operator: str, subtask: int, executor: int | None
) -> Path:
    """The path of :func:`host_address` under ``host_dir`` (the value of :data:`HOST_DIR_ENV`),
    computed once per process (a Python worker runs many tasks of the same subtasks); the
    folders are checked at every connection, not here."""
    executor = os.getppid() if executor is None else executor
    address = hosts_root() / str(executor) / host_name(job, operator, subtask)
    if len(os.fsencode(address)) > MAX_SOCKET_PATH:
        raise ConfigError(
            f"warm state hosts: {address} is too long for a Unix socket (at most "
            f"{MAX_SOCKET_PATH} bytes); set {HOST_DIR_ENV} to a shorter folder"
        )
    return address


def hosted(
    spec: Any,
    function: Any,
    process: Any,
    index: int,
    batches: Iterator[pa.RecordBatch],
    fallback: Callable[..., Iterator[pa.RecordBatch]],
) -> Iterator[pa.RecordBatch]:
    """:func:`~statecore.spark.executor.run_task` of operator instance ``index`` in its host
    (started when there is none): the partition's ``batches`` stream there, its result
    batches come back, checked (:mod:`statecore.spark.host_wire`). A host this task may not
    trust, or one that cannot load the task, makes it run here instead (``fallback``, the
    executor's ``run_task``: a cold restore), before any batch is read."""
    started, started_cpu = time.perf_counter(), time.thread_time()
    who = f"job {spec.job}, operator {spec.operator}, subtask {index}"
    connection = None
    memory_bound()  # a bound that is not a size fails the task, before any host starts
    try:
        address = _address(os.environ.get(HOST_DIR_ENV), spec.job, spec.operator, index, None)
        payload = dumps_task((spec, function, process, index))
        handover = (started, time.thread_time() - started_cpu)  # counted in its acquisition
        header = TASK + pickle.dumps((sys.path, task_context(), payload, handover))
        connection = _handed_over(address, header, who)
    except WarmHostRefusedError as exc:
        log.error("%s: %s; the task runs in its Python worker (a cold restore)", who, exc)
    if connection is None:
        yield from fallback(spec, function, process, index, batches)
        return
    with connection:
        yield from _results(connection, spec, index, batches, f"{who}: its host {address}")


def _handed_over(address: Path, header: bytes, who: str) -> Connection | None:
    """A connection to the host at ``address`` that took the task ``header`` (it replied
    :data:`READY`); ``None`` when it could not load it (it logs why). A host that ends before
    it replies (it was exiting: idle, asked to, evicted) is asked again, started anew."""
    for _ in range(HANDOVER_ATTEMPTS):
        connection = _connect(address)
        try:
            connection.send_bytes(header)
            reply = connection.recv_bytes()
        except (EOFError, OSError):
            connection.close()
            continue  # the host exited before it took the task: a new one takes it
        if reply == READY:
            return connection
        connection.close()
        if reply[:1] == REFUSED:
            log.warning(
                "%s: the host at %s cannot load the task; it runs in its Python worker (a cold "
                "restore): %s",
                who,
                address,
                error_from_text(reply[1:], f"{address}.log"),
            )
            return None
        raise HostReplyError(f"{who}: the host at {address} replied {reply[:1]!r} to a task")
    raise RuntimeError(
        f"{who}: its warm state host at {address} ended {HANDOVER_ATTEMPTS} times before it "
        f"took the task (see {address}.log)"
    )


def _results(
    connection: Connection,
    spec: Any,
    index: int,
    batches: Iterator[pa.RecordBatch],
    who: str,
) -> Iterator[pa.RecordBatch]:
    """The result batches of the task the host behind ``connection`` took, while a thread
    streams it ``batches`` (neither side holds the partition); each checked to be the task's."""
    sender = _Sender(connection, batches)
    sender.start()
    key_groups = spec.key_groups(index)
    while True:
        try:
            message = connection.recv_bytes()
        except (EOFError, OSError):
            sender.join()
            if sender.error is not None:
                raise sender.error from None
            raise RuntimeError(
                f"{who} ended during the task (see its .log); the task fails and its retry restores"
            ) from None
        tag, body = message[:1], message[1:]
        if tag == BATCH:
            batch = _checked(from_ipc(body), spec, index, key_groups, who)
            yield batch
        elif tag == DONE:
            sender.join()
            add_accumulators(body)
            return
        elif tag == ERROR:
            sender.join()
            if sender.error is not None:
                raise sender.error
            raise error_from_text(body, f"{who}.log")
        else:
            raise HostReplyError(f"{who} replied {tag!r} during a task")


def _checked(
    batch: pa.RecordBatch, spec: Any, index: int, key_groups: Any, who: str
) -> pa.RecordBatch:
    """``batch`` when it is of the task's result schema and its reports are the task's own."""
    if not batch.schema.equals(spec.result_schema):
        raise HostReplyError(f"{who} sent a batch of another schema: {batch.schema}")
    reports = batch.column(batch.num_columns - 1)
    if reports.null_count < batch.num_rows:
        for report in reports.drop_null().to_pylist():
            check_report(
                report,
                job=spec.job,
                operator=spec.operator,
                subtask=index,
                checkpoint_id=spec.checkpoint_id,
                key_groups=key_groups,
            )
    return batch


class _Sender(threading.Thread):
    """Streams a task's input batches to its host, then :data:`DONE`; an error reading them
    (Spark's input failed) is kept for the task to raise, and ends the host's task."""

    def __init__(self, connection: Connection, batches: Iterator[pa.RecordBatch]) -> None:
        super().__init__(name="statecore-host-input", daemon=True)
        self.connection, self.batches = connection, batches
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for batch in self.batches:
                self.connection.send_bytes(BATCH + to_ipc(batch))
            self.connection.send_bytes(DONE)
        except OSError:
            pass  # the host ended, or the task's consumer stopped: the reader sees it
        except BaseException as exc:
            self.error = exc
            with contextlib.suppress(OSError):
                self.connection.send_bytes(ERROR + error_text(exc))


def _connect(address: Path) -> Connection:
    """A connection to the host at ``address``, started first when none listens there."""
    with contextlib.suppress(FileNotFoundError, ConnectionRefusedError):
        return connect(address)
    with _locked(address):
        with contextlib.suppress(FileNotFoundError, ConnectionRefusedError):
            return connect(address)
        address.unlink(missing_ok=True)  # a host that died left it
        _evict(address.parent)
        _sweep(address.parent.parent)
        host = _start(address)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            with contextlib.suppress(FileNotFoundError, ConnectionRefusedError):
                return connect(address)
            if host.poll() is not None or time.monotonic() > deadline:
                host.kill()
                raise RuntimeError(
                    f"the warm state host at {address} did not start (exit status "
                    f"{host.poll()}); its log: {_tail(Path(f'{address}.log'))}"
                )
            time.sleep(0.02)


@contextlib.contextmanager
def _locked(address: Path) -> Iterator[None]:
    """Held while a task starts the host at ``address`` (two tasks never start two)."""
    fd = os.open(f"{address}.lock", os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with open(fd, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _start(address: Path) -> subprocess.Popen[bytes]:
    """The host process of ``address``, detached from this worker (it outlives it), with this
    worker's ``sys.path`` (statecore and the job's modules shipped by ``--py-files`` too)."""
    fd = os.open(
        f"{address}.log",
        os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
    )
    paths = [p for p in sys.path if p]
    with open(fd, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "statecore.spark.host_server", str(address), str(os.getppid())],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            close_fds=True,
            env={
                **os.environ,
                EXECUTOR_ENV: str(os.getppid()),
                "PYTHONPATH": os.pathsep.join(paths),
            },
        )


def stop_hosts(executor: int | None = None) -> int:
    """Ask every host of ``executor`` (default: this process's parent's) to exit once its
    current task ends; how many were asked. Hosts also exit by themselves (see the module)."""
    sockets = list(host_folder(executor).glob("*.sock"))
    for socket in sockets:
        _ask_to_exit(socket)
    return len(sockets)


def stop_job_hosts(job: str, operator: str) -> int:
    """Ask every host of ``job``'s ``operator`` on this machine (of any executor) to exit once
    its current task ends (its query stopped); how many were asked."""
    root = hosts_root()
    if not os.path.lexists(root):
        return 0
    prefix = _job_prefix(job, operator)
    asked = 0
    for folder in sorted(root.iterdir()):
        if folder.name.isdigit():
            for socket in private_folder(root, int(folder.name)).glob(f"{prefix}*.sock"):
                _ask_to_exit(socket)
                asked += 1
    return asked


def stop_rescaled_hosts(folder: Path, job: str, operator: str, before: int, now: int) -> int:
    """Ask the hosts in ``folder`` of ``job``'s ``operator``'s subtasks ``now`` to ``before`` - 1
    to exit (its parallelism went down from ``before`` to ``now``: no task will ask them for
    their state); how many were asked."""
    names = {host_name(job, operator, subtask) for subtask in range(now, before)}
    sockets = [s for s in folder.glob("*.sock") if s.name in names]
    for socket in sockets:
        _ask_to_exit(socket)
    return len(sockets)


def _ask_to_exit(socket: Path, message: bytes = EXIT) -> None:
    try:
        with connect(socket) as connection:
            connection.send_bytes(message)
    except WarmHostRefusedError as exc:
        log.error("%s", exc)
    except OSError:
        socket.unlink(missing_ok=True)  # no host listens there any more


def _evict(folder: Path) -> None:
    """Ask the least recently used hosts of ``folder`` to exit until a new one fits; never
    one that ran a task in the last :data:`EVICT_AFTER` seconds (a stream with more subtasks
    on this executor than the limit keeps them all, rather than restoring in turn). The host
    decides: it exits only when it has been idle that long when it reads the request (not
    while, or right after, it runs a long task)."""
    limit = int(os.environ.get(MAX_HOSTS_ENV) or DEFAULT_MAX_HOSTS)
    used = sorted((_mtime(s), s) for s in folder.glob("*.sock"))
    idle = [s for at, s in used if time.time() - at > EVICT_AFTER]
    for socket in idle[: max(0, len(used) - limit + 1)]:
        _ask_to_exit(socket, EVICT + str(EVICT_AFTER).encode())


def _sweep(root: Path) -> None:
    """Remove the folders of executors that are gone, once nothing in them changed for
    :data:`SWEEP_AFTER` seconds (their hosts' logs, for a look after a failure meanwhile)."""
    for folder in root.iterdir():
        if not folder.name.isdigit() or process_exists(int(folder.name)):
            continue
        files = list(folder.iterdir())
        if any(time.time() - _mtime(f) < SWEEP_AFTER for f in [folder, *files]):
            continue
        with contextlib.suppress(OSError):  # another task sweeping it too
            for f in files:
                f.unlink()
            folder.rmdir()


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def to_ipc(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue())


def from_ipc(data: bytes) -> pa.RecordBatch:
    return pa.ipc.open_stream(data).read_next_batch()


def _tail(path: Path, size: int = 2000) -> str:
    try:
        return path.read_bytes()[-size:].decode("utf-8", "replace")
    except OSError:
        return "(none)"
