"""PySpark's worker contract for a task that runs in its warm state host (:mod:`.host`).

A plain task's function sees what PySpark's worker set up for it; a hosted task's function runs
in another process, so the task carries it there and back:

- **Broadcast variables** the function captured go by reference: the broadcast's id and the
  file the worker reads its value from (Spark's own file on the executor's disk; its value
  itself when the worker has no file, with broadcast encryption on). The host reads the value
  from there, as the worker would (:func:`dumps_task`, :func:`loads_task`).
- **Accumulators** start at their zero in the host, as in a task; what the function added is
  sent back at the end of a successful task as JSON and added to the worker's accumulators,
  which Spark then reports to the driver (:func:`accumulator_updates`,
  :func:`add_accumulators`). A failed task's updates are dropped, as Spark drops them. Values
  JSON cannot carry exactly (other than numbers, strings, booleans and lists or dicts of them)
  fail the task with a clear error: run such a job with ``warm_hosts=False``.
- **TaskContext.get()** returns a context with the task's stage, partition, attempt, task
  attempt id, CPUs and local properties (:func:`task_context`, :func:`set_task_context`);
  resources and barrier contexts are not carried.
- **Exceptions** come back as text and are rebuilt (:mod:`.host_wire`).
"""

from __future__ import annotations

import io
import json
import pickle
from typing import Any

from pyspark import TaskContext, cloudpickle
from pyspark.accumulators import _accumulatorRegistry
from pyspark.core.broadcast import Broadcast, _broadcastRegistry

__all__ = [
    "accumulator_updates",
    "add_accumulators",
    "dumps_task",
    "loads_task",
    "set_task_context",
    "task_context",
]

_BROADCAST = "statecore.broadcast"


class _TaskPickler(cloudpickle.CloudPickler):
    """cloudpickle, with each broadcast variable as a reference (a worker cannot pickle one)."""

    def persistent_id(self, obj: Any) -> Any:
        if not isinstance(obj, Broadcast):
            return None
        bid = next((b for b, known in _broadcastRegistry.items() if known is obj), None)
        path = getattr(obj, "_path", None)
        if path is None:  # decrypted from a socket: the value is all the worker has
            return (_BROADCAST, bid, None, obj.value)
        return (_BROADCAST, bid, path, None)


class _TaskUnpickler(pickle.Unpickler):
    def persistent_load(self, pid: Any) -> Any:
        tag, bid, path, value = pid
        if tag != _BROADCAST:
            raise pickle.UnpicklingError(f"unknown reference {tag!r}")
        if bid is not None and bid in _broadcastRegistry:
            return _broadcastRegistry[bid]
        if path is not None:
            broadcast: Broadcast[Any] = Broadcast(path=path)
        else:
            broadcast = Broadcast.__new__(Broadcast)
            broadcast._jbroadcast = broadcast._sc = broadcast._python_broadcast = None
            broadcast._value = value
        if bid is not None:
            _broadcastRegistry[bid] = broadcast
        return broadcast


def dumps_task(task: Any) -> bytes:
    """``task`` (its function, as Spark gave it to this worker) pickled for its host."""
    buffer = io.BytesIO()
    _TaskPickler(buffer, protocol=pickle.DEFAULT_PROTOCOL).dump(task)  # type: ignore[no-untyped-call]
    return buffer.getvalue()


def loads_task(data: bytes) -> Any:
    """A task :func:`dumps_task` pickled, its accumulators at zero and its broadcast variables
    read where its worker reads them (the host's broadcasts of earlier tasks are dropped)."""
    _accumulatorRegistry.clear()
    _broadcastRegistry.clear()
    return _TaskUnpickler(io.BytesIO(data)).load()


def task_context() -> dict[str, Any] | None:
    """This worker's :class:`~pyspark.TaskContext` as JSON-able values (``None``: no task)."""
    context = TaskContext.get()
    if context is None:
        return None
    return {
        "stageId": context.stageId(),
        "partitionId": context.partitionId(),
        "attemptNumber": context.attemptNumber(),
        "taskAttemptId": context.taskAttemptId(),
        "cpus": context.cpus(),
        "localProperties": dict(context._localProperties or {}),
    }


def set_task_context(values: dict[str, Any] | None) -> None:
    """Make :meth:`TaskContext.get` return the task's context (``None``: none)."""
    TaskContext._setTaskContext(None)  # type: ignore[arg-type]
    if values is not None:
        TaskContext._setTaskContext(TaskContext.from_json({**values, "resources": {}}))


def accumulator_updates() -> bytes:
    """What the task's function added to its accumulators, as JSON."""
    updates = {str(aid): acc._value for aid, acc in _accumulatorRegistry.items()}
    text = json.dumps(updates)
    if json.loads(text) != updates:
        raise TypeError(
            "an accumulator of the function holds a value warm state hosts cannot carry back "
            "(only numbers, strings, booleans and lists or dicts of them): run the stream with "
            "warm_hosts=False"
        )
    return text.encode()


def add_accumulators(body: bytes) -> None:
    """Add the host's accumulator updates (:func:`accumulator_updates`) to this worker's
    accumulators (those the task's function captured; others are ignored)."""
    if not body:
        return
    for aid, value in json.loads(body).items():
        accumulator = _accumulatorRegistry.get(int(aid))
        if accumulator is not None:
            accumulator += value
