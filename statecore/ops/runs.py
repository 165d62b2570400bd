"""What a scheduled or triggered batch run should do before it starts Spark: run, skip with a
reason, or refuse a param it cannot honour, or a gap it would leave in the job's state.

A run for an interval whose input is not there is skipped ("no input at ..."), so unpausing a
DAG or a schedule running ahead of its data produces no failed run. A run whose checkpoint is
already complete is a no-op and says so; asked for a parallelism other than the one that
checkpoint was taken at, it is refused (the checkpoint cannot be redone; a rescale changes the
parallelism for the runs after it).

Stateful intervals run in order, or not at all. Checkpoint ids increase, so a day the job went
past can never be processed afterwards: a run that would complete a day while an earlier day is
neither completed nor skipped on purpose is refused (:class:`CheckpointGapError`, naming the
days). An earlier day is missing when it has a failed (or killed) checkpoint, or when its input
is there now; a day whose input is not there has nothing to miss ("no input" is a reason, a
failure is not). A day the user decides not to process is recorded with its reason
(``statecore checkpoints skip``, :meth:`Catalog.skip_checkpoint`), and runs then go past it.

>>> plan = RunPlan(job="clickstream", checkpoint_id=20260102, action=SKIP, reason="no input")
>>> plan.runs
False
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

import pyarrow as pa
import pyarrow.fs as pafs

from statecore.catalog import Catalog, CheckpointStatus
from statecore.errors import CheckpointGapError, ConfigError

__all__ = [
    "RUN",
    "SKIP",
    "RunPlan",
    "check_day_order",
    "checkpoint_day",
    "day_checkpoint_id",
    "input_days",
    "input_exists",
    "missing_days",
    "plan_batch_run",
    "plan_daily_run",
]

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


def day_checkpoint_id(day: date) -> int:
    """A daily job's checkpoint id for ``day``: ``YYYYMMDD``.

    >>> day_checkpoint_id(date(2026, 1, 5))
    20260105
    """
    return day.year * 10_000 + day.month * 100 + day.day


def checkpoint_day(checkpoint_id: int) -> date | None:
    """The day of a daily job's checkpoint id (``YYYYMMDD``), ``None`` for any other id.

    >>> checkpoint_day(20260105), checkpoint_day(7)
    (datetime.date(2026, 1, 5), None)
    """
    try:
        return date(checkpoint_id // 10_000, checkpoint_id // 100 % 100, checkpoint_id % 100)
    except ValueError:
        return None


_PARTITION = re.compile(r"date=(\d{4}-\d{2}-\d{2})$")


def input_days(input_root: str) -> list[date]:
    """The days with a ``date=YYYY-MM-DD`` partition under ``input_root`` (a folder or a URI
    pyarrow's file systems read), in order: one listing, however many days."""
    try:
        fs, path = pafs.FileSystem.from_uri(input_root)
    except (pa.ArrowInvalid, ValueError):
        fs, path = pafs.LocalFileSystem(), input_root
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    except (FileNotFoundError, NotADirectoryError):
        return []
    days = []
    for info in infos:
        if (found := _PARTITION.search(info.path.rstrip("/"))) is not None:
            try:
                days.append(date.fromisoformat(found.group(1)))
            except ValueError:
                continue
    return sorted(days)


def missing_days(catalog: Catalog, *, job: str, day: date, input_root: str) -> list[date]:
    """The days before ``day`` that a run of ``day`` would leave out of ``job``'s state for
    good: after its latest completed checkpoint, neither completed nor skipped on purpose, and
    with a failed (or killed) checkpoint or input under ``input_root``. A job without a
    completed checkpoint misses only its failed days (where its first day is is not known)."""
    if not catalog.has_job(job):
        return []
    this = day_checkpoint_id(day)
    latest = catalog.highest_completed_id(job)
    after = checkpoint_day(latest) if latest is not None else None
    if latest is not None and after is None:
        return []  # not a daily job's ids
    unfinished = {
        record.checkpoint_id
        for status in (CheckpointStatus.FAILED, CheckpointStatus.IN_PROGRESS)
        for record in catalog.list_checkpoints(
            job, status=status, with_tables=False, with_sizes=False, after=latest
        )
        if record.checkpoint_id < this
    }
    missing = {d for i in unfinished if (d := checkpoint_day(i)) is not None}
    if after is not None:
        missing.update(d for d in input_days(input_root) if after < d < day)
    skipped = {s.checkpoint_id for s in catalog.skipped_checkpoints(job, above=latest, below=this)}
    return sorted(d for d in missing if day_checkpoint_id(d) not in skipped)


def check_day_order(catalog: Catalog, *, job: str, day: date, input_root: str) -> None:
    """Refuse a run of ``day`` that would leave earlier days out of ``job``'s state
    (:func:`missing_days`) with :class:`CheckpointGapError`, naming them and how to go on."""
    missing = missing_days(catalog, job=job, day=day, input_root=input_root)
    if not missing:
        return
    latest = catalog.highest_completed_id(job)
    shown = ", ".join(d.isoformat() for d in missing[:10])
    more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
    first = missing[0]
    raise CheckpointGapError(
        f"job {job!r}: checkpoint {day_checkpoint_id(day)} ({day.isoformat()}) would leave "
        f"{shown}{more} out of its state for good (checkpoint ids only increase; the latest "
        f"completed is {latest}): each of those days failed or has input under {input_root}, "
        "and none is completed or skipped. Run them first, in order (retry the failed run of "
        f"{first.isoformat()}; in Airflow, clear it), then this day; or, if a day is not to be "
        "processed, record why: `statecore checkpoints skip "
        f"{job} {day_checkpoint_id(first)} --reason '...'`"
    )


def plan_daily_run(
    catalog: Catalog,
    *,
    job: str,
    day: date,
    input_root: str,
    parallelism: int | None = None,
) -> RunPlan:
    """:func:`plan_batch_run` for ``day``'s checkpoint (``YYYYMMDD``) of a daily job whose
    input is ``input_root/date=YYYY-MM-DD``; a run that would leave earlier days out of the
    state is refused (:func:`check_day_order`)."""
    plan = plan_batch_run(
        catalog,
        job=job,
        checkpoint_id=day_checkpoint_id(day),
        input_uri=f"{input_root}/date={day.isoformat()}",
        parallelism=parallelism,
    )
    if plan.runs:
        check_day_order(catalog, job=job, day=day, input_root=input_root)
    return plan
