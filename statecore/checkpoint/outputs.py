"""Output after completion: a checkpoint's output and late-data rows, committed once it completed.

Flink's ``TwoPhaseCommitSinkFunction`` on Delta. The tasks write their output (and late-data)
rows as Parquet files into a staging folder beside the checkpoint's record in the warehouse
(:func:`~statecore.checkpoint.output_records.staged_output_folder`), outside the tables'
folders: invisible to every reader, and where no Delta tool (VACUUM above all) lists or deletes
them. The coordinator
(:meth:`~statecore.checkpoint.coordinator.CheckpointCoordinator.commit`) then:

1. records the files as the checkpoint's *pending output commits* in the catalog (the
   pre-commit, fenced by the writer's epoch), and in the warehouse
   (:mod:`statecore.checkpoint.output_records`, for a catalog rebuilt from it);
2. commits the state tables and completes the checkpoint in the catalog;
3. only then commits each output table (:func:`roll_forward`), idempotently: the files are
   copied into the table and checked there (present, at their recorded size), the commit
   records the checkpoint id as the job's Delta application transaction, so a commit that was
   made already is not made again, the files are checked again (repaired from their staged
   copies if a VACUUM raced the commit), the staged copies deleted
   (:mod:`statecore.snapshot.output_staging`); and marks the pending record done. A file gone
   from its staging folder and from the table is
   :class:`~statecore.errors.OutputFilesMissingError`, naming the checkpoint, the table and
   each file: nothing points the table at it.

When step 3 fails, or the process dies before it, the checkpoint stays complete and its output
pending: whoever holds the job next rolls it forward (the job's next run and a replay of the
checkpoint in :meth:`~statecore.checkpoint.coordinator.CheckpointCoordinator.resolve_abandoned`,
``statecore catalog recover JOB``). A checkpoint that fails before it completes never commits
its files: they are deleted and its pending records discarded (by the failing writer, or by the
next holder when the writer died). Nothing RESTOREs an output table: a reader (DuckDB, Spark, a
Delta ``readStream``) sees each completed checkpoint's rows appear once, a little after it
completed, and never sees rows vanish.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from statecore.catalog import Catalog, CheckpointStatus, PendingOutput
from statecore.checkpoint.output_records import delete_pending_records
from statecore.errors import OutputCommitPendingError, OutputFilesMissingError
from statecore.snapshot import Fence
from statecore.snapshot.output import (
    OutputFile,
    OutputTable,
    output_schema,
    output_schema_text,
)

__all__ = ["OutputSink", "delete_files", "roll_forward"]

log = logging.getLogger(__name__)

_DONE = (CheckpointStatus.COMPLETED, CheckpointStatus.EXPIRED)


class OutputSink:
    """An output table (:class:`~statecore.snapshot.output.OutputTable`: the job's output or its
    late data, ``kind``) with the files the tasks wrote into it for one checkpoint."""

    def __init__(self, table: OutputTable, files: Sequence[OutputFile] = (), *, kind: str) -> None:
        self.table = table
        self.files = list(files)
        self.kind = kind

    @property
    def name(self) -> str:
        return f"{self.kind} table {self.table.uri}"

    def check(self) -> None:
        """Raise (a :class:`~statecore.errors.StateError`) when the table cannot take the rows."""
        self.table.check_schema()
        self.table.check_owner()

    def pending(self, job: str, checkpoint_id: int) -> PendingOutput:
        """The files as the checkpoint's pending output commit to this table."""
        return PendingOutput(
            job=job,
            checkpoint_id=checkpoint_id,
            uri=self.table.uri,
            kind=self.kind,
            app_id=self.table.app_id,
            table_schema=output_schema_text(self.table.schema),
            files=tuple(f.to_json_dict() for f in self.files),
        )

    def discard(self) -> None:
        """Delete the files: the checkpoint did not complete, they are never committed."""
        self.table.delete(self.files)


def delete_files(pending: PendingOutput) -> None:
    """Delete the files of a pending output commit that is never made."""
    table = OutputTable(pending.uri, output_schema(pending.table_schema), app_id=pending.app_id)
    table.delete([OutputFile(**f) for f in pending.files])


def _note(catalog: Catalog, pending: PendingOutput, exc: Exception) -> None:
    """Record why the commit failed, for ``statecore checkpoints list|show``; never raises
    (the catalog may be what failed)."""
    try:
        catalog.note_output_error(
            pending.job, pending.checkpoint_id, pending.uri, f"{type(exc).__name__}: {exc}"
        )
    except Exception as error:
        log.warning("job %s: the output commit's error was not recorded: %r", pending.job, error)


def roll_forward(
    catalog: Catalog,
    job: str,
    fence: Fence | None,
    *,
    checkpoint_id: int | None = None,
    warehouse: str | None = None,
) -> list[PendingOutput]:
    """Commit the pending output commits of ``job``'s completed checkpoints (of
    ``checkpoint_id`` alone if given), oldest first, and mark them done; the pending commits of
    checkpoints that FAILED are discarded, their files deleted (IN_PROGRESS ones are left to the
    writer that holds the job, which fails them first). The commits made (or found made). With
    ``warehouse``, the records of the checkpoints resolved are deleted from it
    (:mod:`statecore.checkpoint.output_records`).

    :class:`OutputCommitPendingError` when a commit fails: that checkpoint's output and every
    later one's stay pending (the tables get the checkpoints' commits in their order)."""
    rolled: list[PendingOutput] = []
    discarded: set[int] = set()
    for pending, status in catalog.pending_outputs(job, checkpoint_id):
        if status is CheckpointStatus.FAILED:
            if pending.checkpoint_id not in discarded:
                discarded.add(pending.checkpoint_id)
                for dropped in catalog.discard_pending_outputs(job, pending.checkpoint_id):
                    delete_files(dropped)
                    log.info(
                        "job %s: checkpoint %s failed; its %s files were deleted, never committed",
                        job,
                        dropped.checkpoint_id,
                        dropped.kind,
                    )
                if warehouse is not None:
                    delete_pending_records(warehouse, job, pending.checkpoint_id)
            continue
        if status not in _DONE:
            continue
        table = OutputTable(pending.uri, output_schema(pending.table_schema), app_id=pending.app_id)
        try:
            made = table.commit(
                [OutputFile(**f) for f in pending.files],
                checkpoint_id=pending.checkpoint_id,
                fence=fence,
            )
        except OutputFilesMissingError as exc:
            _note(catalog, pending, exc)
            raise OutputFilesMissingError(
                f"job {job!r}: checkpoint {pending.checkpoint_id} completed, but its "
                f"{pending.kind} cannot be committed to {pending.uri}: {exc}\nIts rows are lost "
                "unless these files are put back (at their staged or table path, at their "
                f"size); then `statecore catalog recover {job}` or the job's next run commits "
                "them. It stays pending, and so does every later checkpoint's output"
            ) from exc
        except Exception as exc:
            _note(catalog, pending, exc)
            raise OutputCommitPendingError(
                f"job {job!r}: checkpoint {pending.checkpoint_id} completed, but the commit of "
                f"its {pending.kind} to {pending.uri} failed: {exc}. It stays pending: the "
                f"job's next run, a replay of checkpoint {pending.checkpoint_id} or "
                f"`statecore catalog recover {job}` commits it (once)"
            ) from exc
        catalog.mark_output_committed(job, pending.checkpoint_id, pending.uri)
        if not made:
            log.info(
                "job %s: the %s of checkpoint %s was in %s already",
                job,
                pending.kind,
                pending.checkpoint_id,
                pending.uri,
            )
        rolled.append(pending)
    if warehouse is not None:
        for done in sorted({p.checkpoint_id for p in rolled}):
            delete_pending_records(warehouse, job, done)
    return rolled
