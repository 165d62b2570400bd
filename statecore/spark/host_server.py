"""The warm state host process of one stream subtask (:mod:`statecore.spark.host`):
``python -m statecore.spark.host_server SOCKET EXECUTOR_PID``, started by the subtask's first
task. It serves one task at a time over the socket, each as
:func:`~statecore.spark.executor.run_task` in this process, so what the task keeps warm stays
here for the subtask's next task, whichever Python worker Spark picked for it.

It serves only processes of its own user (:mod:`statecore.spark.host_wire`), and never ends
under a task it has not taken: when it exits (idle, its executor gone, asked to) it removes
its socket first and serves the connections already waiting; a task whose host ends before it
replies asks again (a new host). A task it cannot load (its function's module missing here) is
sent back to its worker, which runs it; an error in a task goes back as text; the host goes on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import socket
import sys
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pyarrow as pa

from statecore.processes import process_exists
from statecore.runtime.collector import task_gc_policy
from statecore.runtime.warm import WARM_POOL
from statecore.spark.executor import run_task
from statecore.spark.host import (
    BATCH,
    DEFAULT_IDLE,
    DONE,
    ERROR,
    EVICT,
    EXIT,
    IDLE_ENV,
    READY,
    REFUSED,
    TASK,
    from_ipc,
    stop_rescaled_hosts,
    to_ipc,
)
from statecore.spark.host_context import accumulator_updates, loads_task, set_task_context
from statecore.spark.host_memory import memory_bound, over_bound
from statecore.spark.host_stop import DEFAULT_POLL, POLL_ENV, stopped_at
from statecore.spark.host_wire import accept, error_from_text, error_text, listen

__all__ = ["Host", "main"]

log = logging.getLogger(__name__)

WATCH_EVERY = 1.0
"""Seconds between two checks whether the host should exit (its executor gone, idle)."""


class Host:
    """The server of one subtask's host: one task at a time, over the socket at ``address``."""

    def __init__(
        self, address: Path, executor: int, idle: float, memory: int | None = None
    ) -> None:
        self.address = address
        self.executor = executor
        self.idle = idle
        self.memory = memory_bound() if memory is None else memory
        self.last_task = time.monotonic()
        self.stop_poll = float(os.environ.get(POLL_ENV) or DEFAULT_POLL)
        self.next_poll = 0.0
        self.stop_marker: str | None = None  # of the last task's query, with its checkpoint
        self.last_checkpoint = 0
        self.inode = 0
        self.parallelism: int | None = None  # of the last task's job

    def serve(self) -> None:
        """Serve tasks until asked to exit, the executor is gone, no task came for ``idle``
        seconds or a task left the host over its memory bound; when exiting, the socket goes
        first, then every connection already waiting is served (a task never meets a host that
        ends before it takes it)."""
        listener = listen(self.address)
        self.inode = os.stat(self.address).st_ino
        listener.settimeout(WATCH_EVERY)
        log.info("warm state host %s of executor %d listening", self.address, self.executor)
        while True:
            try:
                connection = accept(listener)
            except TimeoutError:
                why = self._why_exit()
                if why is not None:
                    self._unlink()
                    self._drain(listener)
                    self.exit(why)
                continue
            if connection is None:
                continue
            if not self.serve_one(connection):
                self.exit("asked to exit (stop_hosts, a rescale, or too many hosts)")
            why = over_bound(self.memory)
            if why is not None:
                self._unlink()
                self._drain(listener)
                self.exit(why)

    def _why_exit(self) -> str | None:
        if not process_exists(self.executor):
            return f"executor process {self.executor} is gone"
        idle = time.monotonic() - self.last_task
        if idle > self.idle:
            return f"no task for {self.idle:g} s"
        if self.stop_marker is not None and idle >= self.stop_poll and self._poll_due():
            stopped = stopped_at(self.stop_marker)
            if stopped is not None and self.last_checkpoint <= stopped:
                return f"its query stopped after checkpoint {stopped} ({self.stop_marker})"
        return None

    def _poll_due(self) -> bool:
        """Whether to read the stop marker now (once every ``stop_poll`` seconds)."""
        if time.monotonic() < self.next_poll:
            return False
        self.next_poll = time.monotonic() + self.stop_poll
        return True

    def _drain(self, listener: socket.socket) -> None:
        """Serve the connections that reached the socket before it was removed."""
        listener.setblocking(False)
        while True:
            try:
                connection = accept(listener)
            except (BlockingIOError, InterruptedError):
                return
            if connection is not None:
                self.serve_one(connection)

    def serve_one(self, connection: Connection) -> bool:
        """Serve one connection; ``False`` when it asks the host to exit."""
        with connection:
            try:
                return self.task(connection)
            finally:
                self.last_task = time.monotonic()
                with contextlib.suppress(OSError):
                    os.utime(self.address)  # most recently used: at a task's end too

    def task(self, connection: Connection) -> bool:
        """Run the task ``connection`` sends; ``False`` when it asks the host to exit."""
        try:
            header = connection.recv_bytes()
        except (EOFError, OSError):
            return True  # the worker went away before its task began
        if header == EXIT:
            return False
        if header[:1] == EVICT:  # only when idle that long (not right after a long task)
            return time.monotonic() - self.last_task < float(header[1:] or b"0")
        if header[:1] != TASK:
            log.error("a connection sent %r, not a task: closed", header[:1])
            return True
        loading_cpu = time.thread_time()
        try:
            paths, context, payload, (started, worker_cpu_s) = pickle.loads(header[1:])  # ours
            sys.path.extend(p for p in paths if p not in sys.path)
            spec, function, process, index = loads_task(payload)
        except Exception as exc:  # the task's worker runs it itself
            log.warning("could not load a task; its worker runs it", exc_info=True)
            with contextlib.suppress(OSError):
                connection.send_bytes(REFUSED + error_text(exc))
            return True
        try:
            connection.send_bytes(READY)
        except OSError:
            return True
        # the hand-over, from the task's start in its worker (one machine's monotonic clock)
        # to here, is a part of the task's acquisition; the state is taken while the worker
        # starts sending its input
        handover_s = max(0.0, time.perf_counter() - float(started))
        handover_cpu_s = float(worker_cpu_s) + time.thread_time() - loading_cpu
        self._rescaled(spec)
        self.stop_marker = getattr(spec, "host_stop_marker", None)
        self.last_checkpoint = spec.checkpoint_id
        set_task_context(context)
        try:
            with task_gc_policy():
                for batch in run_task(
                    spec,
                    function,
                    process,
                    index,
                    _input(connection),
                    handover_s=handover_s,
                    handover_cpu_s=handover_cpu_s,
                ):
                    connection.send_bytes(BATCH + to_ipc(batch))
            connection.send_bytes(DONE + accumulator_updates())
        except BaseException as exc:
            log.warning("task of subtask %d failed", index, exc_info=True)
            with contextlib.suppress(OSError):
                connection.send_bytes(ERROR + error_text(exc))
        finally:
            set_task_context(None)
        return True

    def _rescaled(self, spec: Any) -> None:
        """Ask the hosts of subtasks the job's parallelism no longer has to exit."""
        if self.parallelism is not None and spec.parallelism < self.parallelism:
            stopped = stop_rescaled_hosts(
                self.address.parent, spec.job, spec.operator, self.parallelism, spec.parallelism
            )
            log.info(
                "parallelism %d -> %d: asked %d hosts to exit",
                self.parallelism,
                spec.parallelism,
                stopped,
            )
        self.parallelism = spec.parallelism

    def _unlink(self) -> None:
        """Remove the socket (when it is still this host's): no new task reaches this host."""
        with contextlib.suppress(FileNotFoundError):
            if os.stat(self.address).st_ino == self.inode:
                self.address.unlink()

    def exit(self, why: str) -> None:
        """Close what the host keeps (a RocksDB instance releases its folder) and exit."""
        log.info("warm state host %s exits: %s", self.address, why)
        self._unlink()
        WARM_POOL.clear()
        logging.shutdown()
        os._exit(0)


def _input(connection: Connection) -> Iterator[pa.RecordBatch]:
    """The task's input batches as its worker streams them (an error: its input failed)."""
    while True:
        try:
            message = connection.recv_bytes()
        except EOFError:
            raise ConnectionError("the task's Python worker went away during its input") from None
        tag, body = message[:1], message[1:]
        if tag == DONE:
            return
        if tag != BATCH:
            raise error_from_text(body, "the task's Python worker")
        yield from_ipc(body)


def main(argv: list[str]) -> None:
    address, executor = Path(argv[0]), int(argv[1])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    Host(address, executor, float(os.environ.get(IDLE_ENV) or DEFAULT_IDLE)).serve()


if __name__ == "__main__":
    main(sys.argv[1:])
