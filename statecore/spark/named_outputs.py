"""A run's output tables besides the main one, as its tasks see them: the late-data table and
the side outputs' tables, each a :class:`NamedOutput` written and committed as the main output
table is (one mechanism for all of them)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from statecore.snapshot.output import OutputWriter

__all__ = ["LATE_DATA", "SIDE_OUTPUT", "NamedOutput"]

LATE_DATA = "late-data"
"""The kind (and name) of the late-data table among a run's named outputs."""
SIDE_OUTPUT = "side-output"
"""The kind of a side output's table (its name is its tag's)."""


@dataclass(frozen=True, kw_only=True)
class NamedOutput:
    """An output table besides the main one: where a task writes its rows (``staging``, until
    the checkpoint's commit puts them into ``table``), their columns, and the kind the catalog
    binds the table with (:data:`LATE_DATA`, :data:`SIDE_OUTPUT`)."""

    name: str
    kind: str
    table: str
    schema: pa.Schema
    staging: str | None = None

    @property
    def report_key(self) -> str:
        """The key of the task's report that holds the file it wrote (the late-data table's is
        ``late_output``, as before side outputs; a side output's ``side_output:<name>``)."""
        return "late_output" if self.kind == LATE_DATA else f"side_output:{self.name}"

    def writer(self, checkpoint_id: int, subtask: int) -> OutputWriter:
        return OutputWriter(
            self.table,
            self.schema,
            checkpoint_id=checkpoint_id,
            subtask=subtask,
            staging=self.staging,
        )
