"""The commit protocol without Spark: real output tables, real state tables, a real coordinator
on a SQLite catalog; a failure injected at every point (each participant failing before and
after its commit, the catalog failing to complete). Every completed checkpoint's effects are
there exactly once and a failed one's nowhere, also after the next run retried it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from statecore.catalog import Catalog, CheckpointStatus
from statecore.checkpoint.coordinator import CheckpointCoordinator
from statecore.checkpoint.lock import hold_lease
from statecore.checkpoint.participants import CommitParticipant, OutputParticipant
from statecore.checkpoint.state_tables import StateTables
from statecore.config import StatecoreConfig
from statecore.descriptors import ValueStateDescriptor
from statecore.errors import ConcurrentRunError
from statecore.runtime.task import StateSnapshotResult
from statecore.snapshot import Fence, write_key_group_file
from statecore.snapshot.output import OutputTable, OutputWriter
from statecore.types import schema_to_text

JOB, OPERATOR, STATE = "orders", "main", "total"
STATE_ROWS = pa.schema(
    [("key", pa.string(), False), ("namespace", pa.string(), False), ("value", pa.int64())]
)
OUT_ROWS = pa.schema([("value", pa.int64())])
LATE = 100  # a checkpoint's late row is its id plus this


class Injected(Exception):
    """The failure a test injects."""


class Run:
    """One run's side of a checkpoint, as the Spark runner does it: its own lease, what a
    writer that is gone left resolved, the tasks' files written, then the coordinator's
    commit. State: key ``k<id>`` holds ``id``; output: row ``id``; late data: ``id + LATE``."""

    def __init__(self, config: StatecoreConfig, catalog: Catalog, root: Path) -> None:
        self.config, self.catalog = config, catalog
        self.output = OutputTable(str(root / "out"), OUT_ROWS, app_id=f"statecore:{JOB}/main")
        self.late = OutputTable(str(root / "late"), OUT_ROWS, app_id=f"statecore:{JOB}/late")

    @contextmanager
    def coordinator(self) -> Iterator[CheckpointCoordinator]:
        with hold_lease(self.catalog, JOB, "run", timeout=timedelta(minutes=1)) as lease:
            coordinator = CheckpointCoordinator(
                self.config, self.catalog, job=JOB, operator=OPERATOR, lease=lease
            )
            coordinator.resolve_abandoned(self.sinks())
            yield coordinator

    def sinks(
        self, checkpoint_id: int | None = None, wrap: Callable[[Any], Any] = lambda p: p
    ) -> list[CommitParticipant]:
        files: dict[str, list[Any]] = {"output": [], "late-data": []}
        if checkpoint_id is not None:
            for kind, table, value in (
                ("output", self.output, checkpoint_id),
                ("late-data", self.late, checkpoint_id + LATE),
            ):
                writer = OutputWriter(table.uri, OUT_ROWS, checkpoint_id=checkpoint_id, subtask=0)
                writer.write(pa.record_batch({"value": [value]}, schema=OUT_ROWS))
                files[kind] = [writer.close()]
        return [
            wrap(OutputParticipant(self.output, files["output"], kind="output")),
            wrap(OutputParticipant(self.late, files["late-data"], kind="late-data")),
        ]

    def checkpoint(
        self, checkpoint_id: int, wrap: Callable[[Any], Any] = lambda p: p
    ) -> CheckpointStatus:
        with self.coordinator() as coordinator:
            planned = coordinator.plan(
                checkpoint_id, parallelism=1, max_parallelism=128, default_parallelism=1
            )
            if planned.replayed:
                return CheckpointStatus.COMPLETED
            key_group = checkpoint_id % 128
            rows = pa.table(
                {"key": [f"k{checkpoint_id}"], "namespace": [""], "value": [checkpoint_id]},
                schema=STATE_ROWS,
            )
            written = write_key_group_file(
                coordinator.table_uri(STATE), key_group, rows, checkpoint_id=checkpoint_id,
                subtask=0,
            )  # fmt: skip
            result = StateSnapshotResult(
                state=STATE,
                schema=schema_to_text(STATE_ROWS),
                descriptor=ValueStateDescriptor(STATE, int).describe(),
                changed_key_groups=(key_group,),
                files=(written,),
            )
            record = coordinator.commit(
                planned, [result], participants=self.sinks(checkpoint_id, wrap)
            )
            return record.status


class Failing:
    """A participant that fails at ``point`` (``check``, ``before`` or ``after`` its commit)."""

    def __init__(self, inner: CommitParticipant, point: str) -> None:
        self.inner, self.point = inner, point

    @property
    def name(self) -> str:
        return self.inner.name

    def check(self) -> None:
        if self.point == "check":
            raise Injected(f"{self.name}: check")
        self.inner.check()

    def commit(self, checkpoint_id: int, fence: Fence | None) -> bool:
        if self.point == "before":
            raise Injected(f"{self.name}: before its commit")
        committed = self.inner.commit(checkpoint_id, fence)
        if self.point == "after":
            raise Injected(f"{self.name}: after its commit")
        return committed

    def roll_back(self, completed: int | None, fence: Fence | None) -> None:
        self.inner.roll_back(completed, fence)


@pytest.fixture
def config(tmp_path: Path) -> StatecoreConfig:
    home = tmp_path / "statecore"
    return StatecoreConfig.resolve(env={"STATECORE_HOME": str(home)})


@pytest.fixture
def catalog(config: StatecoreConfig) -> Iterator[Catalog]:
    opened = Catalog.connect(config.catalog_url)
    opened.ensure_job(JOB, parallelism=1, max_parallelism=128)
    yield opened
    opened.close()


def _values(uri: str) -> list[int]:
    return sorted(DeltaTable(uri).to_pyarrow_table().column("value").to_pylist())


def _state(config: StatecoreConfig) -> dict[str, int]:
    uri = f"{config.warehouse}/{JOB}/{OPERATOR}/keyed/{STATE}"
    data = DeltaTable(uri).to_pyarrow_table()
    return dict(zip(data.column("key").to_pylist(), data.column("value").to_pylist(), strict=True))


def _assert_exactly(run: Run, config: StatecoreConfig, completed: list[int]) -> None:
    """The tables hold the effects of the ``completed`` checkpoints, each once, and none other."""
    assert _values(run.output.uri) == completed
    assert _values(run.late.uri) == [c + LATE for c in completed]
    assert _state(config) == {f"k{c}": c for c in completed}
    done = [
        c.checkpoint_id
        for c in run.catalog.list_checkpoints(JOB)
        if c.status is CheckpointStatus.COMPLETED
    ]
    assert sorted(done) == completed


PARTICIPANT_FAILURES = [
    (participant, point)
    for participant in ("output", "late-data")
    for point in ("check", "before", "after")
]


@pytest.mark.parametrize(("failing", "point"), PARTICIPANT_FAILURES)
def test_participant_failure_leaves_nothing_and_the_retry_commits_once(
    config: StatecoreConfig, catalog: Catalog, tmp_path: Path, failing: str, point: str
) -> None:
    run = Run(config, catalog, tmp_path)
    assert run.checkpoint(1) is CheckpointStatus.COMPLETED

    def wrap(participant: Any) -> Any:
        return Failing(participant, point) if participant.kind == failing else participant

    with pytest.raises(Injected, match=f"{failing} table .*: {point}"):
        run.checkpoint(2, wrap)
    assert catalog.get_checkpoint(JOB, 2).status is CheckpointStatus.FAILED
    _assert_exactly(run, config, [1])
    assert run.checkpoint(2) is CheckpointStatus.COMPLETED  # the retry
    assert run.checkpoint(2) is CheckpointStatus.COMPLETED  # a replay: a no-op
    _assert_exactly(run, config, [1, 2])


@pytest.mark.parametrize("point", ["before", "after"])
def test_participant_state_tables_failing_roll_back_the_sinks(
    config: StatecoreConfig,
    catalog: Catalog,
    tmp_path: Path,
    point: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = Run(config, catalog, tmp_path)
    assert run.checkpoint(1) is CheckpointStatus.COMPLETED
    real = StateTables.commit

    def commit(self: StateTables, checkpoint_id: int, fence: Fence | None) -> bool:
        if point == "before":
            raise Injected("state tables: before their commit")
        real(self, checkpoint_id, fence)
        raise Injected("state tables: after their commit")

    monkeypatch.setattr(StateTables, "commit", commit)
    with pytest.raises(Injected, match=f"state tables: {point}"):
        run.checkpoint(2)
    monkeypatch.setattr(StateTables, "commit", real)
    assert catalog.get_checkpoint(JOB, 2).status is CheckpointStatus.FAILED
    _assert_exactly(run, config, [1])
    assert run.checkpoint(2) is CheckpointStatus.COMPLETED
    _assert_exactly(run, config, [1, 2])


@pytest.mark.parametrize("method", ["register_states", "complete_checkpoint"])
def test_participant_catalog_failing_to_complete_rolls_every_participant_back(
    config: StatecoreConfig,
    catalog: Catalog,
    tmp_path: Path,
    method: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = Run(config, catalog, tmp_path)
    assert run.checkpoint(1) is CheckpointStatus.COMPLETED

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise Injected(f"the catalog: {method}")

    monkeypatch.setattr(catalog, method, broken)
    with pytest.raises(Injected, match=method):
        run.checkpoint(2)
    monkeypatch.undo()
    assert catalog.get_checkpoint(JOB, 2).status is CheckpointStatus.FAILED
    _assert_exactly(run, config, [1])
    assert run.checkpoint(2) is CheckpointStatus.COMPLETED
    assert run.checkpoint(3) is CheckpointStatus.COMPLETED
    _assert_exactly(run, config, [1, 2, 3])


def test_participant_the_very_first_checkpoint_failing_leaves_no_output(
    config: StatecoreConfig, catalog: Catalog, tmp_path: Path
) -> None:
    run = Run(config, catalog, tmp_path)
    with pytest.raises(Injected):
        run.checkpoint(1, lambda p: Failing(p, "after") if p.kind == "late-data" else p)
    assert _values(run.output.uri) == [] and _values(run.late.uri) == []
    assert run.checkpoint(1) is CheckpointStatus.COMPLETED
    _assert_exactly(run, config, [1])


def test_participant_concurrent_run_error_rolls_nothing_back(
    config: StatecoreConfig, catalog: Catalog, tmp_path: Path
) -> None:
    """A writer whose lease was taken over leaves what it committed to the new holder."""
    run = Run(config, catalog, tmp_path)
    assert run.checkpoint(1) is CheckpointStatus.COMPLETED
    rolled_back: list[str] = []

    class Fenced(Failing):
        def commit(self, checkpoint_id: int, fence: Fence | None) -> bool:
            self.inner.commit(checkpoint_id, fence)
            raise ConcurrentRunError("the lease was taken over")

        def roll_back(self, completed: int | None, fence: Fence | None) -> None:
            rolled_back.append(self.name)

    with pytest.raises(ConcurrentRunError):
        run.checkpoint(2, lambda p: Fenced(p, "after") if p.kind == "late-data" else p)
    assert rolled_back == []
    assert _values(run.output.uri) == [1, 2]  # the next holder rolls it back
    assert run.checkpoint(3) is CheckpointStatus.COMPLETED
    _assert_exactly(run, config, [1, 3])
