"""Warm state hosts: a stream's subtask keeps its state warm whichever Python worker Spark picks.

A task keeps its state warm in the process that ran it (:mod:`statecore.runtime.warm`), but
Spark hands each task to whichever of the executor's idle Python workers comes first, and kills
workers idle for a minute: on ``local[2]`` only 52-74 % of a stream's tasks found their state
warm, the others restored it from Delta. So a stream's task does not run its subtask in the
Python worker: it runs it in the subtask's *host*, a process of the same machine that lives as
long as the executor, started by the first task that needs it and addressed by a Unix socket
named after the executor (pyspark's worker daemon, the worker's parent), the job, the operator
and the subtask. The worker connects, sends the task (its :class:`TaskSpec`, function and
processing, pickled as Spark pickled them) and its partition's Arrow batches, and passes the
host's result batches on to Spark. In the host the task is :func:`run_task` as before, warm
pool, restore, snapshot, live lookups and fault points included: what a worker would keep, the
host keeps, and the next task of the subtask finds it there whichever worker Spark picked. A
task on another executor (a multi-executor cluster) reaches another host, which restores.

Failure stays a task failure. An error in the host comes back as the task's error (the same
exception, when it pickles); a host that dies (a kill point, an OOM) ends the connection, the
task fails and Spark's retry starts a new host, which restores. The host takes all of a task's
batches before it runs it (a worker that dies while sending leaves no task behind); a worker
that dies later makes the host's task fail at its next send, its state closed, not kept. A host
serves one task at a time (a second attempt of the subtask waits for the first to end), and the
warm pool's token decides as before whether what it holds is the checkpoint to restore.

A host exits when its executor is gone, after :data:`IDLE_ENV` seconds without a task (default
1,800), when more than :data:`MAX_HOSTS_ENV` hosts (default 8) of its executor exist and it
is the least recently used and idle for a minute, or when its job's parallelism went down below
its subtask (the first task at the lower parallelism in another host of the job on its executor
asks it to). The folder of an executor that is gone is removed a day after its last change, by
the next host start. Hosts live in ``$STATECORE_HOST_DIR``
(default the temporary folder) under ``statecore-hosts-<uid>``, a folder only its owner may use
(the socket accepts pickles); each host logs to ``<socket>.log`` beside its socket.
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
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from multiprocessing.connection import Client, Connection
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark import cloudpickle

from statecore.errors import ConfigError
from statecore.processes import process_exists

__all__ = [
    "BATCH",
    "DONE",
    "ERROR",
    "EXIT",
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

BATCH, DONE, ERROR, EXIT = b"B", b"D", b"E", b"X"
"""The first byte of a message: a result (or input) batch follows, the task (or its input) is
done, an error follows (pickled), the host is asked to exit."""


def hosting() -> bool:
    """Whether this worker's environment lets stream tasks run in hosts (the default)."""
    return os.environ.get(WARM_HOST_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def hosts_root() -> Path:
    """The folder of this user's hosts (one folder per executor in it)."""
    base = Path(os.environ.get(HOST_DIR_ENV) or tempfile.gettempdir())
    return base / f"statecore-hosts-{os.getuid()}"


def host_folder(executor: int | None = None) -> Path:
    """The folder of the hosts of ``executor`` (default: this worker's, its parent process),
    created private to this user; refused when someone else could use it."""
    return _private_folder(hosts_root(), os.getppid() if executor is None else executor)


@functools.lru_cache(maxsize=64)
def _private_folder(root: Path, executor: int) -> Path:
    """:func:`host_folder`, checked once per process (a task's hand-over makes no file system
    call but its connection)."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = root.stat()
    if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        raise ConfigError(
            f"warm state hosts: {root} must be a folder only this user may use (owner "
            f"{info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}); remove it or set "
            f"{HOST_DIR_ENV}"
        )
    folder = root / str(executor)
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def host_name(job: str, operator: str, subtask: int) -> str:
    """The name of the socket of the host of ``subtask`` of ``job``'s ``operator`` (short: a
    Unix socket's path has at most 107 bytes)."""
    return hashlib.sha256(f"{job}\0{operator}\0{subtask}".encode()).hexdigest()[:24] + ".sock"


def host_address(job: str, operator: str, subtask: int, executor: int | None = None) -> Path:
    """The socket of the host of ``subtask`` of ``job``'s ``operator`` on ``executor``;
    refused (before any folder is made) when a Unix socket cannot have that path."""
    executor = os.getppid() if executor is None else executor
    address = hosts_root() / str(executor) / host_name(job, operator, subtask)
    if len(os.fsencode(address)) > MAX_SOCKET_PATH:
        raise ConfigError(
            f"warm state hosts: {address} is too long for a Unix socket (at most "
            f"{MAX_SOCKET_PATH} bytes); set {HOST_DIR_ENV} to a shorter folder"
        )
    host_folder(executor)
    return address


def hosted(
    spec: Any, function: Any, process: Any, index: int, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """:func:`~statecore.spark.executor.run_task` of operator instance ``index`` in its host
    (started when there is none): the partition's ``batches`` go there, its result batches
    come back."""
    started, started_cpu = time.perf_counter(), time.thread_time()
    address = _address(os.environ.get(HOST_DIR_ENV), spec.job, spec.operator, index)
    connection = _connect(address)
    with connection:
        connect_s = time.perf_counter() - started
        task = (spec, function, process, index, connect_s, time.thread_time() - started_cpu)
        payload = cloudpickle.dumps(task)  # type: ignore[no-untyped-call]
        connection.send_bytes(pickle.dumps((sys.path, payload)))  # Spark's --py-files too
        for batch in batches:
            connection.send_bytes(BATCH + to_ipc(batch))
        connection.send_bytes(DONE)
        while True:
            try:
                message = connection.recv_bytes()
            except EOFError:
                raise RuntimeError(
                    f"job {spec.job}, operator {spec.operator}, subtask {index}: its warm "
                    f"state host ended during the task (see {address}.log); the task fails "
                    "and its retry restores"
                ) from None
            tag, body = message[:1], message[1:]
            if tag == BATCH:
                yield from_ipc(body)
            elif tag == DONE:
                return
            else:
                raise _error(body)


@functools.lru_cache(maxsize=256)
def _address(host_dir: str | None, job: str, operator: str, subtask: int) -> Path:
    """:func:`host_address` of this worker's executor under ``host_dir`` (the value of
    :data:`HOST_DIR_ENV`), computed once per process (a Python worker runs many tasks of the
    same subtasks)."""
    return host_address(job, operator, subtask)


def _connect(address: Path) -> Connection:
    """A connection to the host at ``address``, started first when none listens there."""
    with contextlib.suppress(FileNotFoundError, ConnectionRefusedError):
        return Client(str(address), family="AF_UNIX")
    _private_folder.cache_clear()  # checked again: the folder may have gone since
    _private_folder(address.parent.parent, int(address.parent.name))
    with _locked(address):
        with contextlib.suppress(FileNotFoundError, ConnectionRefusedError):
            return Client(str(address), family="AF_UNIX")
        address.unlink(missing_ok=True)  # a host that died left it
        _evict(address.parent)
        _sweep(address.parent.parent)
        host = _start(address)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            with contextlib.suppress(FileNotFoundError, ConnectionRefusedError):
                return Client(str(address), family="AF_UNIX")
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
    with open(f"{address}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _start(address: Path) -> subprocess.Popen[bytes]:
    """The host process of ``address``, detached from this worker (it outlives it)."""
    with open(f"{address}.log", "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "statecore.spark.host_server", str(address), str(os.getppid())],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            close_fds=True,
            env={**os.environ, EXECUTOR_ENV: str(os.getppid())},
        )


def stop_hosts(executor: int | None = None) -> int:
    """Ask every host of ``executor`` (default: this process's parent's) to exit once its
    current task ends; how many were asked. Hosts also exit by themselves (see the module)."""
    sockets = list(host_folder(executor).glob("*.sock"))
    for socket in sockets:
        _ask_to_exit(socket)
    return len(sockets)


def stop_rescaled_hosts(folder: Path, job: str, operator: str, before: int, now: int) -> int:
    """Ask the hosts in ``folder`` of ``job``'s ``operator``'s subtasks ``now`` to ``before`` - 1
    to exit (its parallelism went down from ``before`` to ``now``: no task will ask them for
    their state); how many were asked."""
    names = {host_name(job, operator, subtask) for subtask in range(now, before)}
    sockets = [s for s in folder.glob("*.sock") if s.name in names]
    for socket in sockets:
        _ask_to_exit(socket)
    return len(sockets)


def _ask_to_exit(socket: Path) -> None:
    try:
        with Client(str(socket), family="AF_UNIX") as connection:
            connection.send_bytes(EXIT)
    except OSError:
        socket.unlink(missing_ok=True)  # no host listens there any more


def _evict(folder: Path) -> None:
    """Ask the least recently used hosts of ``folder`` to exit until a new one fits; never
    one that ran a task in the last :data:`EVICT_AFTER` seconds (a stream with more subtasks
    on this executor than the limit keeps them all, rather than restoring in turn)."""
    limit = int(os.environ.get(MAX_HOSTS_ENV) or DEFAULT_MAX_HOSTS)
    used = sorted((_mtime(s), s) for s in folder.glob("*.sock"))
    idle = [s for at, s in used if time.time() - at > EVICT_AFTER]
    for socket in idle[: max(0, len(used) - limit + 1)]:
        _ask_to_exit(socket)


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


def _error(body: bytes) -> BaseException:
    """The host's exception: itself when it unpickles, else its type and message."""
    try:
        error = pickle.loads(body)
    except Exception:
        return RuntimeError(body.decode("utf-8", "replace"))
    return error if isinstance(error, BaseException) else RuntimeError(repr(error))


def _tail(path: Path, size: int = 2000) -> str:
    try:
        return path.read_bytes()[-size:].decode("utf-8", "replace")
    except OSError:
        return "(none)"
