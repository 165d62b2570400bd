"""Python's cyclic garbage collector while a task runs: one policy, set once per task.

A task allocates short-lived objects for every record (its tuple, the output rows) and holds a
large, long-lived state with no garbage cycles. With Python's default threshold (a young
collection every 700 allocations) the collector would run every few hundred records and, in its
older generations, rescan the state it finds nothing in (pauses of 0.1-0.3 s while 100,000 keys
are restored). So a task raises the young generation's threshold for as long as it runs:
restore, records, timers and snapshot alike. The setting is process-wide: a Spark task sets it
where it starts (:func:`statecore.spark.executor.task_function`), once, and puts it back when it
ends; nothing sets it per batch or per state.

When a task ends, PySpark's worker runs a full collection before it takes the next task
(``pyspark.daemon``: ``gc.collect()`` after every task of a reused worker). A full collection
scans every object of the process: the modules imported (Spark, pandas, pyarrow; about 115,000
objects, 80-150 ms a collection on the project's machine) and the state kept warm for the next
micro-batch (another 60 ms per million entries), none of it garbage. So a task ends by collecting
what it allocated (the objects not yet frozen) and then freezing every survivor
(``gc.freeze()``): the collection after it has nothing left to scan, and the next task's
collections scan only what that task allocates.

A frozen object is never collected by the cyclic collector (reference counting still frees
everything that is not in a cycle, e.g. a state value replaced). So the frozen objects go back to
the collector (``gc.unfreeze()``, then one full collection) whenever the process drops a state it
kept (:func:`release_frozen`, called by :mod:`statecore.runtime.warm`), and at least every
:data:`FULL_COLLECTION_EVERY` tasks: garbage in reference cycles is reclaimed as before, only
later.

>>> import gc
>>> before = gc.get_threshold()
>>> with task_gc_policy():
...     gc.get_threshold()[0] >= TASK_GC_THRESHOLD
True
>>> gc.get_threshold() == before
True
>>> gc.get_freeze_count() > 0  # what survived the task is frozen
True
>>> gc.unfreeze()
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["FULL_COLLECTION_EVERY", "TASK_GC_THRESHOLD", "release_frozen", "task_gc_policy"]

TASK_GC_THRESHOLD = 50_000
"""Allocations between young-generation collections while a task runs (Python's default: 700)."""
FULL_COLLECTION_EVERY = 50
"""Tasks of a process between two full collections over every object, frozen ones included."""

_since_full = 0
_released = False


def release_frozen() -> None:
    """The process dropped a state it kept: the next task's end collects over every object
    again, so that no garbage cycle of that state stays frozen."""
    global _released
    _released = True


@contextlib.contextmanager
def task_gc_policy() -> Iterator[None]:
    """The task's collector policy meanwhile; the thresholds as they were after."""
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], TASK_GC_THRESHOLD), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        _collect_and_freeze()


def _collect_and_freeze() -> None:
    """Collect the objects not frozen (all of them after a release, and every
    :data:`FULL_COLLECTION_EVERY` tasks), then freeze the survivors."""
    global _since_full, _released
    _since_full += 1
    if _released or _since_full >= FULL_COLLECTION_EVERY:
        gc.unfreeze()
        _since_full, _released = 0, False
    gc.collect()
    gc.freeze()
