"""What a scheduled or triggered batch run should do before it starts Spark: run, skip with a
reason, or refuse a param it cannot honour.

A run for an interval whose input is not there is skipped ("no input at ..."), so unpausing a
DAG or a schedule running ahead of its data produces no failed run. A run whose checkpoint is
already complete is a no-op and says so; asked for a parallelism other than the one that
checkpoint was taken at, it is refused (the checkpoint cannot be redone; a rescale changes the
parallelism for the runs after it).

>>> plan = RunPlan(job="clickstream", checkpoint_id=20260102, action=SKIP, reason="no input")
>>> plan.runs
False
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from statecore.catalog import Catalog, CheckpointStatus
from statecore.errors import ConfigError

__all__ = ["RUN", "SKIP", "RunPlan", "input_exists", "plan_batch_run"]

RUN = "run"
SKIP = "skip"


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    job: str
    checkpoint_id: int
    action: str  # RUN or SKIP
    reason: str

    @property
    def runs(self) -> bool:
        return self.action == RUN


def input_exists(uri: str) -> bool:
    """Whether ``uri`` (a local path or a URI pyarrow's file systems read, e.g. ``s3://``) names
    an existing file or folder."""
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, ValueError):
        fs, path = pafs.LocalFileSystem(), uri
    return bool(fs.get_file_info(path).type != pafs.FileType.NotFound)


def plan_batch_run(
    catalog: Catalog,
    *,
    job: str,
    checkpoint_id: int,
    input_uri: str | None = None,
    parallelism: int | None = None,
) -> RunPlan:
    """Skip a run whose input is missing or whose checkpoint is complete (a no-op); refuse a
    ``parallelism`` that a complete checkpoint was not taken at (:class:`ConfigError`)."""
    status = catalog.checkpoint_status(job, checkpoint_id) if catalog.has_job(job) else None
    if status in (CheckpointStatus.COMPLETED, CheckpointStatus.EXPIRED):
        done = catalog.get_checkpoint(job, checkpoint_id)
        if parallelism is not None and parallelism != done.parallelism:
            raise ConfigError(
                f"job {job!r}: checkpoint {checkpoint_id} is already complete at parallelism "
                f"{done.parallelism}, so parallelism {parallelism} cannot apply to it; rescale "
                "the job (the rescale DAG or `statecore rescale`) for the runs after it"
            )
        return RunPlan(
            job=job,
            checkpoint_id=checkpoint_id,
            action=SKIP,
            reason=f"no-op: checkpoint {checkpoint_id} of {job} is already complete",
        )
    if input_uri is not None and not input_exists(input_uri):
        return RunPlan(
            job=job,
            checkpoint_id=checkpoint_id,
            action=SKIP,
            reason=f"no input at {input_uri} (yet): nothing to process for checkpoint "
            f"{checkpoint_id}",
        )
    return RunPlan(job=job, checkpoint_id=checkpoint_id, action=RUN, reason="input is there")
