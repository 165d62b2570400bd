"""The commit protocol without Spark: real output tables, real state tables, a real coordinator
on a SQLite catalog; a failure injected at every point (an output sink's check, the state tables
failing before and after their commit, the catalog failing to complete, the output commit after
the completion). Every completed checkpoint's effects are there exactly once and a failed one's
nowhere, also after the next run retried it (or rolled its output forward)."""

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
from statecore.checkpoint.output_records import staged_output_folder
from statecore.checkpoint.outputs import OutputSink
from statecore.checkpoint.state_tables import StateTables
from statecore.config import StatecoreConfig
from statecore.descriptors import ValueStateDescriptor
from statecore.errors import ConcurrentRunError, OutputCommitPendingError
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
    writer that is gone left resolved, the tasks' files written (staged in the warehouse, as the
    runner has them; into the tables' folders with ``staged=False``, as statecore did before it
    staged output), then the coordinator's commit. State: key ``k<id>`` holds ``id``; output:
    row ``id``; late data: ``id + LATE``."""

    def __init__(
        self, config: StatecoreConfig, catalog: Catalog, root: Path | str, *, staged: bool = True
    ) -> None:
        self.config, self.catalog, self.staged = config, catalog, staged
        self.output = OutputTable(f"{root}/out", OUT_ROWS, app_id=f"statecore:{JOB}/main")
        self.late = OutputTable(f"{root}/late", OUT_ROWS, app_id=f"statecore:{JOB}/late")

    @contextmanager
    def coordinator(self) -> Iterator[CheckpointCoordinator]:
        with hold_lease(self.catalog, JOB, "run", timeout=timedelta(minutes=1)) as lease:
            coordinator = CheckpointCoordinator(
                self.config, self.catalog, job=JOB, operator=OPERATOR, lease=lease
            )
            coordinator.resolve_abandoned()
            yield coordinator

    def sinks(
        self, checkpoint_id: int | None = None, wrap: Callable[[Any], Any] = lambda p: p
    ) -> list[OutputSink]:
        files: dict[str, list[Any]] = {"output": [], "late-data": []}
        if checkpoint_id is not None:
            for kind, table, value in (
                ("output", self.output, checkpoint_id),
                ("late-data", self.late, checkpoint_id + LATE),
            ):
                staging = staged_output_folder(self.config.warehouse, JOB, checkpoint_id, kind)
                writer = OutputWriter(
                    table.uri,
                    OUT_ROWS,
                    checkpoint_id=checkpoint_id,
                    subtask=0,
                    staging=staging if self.staged else None,
                )
                writer.write(pa.record_batch({"value": [value]}, schema=OUT_ROWS))
                files[kind] = [writer.close()]
        return [
            wrap(OutputSink(self.output, files["output"], kind="output")),
            wrap(OutputSink(self.late, files["late-data"], kind="late-data")),
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
            record = coordinator.commit(planned, [result], outputs=self.sinks(checkpoint_id, wrap))
            return record.status


class Failing(OutputSink):
    """An output sink whose check fails."""

    def __init__(self, inner: OutputSink) -> None:
        super().__init__(inner.table, inner.files, kind=inner.kind)

    def check(self) -> None:
        raise Injected(f"{self.name}: check")


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


def _files(uri: str) -> set[str]:
    return {p.name for p in Path(uri).glob("*.parquet")}


@pytest.mark.parametrize("failing", ["output", "late-data"])
def test_participant_sink_check_failing_leaves_nothing_and_the_retry_commits_once(
    config: StatecoreConfig, catalog: Catalog, tmp_path: Path, failing: str
) -> None:
    run = Run(config, catalog, tmp_path)
    assert run.checkpoint(1) is CheckpointStatus.COMPLETED
    files = _files(run.output.uri) | _files(run.late.uri)

    def wrap(sink: OutputSink) -> OutputSink:
        return Failing(sink) if sink.kind == failing else sink

    with pytest.raises(Injected, match=f"{failing} table .*: check"):
        run.checkpoint(2, wrap)
    assert catalog.get_checkpoint(JOB, 2).status is CheckpointStatus.FAILED
    _assert_exactly(run, config, [1])
    assert _files(run.output.uri) | _files(run.late.uri) == files  # its files deleted
    assert run.checkpoint(2) is CheckpointStatus.COMPLETED  # the retry
    assert run.checkpoint(2) is CheckpointStatus.COMPLETED  # a replay: a no-op
    _assert_exactly(run, config, [1, 2])


@pytest.mark.parametrize("point", ["before", "after"])
def test_participant_state_tables_failing_leave_no_output(
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


@pytest.mark.parametrize("method", ["record_pending_outputs", "complete_checkpoint"])
def test_participant_catalog_failing_to_complete_leaves_no_output(
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
        run.checkpoint(1, lambda s: Failing(s) if s.kind == "late-data" else s)
    assert not Path(run.output.uri, "_delta_log").exists()
    assert not Path(run.late.uri, "_delta_log").exists()
    assert run.checkpoint(1) is CheckpointStatus.COMPLETED
    _assert_exactly(run, config, [1])


def test_participant_concurrent_run_error_commits_no_output(
    config: StatecoreConfig, catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer whose lease was taken over before its completion: its output is never
    committed, its state commits are the next holder's to resolve."""
    run = Run(config, catalog, tmp_path)
    assert run.checkpoint(1) is CheckpointStatus.COMPLETED

    def lost(*args: Any, **kwargs: Any) -> Any:
        raise ConcurrentRunError("the lease was taken over")

    monkeypatch.setattr(catalog, "complete_checkpoint", lost)
    with pytest.raises(ConcurrentRunError):
        run.checkpoint(2)
    monkeypatch.undo()
    assert _values(run.output.uri) == [1]
    assert run.checkpoint(3) is CheckpointStatus.COMPLETED
    _assert_exactly(run, config, [1, 3])


def _output_commit_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: OutputTable, *args: Any, **kwargs: Any) -> bool:
        raise Injected(f"the commit to {self.uri}")

    monkeypatch.setattr(OutputTable, "commit", broken)


@pytest.mark.parametrize("by", ["next run", "replay", "catalog recover"])
def test_roll_forward_an_output_commit_that_failed_after_the_completion(
    config: StatecoreConfig,
    catalog: Catalog,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    by: str,
) -> None:
    run = Run(config, catalog, tmp_path)
    assert run.checkpoint(1) is CheckpointStatus.COMPLETED
    _output_commit_fails(monkeypatch)
    with pytest.raises(OutputCommitPendingError, match="checkpoint 2 completed.*stays pending"):
        run.checkpoint(2)
    monkeypatch.undo()
    assert catalog.get_checkpoint(JOB, 2).status is CheckpointStatus.COMPLETED
    assert _values(run.output.uri) == [1] and _values(run.late.uri) == [1 + LATE]
    assert [(p.checkpoint_id, p.kind) for p, _ in catalog.pending_outputs(JOB)] == [
        (2, "output"),
        (2, "late-data"),
    ]
    if by == "next run":
        assert run.checkpoint(3) is CheckpointStatus.COMPLETED
        expected = [1, 2, 3]
    elif by == "replay":
        assert run.checkpoint(2) is CheckpointStatus.COMPLETED
        expected = [1, 2]
    else:
        from statecore.cli import main

        assert main(["--home", config.home, "catalog", "recover", JOB]) == 0
        expected = [1, 2]
    _assert_exactly(run, config, expected)
    assert catalog.pending_outputs(JOB) == []
    assert run.checkpoint(2) is CheckpointStatus.COMPLETED  # once more: nothing twice
    _assert_exactly(run, config, expected)


def test_roll_forward_pending_output_files_survive_a_vacuum(
    config: StatecoreConfig, catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A VACUUM (retention 0) of the output tables while a checkpoint's output is pending keeps
    its files: the next run commits them, and the table reads back whole."""
    from datetime import timedelta

    from statecore.snapshot.rewrite import vacuum

    run = Run(config, catalog, tmp_path)
    assert run.checkpoint(1) is CheckpointStatus.COMPLETED
    _output_commit_fails(monkeypatch)
    with pytest.raises(OutputCommitPendingError):
        run.checkpoint(2)
    monkeypatch.undo()
    for table in (run.output, run.late):
        vacuum(table.uri, [], older_than=timedelta(0))
    assert run.checkpoint(3) is CheckpointStatus.COMPLETED
    _assert_exactly(run, config, [1, 2, 3])
