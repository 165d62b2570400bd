"""Restore-time estimates: how long each subtask of a target parallelism will take to restore.

A run records, per subtask, the bytes it read to restore and the seconds it took (the
checkpoint's ``metrics["restore"]``, see :mod:`statecore.spark.keyed`). From the job's recent
restores this fits ``seconds = fixed + bytes / throughput`` (Theil–Sen; a plain ratio when
the restores had one size), and applies it to what each subtask of the target parallelism would
read: the bytes of its key groups in every keyed state and the timers (the catalog keeps them
per key group), plus every operator-state file. Without a measured restore of the job it uses
:data:`DEFAULT_BYTES_PER_SECOND` and says so. ``statecore rescale --dry-run`` and
``statecore check --parallelism`` print it; ``benchmarks/estimate.py`` compares it with real
restores.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

from statecore.catalog import Catalog, CheckpointStatus
from statecore.checkpoint.points import RestorePoint
from statecore.keygroups import check_parallelism, compute_key_group_range_for_operator_index

__all__ = [
    "DEFAULT_BYTES_PER_SECOND",
    "RestoreEstimate",
    "RestoreModel",
    "SubtaskEstimate",
    "estimate_restore",
    "restore_model",
]

DEFAULT_BYTES_PER_SECOND = 20_000_000
"""The throughput assumed before a job measured any restore (Parquet into Python objects)."""

_RECENT = 20
"""Checkpoints whose restores the model is fitted on (the latest completed ones)."""


@dataclass(frozen=True)
class RestoreModel:
    """``seconds = fixed_seconds + bytes / bytes_per_second``, fitted on ``samples`` restores."""

    fixed_seconds: float
    bytes_per_second: float
    samples: int

    @property
    def basis(self) -> str:
        if self.samples == 0:
            return f"default {DEFAULT_BYTES_PER_SECOND / 1e6:g} MB/s (no restore measured yet)"
        return (
            f"{self.samples} measured subtask restore(s): "
            f"{self.bytes_per_second / 1e6:.1f} MB/s + {self.fixed_seconds:.3f} s"
        )

    def seconds(self, size: int) -> float:
        return self.fixed_seconds + size / self.bytes_per_second


@dataclass(frozen=True)
class SubtaskEstimate:
    subtask: int
    key_groups: str
    bytes: int
    estimated_seconds: float


@dataclass(frozen=True)
class RestoreEstimate:
    """The estimate for every subtask of ``parallelism`` restoring ``point``."""

    job: str
    point: str
    parallelism: int
    max_parallelism: int
    subtasks: tuple[SubtaskEstimate, ...]
    model: RestoreModel

    @property
    def slowest(self) -> SubtaskEstimate:
        return max(self.subtasks, key=lambda s: s.estimated_seconds)

    def rows(self) -> list[dict[str, Any]]:
        slowest = self.slowest.subtask
        return [
            {**asdict(s), "slowest": s.subtask == slowest, "basis": self.model.basis}
            for s in self.subtasks
        ]

    def summary(self) -> str:
        s = self.slowest
        return (
            f"restoring {self.point} at parallelism {self.parallelism}: slowest subtask "
            f"{s.subtask} (key groups {s.key_groups}, {s.bytes:,} bytes) about "
            f"{s.estimated_seconds:.2f} s; from {self.model.basis}"
        )


def restore_model(catalog: Catalog, job: str) -> RestoreModel:
    """The restore model of ``job``, fitted on the subtask restores of its recent checkpoints
    that read something (a task that reused local state read nothing)."""
    completed = catalog.list_checkpoints(job, status=CheckpointStatus.COMPLETED, last=_RECENT)
    samples = [
        (int(t["bytes"]), float(t["seconds"]))
        for c in completed
        for t in c.metrics.get("restore", ())
        if int(t.get("bytes", 0)) > 0
    ]
    return fit(samples)


def fit(samples: list[tuple[int, float]]) -> RestoreModel:
    """``seconds = fixed + bytes / throughput`` through the samples, robustly (Theil–Sen: the
    slope is the median of the slopes between pairs of restores of different sizes, the fixed
    cost the median of what each restore leaves over), so that one restore slowed by something
    else (a pause of the machine, another task) does not skew the model as it skews least
    squares. A fixed cost ≥ 0 and a positive throughput; a plain ratio through 0 when the
    restores had one size."""
    if not samples:
        return RestoreModel(0.0, float(DEFAULT_BYTES_PER_SECOND), 0)
    n = len(samples)
    slopes = [
        (s2 - s1) / (b2 - b1)
        for i, (b1, s1) in enumerate(samples)
        for b2, s2 in samples[i + 1 :]
        if b2 != b1
    ]
    slope = statistics.median(slopes) if slopes else 0.0
    fixed = statistics.median(s - slope * b for b, s in samples) if slope > 0 else 0.0
    if slope <= 0 or fixed < 0:  # one size, or noise: a plain ratio through 0
        fixed = 0.0
        slope = statistics.median(s / b for b, s in samples)
    return RestoreModel(fixed, 1 / slope if slope > 0 else float(DEFAULT_BYTES_PER_SECOND), n)


def estimate_restore(
    catalog: Catalog,
    point: RestorePoint,
    parallelism: int,
    *,
    max_parallelism: int | None = None,
) -> RestoreEstimate:
    """Each subtask's restore time for ``point`` at ``parallelism`` (and ``max_parallelism``,
    when it changes: the key groups are rewritten, so each subtask gets its share of them)."""
    target_max = max_parallelism or point.max_parallelism
    check_parallelism(parallelism, target_max)
    per_key_group: dict[int, int] = {}
    shared = 0  # read by every subtask: operator state
    for table in point.tables:
        if table.table_kind == "operator":
            shared += table.bytes
            continue
        for kg, (_, size) in table.key_groups.items():
            per_key_group[kg] = per_key_group.get(kg, 0) + size
    keyed_total = sum(per_key_group.values())
    model = restore_model(catalog, point.job)
    subtasks = []
    for index in range(parallelism):
        kgs = compute_key_group_range_for_operator_index(target_max, parallelism, index)
        if target_max == point.max_parallelism:
            size = sum(per_key_group.get(kg, 0) for kg in kgs)
        else:  # the rewrite spreads the keys over the new key groups: a proportional share
            size = keyed_total * len(kgs) // target_max
        size += shared
        subtasks.append(
            SubtaskEstimate(
                subtask=index,
                key_groups=f"{kgs.start}..{kgs.end}",
                bytes=size,
                estimated_seconds=round(model.seconds(size), 3),
            )
        )
    return RestoreEstimate(
        job=point.job,
        point=point.label,
        parallelism=parallelism,
        max_parallelism=target_max,
        subtasks=tuple(subtasks),
        model=model,
    )
