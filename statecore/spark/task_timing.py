"""Where a Spark task's time went after it got its state: the ``timing`` entry of a task's
report (:func:`statecore.spark.executor.run_task`), read by ``python -m
benchmarks.spark_breakdown``."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

__all__ = ["TaskTiming"]


@dataclass
class TaskTiming:
    """Where a task's time went after it got its state, in seconds of wall time (the task's
    report, for ``python -m benchmarks.spark_breakdown``): ``input_wait_s`` waiting for
    Spark's next input batch (the JVM's shuffle read, sort and Arrow serialization, when the
    worker outpaces it), ``loop_s`` the whole loop over the input (the wait, the operator and
    the output included), ``output_write_s`` of it writing output files, ``snapshot_s`` the
    snapshot and closing the output files."""

    input_wait_s: float = 0.0
    loop_s: float = 0.0
    output_write_s: float = 0.0
    snapshot_s: float = 0.0

    def inputs(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``batches``, the time spent waiting for each counted in ``input_wait_s``."""
        clock, iterator = time.perf_counter, iter(batches)
        while True:
            started = clock()
            batch = next(iterator, None)
            self.input_wait_s += clock() - started
            if batch is None:
                return
            yield batch

    def to_json_dict(self) -> dict[str, float]:
        return {name: round(value, 4) for name, value in dataclasses.asdict(self).items()}
