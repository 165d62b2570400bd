"""Commit participants: everything a checkpoint commits, behind one two-phase protocol.

Flink's ``TwoPhaseCommitSinkFunction`` on Delta. A checkpoint's effects (the state tables, the
output table, the late-data table, and any later sink) are participants. The coordinator
(:meth:`~statecore.checkpoint.coordinator.CheckpointCoordinator.commit`) alone runs them:

1. :meth:`~CommitParticipant.check` every participant before anything commits;
2. :meth:`~CommitParticipant.commit` each one in order, under the writer's fencing epoch (a
   participant whose effects an earlier attempt of the same checkpoint committed already
   returns ``False``; a Delta application transaction makes the commit idempotent);
3. complete the checkpoint in the catalog.

On any failure every participant that was asked to commit (the failing one too: it may have
failed after its commit) is rolled back past the checkpoints that never completed, the
checkpoint is marked FAILED, and the original error propagates. On
:class:`~statecore.errors.ConcurrentRunError` nothing is rolled back: another writer holds the
job and resolves what this one left.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from statecore.snapshot import Fence
from statecore.snapshot.output import OutputFile, OutputTable

__all__ = ["CommitParticipant", "OutputParticipant"]

log = logging.getLogger(__name__)


class CommitParticipant(Protocol):
    """One thing a checkpoint commits (see the module docstring)."""

    @property
    def name(self) -> str:
        """What it is, for messages: e.g. ``output table s3://bucket/out``."""
        ...

    def check(self) -> None:
        """Raise (a :class:`~statecore.errors.StateError`) when it cannot commit; called on
        every participant before any of them commits."""
        ...

    def commit(self, checkpoint_id: int, fence: Fence | None) -> bool:
        """Make this checkpoint's effects visible, fenced by the writer's epoch; ``False``
        when an earlier attempt of ``checkpoint_id`` committed them already."""
        ...

    def roll_back(self, completed: int | None, fence: Fence | None) -> None:
        """Undo the effects of every checkpoint after ``completed`` (the job's latest
        completed checkpoint id; ``None``: none completed); nothing when there are none."""
        ...


class OutputParticipant:
    """An output table (:class:`~statecore.snapshot.output.OutputTable`: the job's output or
    its late data) as a participant, with the files the tasks wrote for this checkpoint."""

    def __init__(self, table: OutputTable, files: Sequence[OutputFile] = (), *, kind: str) -> None:
        self.table = table
        self.files = list(files)
        self.kind = kind

    @property
    def name(self) -> str:
        return f"{self.kind} table {self.table.uri}"

    def check(self) -> None:
        self.table.check_schema()

    def commit(self, checkpoint_id: int, fence: Fence | None) -> bool:
        return self.table.commit(self.files, checkpoint_id=checkpoint_id, fence=fence)

    def roll_back(self, completed: int | None, fence: Fence | None) -> None:
        restored = self.table.roll_back(completed=completed, fence=fence)
        if restored is not None:
            log.warning(
                "rolled the %s back to version %s, past the commits of checkpoints after %s "
                "that never completed",
                self.name,
                restored,
                completed,
            )
