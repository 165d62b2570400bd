"""The warm state host process of one stream subtask (:mod:`statecore.spark.host`):
``python -m statecore.spark.host_server SOCKET EXECUTOR_PID``, started by the subtask's first
task. It serves one task at a time over the socket, each as
:func:`~statecore.spark.executor.run_task` in this process, so what the task keeps warm stays
here for the subtask's next task, whichever Python worker Spark picked for it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import sys
import threading
import time
from multiprocessing.connection import Connection, Listener
from pathlib import Path

from statecore.processes import process_exists
from statecore.runtime.collector import task_gc_policy
from statecore.runtime.warm import WARM_POOL
from statecore.spark.executor import run_task
from statecore.spark.host import (
    BATCH,
    DEFAULT_IDLE,
    DONE,
    ERROR,
    EXIT,
    IDLE_ENV,
    from_ipc,
    stop_rescaled_hosts,
    to_ipc,
)

__all__ = ["Host", "main"]

log = logging.getLogger(__name__)


class Host:
    """The server of one subtask's host: one task at a time, over the socket at ``address``."""

    def __init__(self, address: Path, executor: int, idle: float) -> None:
        self.address = address
        self.executor = executor
        self.idle = idle
        self.busy = threading.Lock()
        self.last_task = time.monotonic()
        self.inode = 0
        self.parallelism: int | None = None  # of the last task's job

    def serve(self) -> None:
        listener = Listener(str(self.address), family="AF_UNIX")
        self.inode = os.stat(self.address).st_ino
        threading.Thread(target=self._watch, name="statecore-host-watch", daemon=True).start()
        log.info("warm state host %s of executor %d listening", self.address, self.executor)
        while True:
            connection = listener.accept()
            with connection, self.busy:
                os.utime(self.address)  # most recently used
                if not self.task(connection):
                    self.exit("asked to exit (stop_hosts, or too many hosts)")
                self.last_task = time.monotonic()

    def task(self, connection: Connection) -> bool:
        """Run the task ``connection`` sends; ``False`` when it asks the host to exit."""
        try:
            header = connection.recv_bytes()
            if header == EXIT:
                return False
            paths, payload = pickle.loads(header)
            sys.path.extend(p for p in paths if p not in sys.path)
            spec, function, process, index, connect_s, connect_cpu_s = pickle.loads(payload)
            batches = []
            while (message := connection.recv_bytes()) != DONE:
                batches.append(from_ipc(message[1:]))
        except (EOFError, OSError):
            return True  # the worker went away before its task began
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
        try:
            with task_gc_policy():
                for batch in run_task(
                    spec,
                    function,
                    process,
                    index,
                    iter(batches),
                    handover_s=connect_s,
                    handover_cpu_s=connect_cpu_s,
                ):
                    connection.send_bytes(BATCH + to_ipc(batch))
            connection.send_bytes(DONE)
        except BaseException as exc:
            log.warning("task of subtask %d failed", index, exc_info=True)
            with contextlib.suppress(OSError):
                connection.send_bytes(ERROR + _pickled(exc))
        return True

    def _watch(self) -> None:
        """Exit when the executor is gone or no task came for ``idle`` seconds."""
        while True:
            time.sleep(1.0)
            with self.busy:
                if not process_exists(self.executor):
                    self.exit(f"executor process {self.executor} is gone")
                if time.monotonic() - self.last_task > self.idle:
                    self.exit(f"no task for {self.idle:g} s")

    def exit(self, why: str) -> None:
        """Close what the host keeps (a RocksDB instance releases its folder) and exit."""
        log.info("warm state host %s exits: %s", self.address, why)
        with contextlib.suppress(FileNotFoundError):
            if os.stat(self.address).st_ino == self.inode:
                self.address.unlink()
        WARM_POOL.clear()
        logging.shutdown()
        os._exit(0)


def _pickled(exc: BaseException) -> bytes:
    try:
        data = pickle.dumps(exc)
        pickle.loads(data)
        return data
    except Exception:
        return f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}".encode()


def main(argv: list[str]) -> None:
    address, executor = Path(argv[0]), int(argv[1])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    Host(address, executor, float(os.environ.get(IDLE_ENV) or DEFAULT_IDLE)).serve()


if __name__ == "__main__":
    main(sys.argv[1:])
