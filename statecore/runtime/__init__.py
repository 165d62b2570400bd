"""The keyed runtime: what user code implements, and one parallel instance that runs it.

- :mod:`~statecore.runtime.functions`: ``KeyedProcessFunction``, its contexts,
  ``CheckpointedFunction`` and the timer names a function uses (``TimerService``, ``TimeDomain``,
  ``Timer``, ``MIN_WATERMARK``), re-exported here: ``from statecore.runtime import ...``.
- :mod:`~statecore.runtime.co_process`: two inputs over one keyed state
  (``KeyedCoProcessFunction``), run as one keyed input with a tag.
- :mod:`~statecore.runtime.broadcast`: the broadcast state pattern
  (``KeyedBroadcastProcessFunction``).
- :mod:`~statecore.runtime.process_function`: a ``ProcessFunction`` over a stream without a key,
  run keyed by position.
- :mod:`~statecore.runtime.spellings`: PyFlink's call spellings of statecore attributes
  (``ctx.timestamp()``) turned into errors that name statecore's.
- :mod:`~statecore.runtime.vectorized`: the Arrow-batch API (also ``statecore.vectorized``).
- :mod:`~statecore.runtime.task`: one parallel instance over its key-group range, independent
  of Spark.
- :mod:`~statecore.runtime.restore`: what a task reads back from the checkpoint it starts from.
- :mod:`~statecore.runtime.shares`: the restore plan cut into each task's part on the driver.
"""

from statecore.runtime.broadcast import KeyedBroadcastProcessFunction
from statecore.runtime.co_process import KeyedCoProcessFunction, TaggedElement
from statecore.runtime.functions import (
    MAX_WATERMARK,
    MIN_WATERMARK,
    CheckpointedFunction,
    Context,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedProcessFunction,
    OnTimerContext,
    OutputContext,
    OutputTag,
    RuntimeContext,
    TimeDomain,
    Timer,
    TimerService,
)
from statecore.runtime.process_function import ProcessFunction

__all__ = [
    "RuntimeContext",
    "Context",
    "OnTimerContext",
    "OutputContext",
    "OutputTag",
    "KeyedProcessFunction",
    "KeyedCoProcessFunction",
    "KeyedBroadcastProcessFunction",
    "ProcessFunction",
    "TaggedElement",
    "CheckpointedFunction",
    "FunctionInitializationContext",
    "FunctionSnapshotContext",
    "MAX_WATERMARK",
    "MIN_WATERMARK",
    "TimeDomain",
    "Timer",
    "TimerService",
]
