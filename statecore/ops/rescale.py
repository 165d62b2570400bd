"""Rescale a job: another parallelism, within or past its max parallelism.

Within the max parallelism a rescale is a catalog change: it validates, pins the latest checkpoint
as a savepoint (:func:`~statecore.ops.savepoint.record_pin`: one catalog row, nothing copied) and
sets the job's parallelism; the next run restores the key-group ranges of the new parallelism and
redistributes operator state. No keyed-state byte is rewritten.

The savepoint and the rescale are one step for the job: the rescale reads the latest checkpoint
under the job's lease and holds it until it is done, so no run of the job completes in between.
A savepoint taken before it (the rescale DAG's savepoint task) may be of an earlier checkpoint,
when a run of the job completed since; the rescale then pins the latest checkpoint itself and
rescales that one (the earlier savepoint is kept), never the older state.

Past the max parallelism the key groups themselves change: every table partitioned by key group
that holds a ``key`` column (keyed state and timers) is rewritten into a new savepoint with each
row's key group recomputed from its key (:func:`statecore.keygroups.arrow.assign_to_key_groups`,
a batch at a time); operator state is copied as it is. That savepoint becomes the job's latest
checkpoint, at the new max parallelism. Flink needs a hand-written State Processor job for this.

:func:`verify_rescale` checks a rescale afterwards: every state's rows, keys and checksum
(:func:`statecore.query.diff.checksums`, independent of the parallelism and the key groups) are
the same in the savepoint taken before and in the job's latest checkpoint, and the job is at the
parallelism it was rescaled to.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from statecore.catalog import Catalog, CheckpointStatus, JobRecord, TableVersion
from statecore.checkpoint.lock import maintenance_lock
from statecore.checkpoint.points import RestorePoint, checkpoint_point, savepoint_point
from statecore.config import StatecoreConfig
from statecore.errors import ConfigError, StateMismatchError
from statecore.keygroups import UPPER_BOUND_MAX_PARALLELISM
from statecore.keygroups.arrow import assign_to_key_groups
from statecore.ops.pending import roll_forward_first
from statecore.ops.savepoint import (
    Rewrite,
    TableRewriter,
    import_point,
    record_pin,
    write_savepoint,
)
from statecore.progress import Progress, silent
from statecore.query.diff import TableChecksum, checksums
from statecore.snapshot.rewrite import TableLayout, read_files, table_files, table_layout

__all__ = [
    "RescaleCheck",
    "RescaleResult",
    "check_rescale",
    "regroup_key_groups",
    "rescale",
    "verify_rescale",
]

KEY = "key"
KEY_GROUP = "key_group"
_FLUSH_BYTES = 64 << 20  # buffered rows per table before they are written out


@dataclass(frozen=True, kw_only=True)
class RescaleResult:
    """What a rescale did."""

    job: str
    parallelism_before: int
    parallelism: int
    max_parallelism_before: int
    max_parallelism: int
    savepoint: str | None  # the savepoint taken before anything changed (a pin's name)
    savepoint_checkpoint_id: int | None  # the checkpoint it is of: the state rescaled
    rewritten_savepoint: str | None  # past the max parallelism: the state with new key groups
    checkpoint_id: int | None  # past the max parallelism: the job's new latest checkpoint
    keyed_bytes_rewritten: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class RescaleCheck:
    """A verified rescale: the state, equal before and after, in totals."""

    job: str
    checkpoint_id: int | None  # the job's latest checkpoint, after the rescale
    savepoint: str  # the savepoint taken before
    parallelism: int
    max_parallelism: int
    states: int  # tables: keyed states, timers and operator states
    keys: int
    rows: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_rescale(job: JobRecord, parallelism: int, max_parallelism: int | None) -> int:
    """Validate a rescale of ``job`` before anything is done; the max parallelism it ends at."""
    target = job.max_parallelism if max_parallelism is None else max_parallelism
    if not 1 <= target <= UPPER_BOUND_MAX_PARALLELISM:
        raise ConfigError(
            f"job {job.name!r}: max parallelism {target} must be in "
            f"1..{UPPER_BOUND_MAX_PARALLELISM}"
        )
    if parallelism < 1:
        raise ConfigError(f"job {job.name!r}: parallelism {parallelism} must be at least 1")
    if parallelism > target:
        hint = (
            ""
            if max_parallelism is not None
            else (
                "; to go past it, pass a larger --max-parallelism (the state is rewritten with new "
                "key groups)"
            )
        )
        raise ConfigError(
            f"job {job.name!r}: parallelism {parallelism} is above the max parallelism "
            f"{target}{hint}"
        )
    return target


def _has_keys(layout: TableLayout) -> bool:
    return layout.partition == KEY_GROUP and KEY in layout.rows_schema.names


def regroup_key_groups(max_parallelism: int) -> TableRewriter:
    """A :data:`~statecore.ops.savepoint.TableRewriter` that recomputes every row's key group for
    ``max_parallelism`` (tables without keys are copied)."""

    def rewrite(table: TableVersion, layout: TableLayout) -> Rewrite | None:
        if not _has_keys(layout):
            return None
        return Rewrite(parts=_regrouped(table, max_parallelism), replaced=None)

    return rewrite


def _regrouped(table: TableVersion, max_parallelism: int) -> Iterator[tuple[int, pa.Table]]:
    buffered: dict[int, list[pa.Table]] = defaultdict(list)
    size = 0
    for _, rows in read_files(table.path, table_files(table.path, table.version)):
        if not rows.num_rows:
            continue
        groups = assign_to_key_groups(rows.column(KEY), max_parallelism)
        order = np.argsort(groups, kind="stable")
        rows, groups = rows.take(pa.array(order)), groups[order]
        values, starts = np.unique(groups, return_index=True)
        ends = [*starts[1:], len(groups)]
        for value, start, end in zip(values, starts, ends):
            buffered[int(value)].append(rows.slice(int(start), int(end - start)))
        size += rows.nbytes
        if size >= _FLUSH_BYTES:
            yield from _flush(buffered)
            size = 0
    yield from _flush(buffered)


def _flush(buffered: dict[int, list[pa.Table]]) -> Iterator[tuple[int, pa.Table]]:
    for key_group in sorted(buffered):
        yield key_group, pa.concat_tables(buffered[key_group]).combine_chunks()
    buffered.clear()


def _savepoint_of_latest(
    catalog: Catalog,
    config: StatecoreConfig,
    job: str,
    latest: RestorePoint,
    savepoint: str | None,
    progress: Progress,
) -> RestorePoint:
    """The savepoint of ``latest`` (the job's latest checkpoint, read under the rescale's lease)
    the rescale starts from: ``savepoint`` if it is of that checkpoint, else a new pin of it.

    A ``savepoint`` of an earlier checkpoint of the job means a run of the job completed
    between the savepoint and the rescale: the rescale pins the checkpoint that run left (under
    the lease it holds until it is done, so no other run completes meanwhile) and rescales that
    one, never the older state. A savepoint of another job, or of a checkpoint the job did not
    complete before its latest, is refused."""
    if savepoint is None:
        return record_pin(catalog, config, latest, reason="rescale", progress=progress)
    taken = savepoint_point(catalog, job, savepoint)
    if (taken.job, taken.checkpoint_id) == (job, latest.checkpoint_id):
        return taken
    if taken.job != job or not _completed_before(catalog, job, taken, latest):
        raise ConfigError(
            f"rescale {job}: savepoint {savepoint} is of {taken.label}, not of the latest "
            f"checkpoint {latest.checkpoint_id} nor of an earlier one of the job; take a new one"
        )
    progress(
        f"rescale {job}: savepoint {savepoint} is of checkpoint {taken.checkpoint_id}, but "
        f"checkpoint {latest.checkpoint_id} completed since (a run of the job); it is kept, "
        f"and checkpoint {latest.checkpoint_id} is pinned and rescaled"
    )
    return record_pin(catalog, config, latest, reason="rescale", progress=progress)


def _completed_before(
    catalog: Catalog, job: str, earlier: RestorePoint, latest: RestorePoint
) -> bool:
    """Whether ``earlier`` is a checkpoint ``job`` completed before ``latest``."""
    if earlier.checkpoint_id is None or latest.checkpoint_id is None:
        return False
    if catalog.checkpoint_status(job, earlier.checkpoint_id) not in (
        CheckpointStatus.COMPLETED,
        CheckpointStatus.EXPIRED,
    ):
        return False
    before = catalog.get_checkpoint(job, earlier.checkpoint_id).completed_at
    after = catalog.get_checkpoint(job, latest.checkpoint_id).completed_at
    return before is not None and after is not None and before < after


def rescale(
    config: StatecoreConfig,
    catalog: Catalog,
    job: str,
    *,
    parallelism: int,
    max_parallelism: int | None = None,
    savepoint: str | None = None,
    progress: Progress = silent,
) -> RescaleResult:
    """Rescale ``job`` to ``parallelism`` (and ``max_parallelism``, when given and different).

    ``savepoint`` is a savepoint (name or folder) of the job's latest checkpoint taken just
    before (e.g. by the DAG's savepoint task); without it, the checkpoint is pinned. A job
    without a completed checkpoint has no state: only its parallelism changes.
    """
    record = catalog.get_job(job)
    target = check_rescale(record, parallelism, max_parallelism)
    with maintenance_lock(catalog, job, "rescale", wait=config.lease_wait) as lease:
        roll_forward_first(
            "rescale", catalog, job, lease.fence, warehouse=config.warehouse, progress=progress
        )
        latest = catalog.latest_checkpoint(job)
        current_max = latest.max_parallelism if latest else record.max_parallelism
        base: dict[str, Any] = {
            "job": job,
            "parallelism_before": record.parallelism,
            "parallelism": parallelism,
            "max_parallelism_before": current_max,
            "max_parallelism": target,
        }
        if latest is None:
            lease.check()
            catalog.set_job_parallelism(job, parallelism=parallelism, max_parallelism=target)
            progress(f"rescale {job}: no checkpoint yet, parallelism set to {parallelism}")
            return RescaleResult(
                **base,
                savepoint=None,
                savepoint_checkpoint_id=None,
                rewritten_savepoint=None,
                checkpoint_id=None,
                keyed_bytes_rewritten=0,
            )
        point = checkpoint_point(catalog, job)
        taken = _savepoint_of_latest(catalog, config, job, point, savepoint, progress)
        if target == current_max:
            lease.check()
            catalog.set_job_parallelism(job, parallelism=parallelism, max_parallelism=target)
            progress(
                f"rescale {job}: parallelism {record.parallelism} -> {parallelism}; the next "
                "run restores the new key-group ranges"
            )
            return RescaleResult(
                **base,
                savepoint=taken.savepoint or taken.name,
                savepoint_checkpoint_id=taken.checkpoint_id,
                rewritten_savepoint=None,
                checkpoint_id=None,
                keyed_bytes_rewritten=0,
            )
        progress(f"rescale {job}: max parallelism {current_max} -> {target}: rewriting key groups")
        regrouped = write_savepoint(
            catalog,
            config,
            point,
            reason="max-parallelism",
            rewrite=regroup_key_groups(target),
            max_parallelism=target,
            progress=progress,
        )
        checkpoint = import_point(
            config, catalog, regrouped, lease=lease, parallelism=parallelism, progress=progress
        )
        rewritten = sum(
            t.bytes for t in regrouped.tables if _has_keys(table_layout(t.path, t.version))
        )
        return RescaleResult(
            **base,
            savepoint=taken.savepoint or taken.name,
            savepoint_checkpoint_id=taken.checkpoint_id,
            rewritten_savepoint=regrouped.savepoint,
            checkpoint_id=checkpoint.checkpoint_id,
            keyed_bytes_rewritten=rewritten,
        )


def _by_table(sums: list[TableChecksum]) -> dict[str, TableChecksum]:
    return {f"{c.operator}/{c.table_kind}/{c.state}": c for c in sums}


def _totals(checksum: TableChecksum | None) -> str:
    if checksum is None:
        return "missing"
    return f"{checksum.rows} rows, {checksum.keys} keys, checksum {checksum.checksum}"


def verify_rescale(
    catalog: Catalog,
    job: str,
    *,
    savepoint: str,
    parallelism: int,
    max_parallelism: int,
    checkpoint_id: int | None = None,
) -> RescaleCheck:
    """Check that rescaling ``job`` to ``parallelism`` and ``max_parallelism`` kept its state.

    ``savepoint`` is the savepoint (name or folder) taken just before the rescale; every table of it
    must have the same rows, keys and checksum as in ``checkpoint_id``, the checkpoint the rescale
    left as the job's latest (default: the job's latest now; a run of the job that completed
    since has other state, rightly), and the job must be at the given parallelism and max
    parallelism. Raises
    :class:`~statecore.errors.StateMismatchError` naming the job, the checkpoint and each state that
    differs.
    """
    before_point = savepoint_point(catalog, job, savepoint)
    if before_point.job != job:
        raise ConfigError(
            f"verify rescale of job {job!r}: savepoint {savepoint} is of job {before_point.job!r}"
        )
    record = catalog.get_job(job)
    after_point = checkpoint_point(catalog, job, checkpoint_id)
    at = (record.parallelism, record.max_parallelism, after_point.max_parallelism)
    if at != (parallelism, max_parallelism, max_parallelism):
        raise StateMismatchError(
            f"job {job!r} is at parallelism {record.parallelism} and max parallelism "
            f"{record.max_parallelism} (its checkpoint {after_point.checkpoint_id}: "
            f"{after_point.max_parallelism}), not at {parallelism} and {max_parallelism} as "
            "rescaled"
        )
    before = _by_table(checksums(before_point))
    after = _by_table(checksums(after_point))
    differ = sorted(
        name for name in before.keys() | after.keys() if before.get(name) != after.get(name)
    )
    if differ:
        details = "; ".join(
            f"{name}: before {_totals(before.get(name))}, after {_totals(after.get(name))}"
            for name in differ
        )
        raise StateMismatchError(
            f"job {job!r}: the state of checkpoint {after_point.checkpoint_id} differs from "
            f"{before_point.label} it was rescaled from: {details}"
        )
    return RescaleCheck(
        job=job,
        checkpoint_id=after_point.checkpoint_id,
        savepoint=savepoint,
        parallelism=parallelism,
        max_parallelism=max_parallelism,
        states=len(after),
        keys=sum(c.keys or 0 for c in after.values()),
        rows=sum(c.rows for c in after.values()),
    )
