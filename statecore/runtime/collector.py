"""Python's cyclic garbage collector while a task runs: one policy, set once per task.

A task allocates short-lived objects for every record (its tuple, the output rows) and holds a
large, long-lived state with no garbage cycles. With Python's default threshold (a young
collection every 700 allocations) the collector would run every few hundred records and, in its
older generations, rescan the state it finds nothing in (pauses of 0.1-0.3 s while 100,000 keys
are restored). So a task raises the young generation's threshold for as long as it runs:
restore, records, timers and snapshot alike. The setting is process-wide: a Spark task sets it
where it starts (:func:`statecore.spark.executor.task_function`), once, and puts it back when it
ends; nothing sets it per batch or per state.

>>> import gc
>>> before = gc.get_threshold()
>>> with task_gc_policy():
...     gc.get_threshold()[0] >= TASK_GC_THRESHOLD
True
>>> gc.get_threshold() == before
True
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["TASK_GC_THRESHOLD", "task_gc_policy"]

TASK_GC_THRESHOLD = 50_000
"""Allocations between young-generation collections while a task runs (Python's default: 700)."""


@contextlib.contextmanager
def task_gc_policy() -> Iterator[None]:
    """The task's collector policy meanwhile; the thresholds as they were after."""
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], TASK_GC_THRESHOLD), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
