"""The vectorized keyed API, by its public name: ``from statecore.vectorized import ...``.

It is implemented in :mod:`statecore.runtime.vectorized`, beside the per-record API.
"""

from statecore.runtime.vectorized import (
    Aggregate,
    AggregateOp,
    KeyedBatch,
    KeyedBatchFunction,
    RunningAggregate,
)

__all__ = ["KeyedBatch", "KeyedBatchFunction", "RunningAggregate", "Aggregate", "AggregateOp"]
