"""Commit participants: what a checkpoint commits *before* it completes, behind one protocol.

A checkpoint's state tables (and any later participant that, like them, is undone by restoring
the base checkpoint's versions) are participants. The coordinator
(:meth:`~statecore.checkpoint.coordinator.CheckpointCoordinator.commit`) alone runs them:

1. :meth:`~CommitParticipant.check` every participant before anything commits;
2. :meth:`~CommitParticipant.commit` each one in order, under the writer's fencing epoch (a
   participant whose effects an earlier attempt of the same checkpoint committed already
   returns ``False``; a Delta application transaction makes the commit idempotent);
3. complete the checkpoint in the catalog.

On any failure every participant that was asked to commit (the failing one too: it may have
failed after its commit) is rolled back, the checkpoint is marked FAILED, and the original
error propagates. On :class:`~statecore.errors.ConcurrentRunError` nothing is rolled back:
another writer holds the job and resolves what this one left.

The output and late-data tables are not participants: a reader must never see their rows before
the checkpoint completes, so they are committed only after it
(:mod:`statecore.checkpoint.outputs`) and are never rolled back.
"""

from __future__ import annotations

from typing import Protocol

from statecore.snapshot import Fence

__all__ = ["CommitParticipant"]


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
