"""The keyed runtime: what user code implements, and one parallel instance that runs it.

- :mod:`~statecore.runtime.functions`: ``KeyedProcessFunction``, its contexts and
  ``CheckpointedFunction`` (re-exported here: ``from statecore.runtime import ...``).
- :mod:`~statecore.runtime.vectorized`: the Arrow-batch API (also ``statecore.vectorized``).
- :mod:`~statecore.runtime.task`: one parallel instance over its key-group range, independent
  of Spark.
- :mod:`~statecore.runtime.restore`: what a task reads back from the checkpoint it starts from.
"""

from statecore.runtime.functions import (
    CheckpointedFunction,
    Context,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedProcessFunction,
    OnTimerContext,
    RuntimeContext,
)

__all__ = [
    "RuntimeContext",
    "Context",
    "OnTimerContext",
    "KeyedProcessFunction",
    "CheckpointedFunction",
    "FunctionInitializationContext",
    "FunctionSnapshotContext",
]
