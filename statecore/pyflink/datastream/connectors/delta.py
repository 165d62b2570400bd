"""statecore's output table as a sink (no PyFlink counterpart): ``sink_to(DeltaSink(path))``
makes the job's output a Delta table, committed exactly once with each checkpoint (see
:mod:`statecore.snapshot.output`). The stream's ``output_type`` names the columns: a
``ROW_NAMED`` its fields, a ``ROW`` or ``TUPLE`` ``f0``, ``f1``..., any other type one column
``value``."""

from __future__ import annotations

__all__ = ["DeltaSink"]


class DeltaSink:
    """The job's output as the Delta table at ``path`` (a local path or an object-store URI)."""

    def __init__(self, path: str) -> None:
        self.path = path

    @staticmethod
    def for_path(path: str) -> DeltaSink:
        return DeltaSink(path)
