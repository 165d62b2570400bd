"""Rescale a job: another parallelism, within or past its max parallelism.

Within the max parallelism a rescale is a catalog change: it validates, takes a savepoint and sets
the job's parallelism; the next run restores the key-group ranges of the new parallelism and
redistributes operator state. No keyed-state byte is rewritten.

Past the max parallelism the key groups themselves change: every table partitioned by key group
that holds a ``key`` column (keyed state and timers) is rewritten into a new savepoint with each
row's key group recomputed from its key (:func:`statecore.keygroups_arrow.assign_to_key_groups`,
a batch at a time); operator state is copied as it is. That savepoint becomes the job's latest
checkpoint, at the new max parallelism. Flink needs a hand-written State Processor job for this.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from statecore.catalog import Catalog, JobRecord, TableVersion
from statecore.config import StatecoreConfig
from statecore.errors import ConfigError
from statecore.keygroups import UPPER_BOUND_MAX_PARALLELISM
from statecore.keygroups_arrow import assign_to_key_groups
from statecore.maintenance import maintenance_lock
from statecore.progress import Progress, silent
from statecore.restore_point import checkpoint_point, load_savepoint
from statecore.savepoint import Rewrite, TableRewriter, import_point, write_savepoint
from statecore.snapshot.maintenance import TableLayout, read_files, table_files, table_layout

__all__ = ["RescaleResult", "check_rescale", "regroup_key_groups", "rescale"]

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
    savepoint: str | None  # the savepoint taken before anything changed
    rewritten_savepoint: str | None  # past the max parallelism: the state with new key groups
    checkpoint_id: int | None  # past the max parallelism: the job's new latest checkpoint
    keyed_bytes_rewritten: int

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
        hint = "" if max_parallelism is not None else (
            "; to go past it, pass a larger --max-parallelism (the state is rewritten with new "
            "key groups)")
        raise ConfigError(
            f"job {job.name!r}: parallelism {parallelism} is above the max parallelism "
            f"{target}{hint}"
        )
    return target


def _has_keys(layout: TableLayout) -> bool:
    return layout.partition == KEY_GROUP and KEY in layout.rows_schema.names


def regroup_key_groups(max_parallelism: int) -> TableRewriter:
    """A :data:`~statecore.savepoint.TableRewriter` that recomputes every row's key group for
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

    ``savepoint`` is a savepoint of the job's latest checkpoint taken just before (e.g. by the
    DAG's savepoint task); without it, one is taken. A job without a completed checkpoint has
    no state: only its parallelism changes.
    """
    record = catalog.get_job(job)
    target = check_rescale(record, parallelism, max_parallelism)
    with maintenance_lock(catalog, job, "rescale"):
        latest = catalog.latest_checkpoint(job)
        current_max = latest.max_parallelism if latest else record.max_parallelism
        base: dict[str, Any] = {
            "job": job, "parallelism_before": record.parallelism, "parallelism": parallelism,
            "max_parallelism_before": current_max, "max_parallelism": target}
        if latest is None:
            catalog.set_job_parallelism(job, parallelism=parallelism, max_parallelism=target)
            progress(f"rescale {job}: no checkpoint yet, parallelism set to {parallelism}")
            return RescaleResult(**base, savepoint=None, rewritten_savepoint=None,
                                 checkpoint_id=None, keyed_bytes_rewritten=0)
        point = checkpoint_point(catalog, job)
        if savepoint is not None:
            taken = load_savepoint(savepoint)
            if (taken.job, taken.checkpoint_id) != (job, point.checkpoint_id):
                raise ConfigError(
                    f"rescale {job}: savepoint {savepoint} is of {taken.label}, not of the latest "
                    f"checkpoint {point.checkpoint_id}; take a new one"
                )
        else:
            taken = write_savepoint(catalog, config, point, reason="rescale", progress=progress)
        if target == current_max:
            catalog.set_job_parallelism(job, parallelism=parallelism, max_parallelism=target)
            progress(f"rescale {job}: parallelism {record.parallelism} -> {parallelism}; the next "
                     "run restores the new key-group ranges")
            return RescaleResult(**base, savepoint=taken.savepoint, rewritten_savepoint=None,
                                 checkpoint_id=None, keyed_bytes_rewritten=0)
        progress(f"rescale {job}: max parallelism {current_max} -> {target}: rewriting key groups")
        regrouped = write_savepoint(catalog, config, point, reason="max-parallelism",
                                    rewrite=regroup_key_groups(target), max_parallelism=target,
                                    progress=progress)
        checkpoint = import_point(config, catalog, regrouped, parallelism=parallelism,
                                  progress=progress)
        rewritten = sum(t.bytes for t in regrouped.tables
                        if _has_keys(table_layout(t.path, t.version)))
        return RescaleResult(**base, savepoint=taken.savepoint,
                             rewritten_savepoint=regrouped.savepoint,
                             checkpoint_id=checkpoint.checkpoint_id,
                             keyed_bytes_rewritten=rewritten)
