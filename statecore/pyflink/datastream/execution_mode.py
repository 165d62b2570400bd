"""PyFlink's ``RuntimeExecutionMode`` (``pyflink.datastream.execution_mode``): ``BATCH`` runs a
job as one statecore run that ends its input; ``STREAMING`` (PyFlink's default) runs a
Structured Streaming query over an unbounded source (see
:mod:`statecore.pyflink.datastream.stream_execution_environment`)."""

from __future__ import annotations

import enum

__all__ = ["RuntimeExecutionMode"]


class RuntimeExecutionMode(enum.Enum):
    STREAMING = 0
    BATCH = 1
    AUTOMATIC = 2
