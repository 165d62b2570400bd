"""Pending output where no Delta tool deletes it (no Spark: the coordinator of
:mod:`.test_participants`, real Delta tables, deltalake's own VACUUM as the other tool).

A checkpoint that completed but whose output commit failed leaves its output *pending*: its files
are staged in ``<warehouse>/_pending_outputs/<job>/<checkpoint>/``, outside the output table's
folder, so a VACUUM of the table with retention 0 (``enforce_retention_duration=False``) deletes
at most the copies placed in the table for a commit not made yet, and the roll-forward copies them
again from the staged ones. A file gone from both fails loudly, naming it, and nothing is
committed. Files written into the table's folder by the statecore before staging (the old layout)
still roll forward, or fail as loudly when a VACUUM deleted them."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from statecore.catalog import Catalog, CheckpointStatus
from statecore.checkpoint.output_records import pending_records_folder, staged_output_folder
from statecore.cli import main
from statecore.cli.output import NOT_ATTEMPTED
from statecore.config import StatecoreConfig
from statecore.errors import OutputCommitPendingError, OutputFilesMissingError, TableOwnedError
from statecore.ops.rescale import rescale
from statecore.ops.retention import apply_retention
from statecore.ops.savepoint import take_savepoint
from statecore.ops.ttl_cleanup import ttl_cleanup
from statecore.query.sql import connect
from statecore.snapshot import faults
from statecore.snapshot.commits import head_version
from statecore.snapshot.output import OutputFile
from statecore.snapshot.storage import storage_options

from .test_participants import JOB, LATE, Injected, Run


@pytest.fixture
def config(tmp_path: Path) -> StatecoreConfig:
    return StatecoreConfig.resolve(env={"STATECORE_HOME": str(tmp_path / "statecore")})


@pytest.fixture
def catalog(config: StatecoreConfig) -> Iterator[Catalog]:
    opened = Catalog.connect(config.catalog_url)
    opened.ensure_job(JOB, parallelism=1, max_parallelism=128)
    yield opened
    opened.close()


Hook = Callable[[str, Callable[[], None]], None]


@pytest.fixture
def at_point(monkeypatch: pytest.MonkeyPatch) -> Hook:
    """``at_point(name, action)``: run ``action`` each time the fault point ``name`` is
    reached (raise :class:`Injected` in it to fail the step there)."""
    actions: dict[str, Callable[[], None]] = {}

    def reach(name: str) -> None:
        if name in actions:
            actions[name]()

    monkeypatch.setattr(faults, "_ARMED", "pending-output")
    monkeypatch.setattr(faults, "_reach", reach)

    def arm(name: str, action: Callable[[], None]) -> None:
        actions.clear()
        actions[name] = action

    return arm


def fail_once(name: str) -> Callable[[], None]:
    fired: list[bool] = []

    def action() -> None:
        if not fired:
            fired.append(True)
            raise Injected(f"injected at {name}")

    return action


def other_tool_vacuum(*uris: str) -> list[str]:
    """deltalake's VACUUM of each table, retention 0, its check off: its default ("lite", the
    files removed since the last log checkpoint), then ``full=True``: every untracked file
    goes. The files deleted."""
    deleted = []
    for uri in uris:
        if head_version(uri) is not None:
            table = DeltaTable(uri, storage_options=storage_options(uri))
            for full in (False, True):
                deleted += table.vacuum(
                    retention_hours=0, enforce_retention_duration=False, dry_run=False, full=full
                )
    return deleted


def read_values(uri: str) -> list[int]:
    """The table's values as DuckDB reads them (raises if the log names a missing file)."""
    con = connect()
    try:
        rows = con.execute(f"SELECT value FROM delta_scan('{uri}')").fetchall()
    finally:
        con.close()
    return sorted(v for (v,) in rows)


def assert_exactly(run: Run, checkpoints: list[int]) -> None:
    assert read_values(run.output.uri) == checkpoints
    assert read_values(run.late.uri) == [c + LATE for c in checkpoints]
    for table in (run.output, run.late):  # every file the log names is there
        dt = DeltaTable(table.uri, storage_options=storage_options(table.uri))
        uris = dt.file_uris()
        assert uris and all(_exists(u) for u in uris), uris


def _exists(uri: str) -> bool:
    from statecore.snapshot.output_staging import file_sizes

    return file_sizes([uri])[uri] is not None


def staged(config: StatecoreConfig, checkpoint_id: int) -> list[Path]:
    folder = Path(staged_output_folder(config.warehouse, JOB, checkpoint_id, "output")).parent
    return sorted(folder.rglob("*.parquet"))


def pending_after_failed_commit(
    run: Run, at_point: Hook, point: str = "output:commit:before"
) -> None:
    """Checkpoint 1 committed, checkpoint 2 completed with its output commit failing at
    ``point``: its output pending."""
    assert run.checkpoint(1) is CheckpointStatus.COMPLETED
    at_point(point, fail_once(point))
    with pytest.raises(OutputCommitPendingError, match="checkpoint 2 completed"):
        run.checkpoint(2)
    assert run.catalog.get_checkpoint(JOB, 2).status is CheckpointStatus.COMPLETED


@pytest.mark.parametrize("by", ["next run", "catalog recover"])
def test_pending_output_is_staged_outside_the_table_and_survives_other_tool_vacuum(
    config: StatecoreConfig, catalog: Catalog, tmp_path: Path, at_point: Hook, by: str
) -> None:
    run = Run(config, catalog, tmp_path)
    pending_after_failed_commit(run, at_point)
    files = staged(config, 2)
    assert [f.parent.name for f in files] == ["late-data", "output"]
    assert all(not f.is_relative_to(tmp_path / "out") for f in files)
    assert read_values(run.output.uri) == [1]  # not visible yet
    # the copy placed in the output table for the commit not made is untracked: VACUUM takes it
    deleted = other_tool_vacuum(run.output.uri, run.late.uri)
    assert len(deleted) == 1 and "part-cp000000000002-" in deleted[0], deleted
    assert all(f.exists() for f in files)  # the staged copies are not in any table
    if by == "next run":
        assert run.checkpoint(3) is CheckpointStatus.COMPLETED
        expected = [1, 2, 3]
    else:
        assert main(["--home", config.home, "catalog", "recover", JOB]) == 0
        expected = [1, 2]
    assert_exactly(run, expected)
    assert catalog.pending_outputs(JOB) == []
    assert staged(config, 2) == []  # deleted once the tables were verified
    assert not Path(pending_records_folder(config.warehouse, JOB), "2").exists()
    assert list(Path(pending_records_folder(config.warehouse, JOB)).glob("*.json")) == []


def test_other_tool_vacuum_racing_the_commit_is_repaired_from_the_staged_copy(
    config: StatecoreConfig,
    catalog: Catalog,
    tmp_path: Path,
    at_point: Hook,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A VACUUM with retention 0 between the copy into the table and the Delta commit deletes
    the copy: the check after the commit finds it gone and copies it again from the staged
    one, before the staged one is deleted."""
    run = Run(config, catalog, tmp_path)
    assert run.checkpoint(1) is CheckpointStatus.COMPLETED
    raced: list[str] = []
    at_point("output:commit:before", lambda: raced.extend(other_tool_vacuum(run.output.uri)))
    assert run.checkpoint(2) is CheckpointStatus.COMPLETED
    assert any("part-cp000000000002-" in d for d in raced), raced
    assert "was gone after the commit; copied again from" in caplog.text
    assert_exactly(run, [1, 2])
    assert staged(config, 2) == []


def test_pending_output_staged_file_deleted_by_hand_fails_loudly_and_commits_nothing(
    config: StatecoreConfig,
    catalog: Catalog,
    tmp_path: Path,
    at_point: Hook,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = Run(config, catalog, tmp_path)
    pending_after_failed_commit(run, at_point)
    other_tool_vacuum(run.output.uri, run.late.uri)
    lost = next(f for f in staged(config, 2) if f.parent.name == "output")
    lost.unlink()
    head = head_version(run.output.uri)
    with pytest.raises(OutputFilesMissingError) as raised:
        run.checkpoint(3)
    message = str(raised.value)
    assert "checkpoint 2" in message and run.output.uri in message and str(lost) in message
    assert f"{run.output.uri}/{lost.name}" in message
    assert head_version(run.output.uri) == head  # nothing committed
    assert read_values(run.output.uri) == [1]
    assert catalog.get_checkpoint(JOB, 2).status is CheckpointStatus.COMPLETED
    assert [p.checkpoint_id for p, _ in catalog.pending_outputs(JOB)] == [2, 2]
    capsys.readouterr()
    assert main(["--home", config.home, "catalog", "recover", JOB]) != 0
    assert str(lost) in capsys.readouterr().err
    assert head_version(run.output.uri) == head
    assert main(["--home", config.home, "checkpoints", "list"]) == 0
    assert "OutputFilesMissingError" in capsys.readouterr().out


def _old_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pending files as the statecore before staging recorded them: no ``staged`` key."""

    def to_json_dict(self: OutputFile) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if k != "staged"}

    monkeypatch.setattr(OutputFile, "to_json_dict", to_json_dict)


def test_pending_output_of_the_old_layout_in_the_table_folder_still_rolls_forward(
    config: StatecoreConfig,
    catalog: Catalog,
    tmp_path: Path,
    at_point: Hook,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    old = Run(config, catalog, tmp_path, staged=False)
    _old_layout(monkeypatch)
    pending_after_failed_commit(old, at_point)
    monkeypatch.undo()  # the upgrade
    assert staged(config, 2) == []
    record = next(Path(pending_records_folder(config.warehouse, JOB)).glob("2.*.json"))
    assert "staged" not in json.dumps(json.loads(record.read_text())["outputs"][0]["files"])
    assert any(Path(tmp_path, "out").glob("part-cp000000000002-*.parquet"))
    new = Run(config, catalog, tmp_path)
    assert new.checkpoint(3) is CheckpointStatus.COMPLETED
    assert_exactly(new, [1, 2, 3])


def test_pending_output_of_the_old_layout_vacuumed_by_other_tool_fails_naming_each_file(
    config: StatecoreConfig,
    catalog: Catalog,
    tmp_path: Path,
    at_point: Hook,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    old = Run(config, catalog, tmp_path, staged=False)
    _old_layout(monkeypatch)
    pending_after_failed_commit(old, at_point)
    monkeypatch.undo()
    names = [p.name for p in Path(tmp_path, "out").glob("part-cp000000000002-*.parquet")]
    deleted = other_tool_vacuum(old.output.uri, old.late.uri)
    assert len(names) == 1 and len(deleted) == 2
    head = head_version(old.output.uri)
    with pytest.raises(OutputFilesMissingError) as raised:
        Run(config, catalog, tmp_path).checkpoint(3)
    message = str(raised.value)
    assert "checkpoint 2" in message and f"{old.output.uri}/{names[0]}" in message
    assert "no staged copy" in message and "nothing was committed" in message
    assert head_version(old.output.uri) == head
    assert read_values(old.output.uri) == [1]


def test_pending_output_checkpoints_list_and_show_report_it(
    config: StatecoreConfig,
    catalog: Catalog,
    tmp_path: Path,
    at_point: Hook,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = Run(config, catalog, tmp_path)
    pending_after_failed_commit(run, at_point)
    completed_at = catalog.get_checkpoint(JOB, 2).completed_at
    capsys.readouterr()
    assert main(["--home", config.home, "checkpoints", "list"]) == 0
    listing = capsys.readouterr().out
    assert "Pending output: 2 commit(s)" in listing
    section = listing.split("Pending output")[1]
    assert run.output.uri in section and run.late.uri in section
    assert "Injected: injected at output:commit:before" in section
    assert f"{completed_at:%Y-%m-%d %H:%M:%S}" in section
    assert main(["--home", config.home, "checkpoints", "show", JOB, "2"]) == 0
    assert "Pending output: 2 commit(s)" in capsys.readouterr().out
    assert main(["--home", config.home, "checkpoints", "show", JOB, "1"]) == 0
    assert "Pending output" not in capsys.readouterr().out
    assert main(["--home", config.home, "checkpoints", "list", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert [json.loads(line)["checkpoint"] for line in out.splitlines()] == [1, 2]
    assert "Pending output: 2 commit(s)" in err
    assert run.checkpoint(3) is CheckpointStatus.COMPLETED
    assert main(["--home", config.home, "checkpoints", "list"]) == 0
    assert "Pending output" not in capsys.readouterr().out


def test_pending_output_why_unknown_when_no_commit_failed(
    config: StatecoreConfig, catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that stopped between the completion and the output commit (as a kill does)
    recorded no error: the listing says so."""
    from statecore.checkpoint import coordinator
    from statecore.cli.output import pending_output_rows

    run = Run(config, catalog, tmp_path)
    assert run.checkpoint(1) is CheckpointStatus.COMPLETED
    real = coordinator.roll_forward

    def stopped(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("checkpoint_id") == 2:
            return []  # the process is gone before its commit
        return real(*args, **kwargs)

    monkeypatch.setattr(coordinator, "roll_forward", stopped)
    assert run.checkpoint(2) is CheckpointStatus.COMPLETED
    monkeypatch.undo()
    rows = pending_output_rows([p for p, _ in catalog.pending_outputs(JOB)], {})
    assert [(r["checkpoint"], r["output"], r["why"]) for r in rows] == [
        (2, "output", NOT_ATTEMPTED),
        (2, "late-data", NOT_ATTEMPTED),
    ]
    assert run.checkpoint(3) is CheckpointStatus.COMPLETED
    assert_exactly(run, [1, 2, 3])


@pytest.mark.parametrize("dry_run", [True, False])
def test_pending_output_rolled_forward_by_the_maintenance_retention(
    config: StatecoreConfig, catalog: Catalog, tmp_path: Path, at_point: Hook, dry_run: bool
) -> None:
    """The state_maintenance DAG's retention task (``apply_retention``) commits a paused
    job's pending output; its dry run names it and commits nothing."""
    run = Run(config, catalog, tmp_path)
    pending_after_failed_commit(run, at_point)
    other_tool_vacuum(run.output.uri, run.late.uri)
    report = apply_retention(
        config, catalog, JOB, retain=10, vacuum_after=timedelta(days=7), dry_run=dry_run
    )
    assert report.rolled_forward == (2,)
    assert report.to_dict()["rolled_forward"] == [2]
    if dry_run:
        assert read_values(run.output.uri) == [1]
        assert len(catalog.pending_outputs(JOB)) == 2
    else:
        assert_exactly(run, [1, 2])
        assert catalog.pending_outputs(JOB) == []
        assert staged(config, 2) == []


def test_pending_output_a_stop_after_the_commit_before_the_staged_copies_go(
    config: StatecoreConfig, catalog: Catalog, tmp_path: Path, at_point: Hook
) -> None:
    """The commit is in the table, verified, and the writer stops before it deletes the staged
    copies: readers see the rows; the next run finds the commit made, checks it, deletes the
    staged copies and commits nothing twice."""
    run = Run(config, catalog, tmp_path)
    pending_after_failed_commit(run, at_point, "output:staged:drop")
    assert read_values(run.output.uri) == [1, 2]
    # the output's staged copy is still there, and the late data's (its commit did not run)
    assert len(staged(config, 2)) == 2
    assert run.checkpoint(3) is CheckpointStatus.COMPLETED
    assert_exactly(run, [1, 2, 3])
    assert staged(config, 2) == []


def test_pending_output_staged_by_an_attempt_killed_before_it_recorded_is_deleted_by_retention(
    config: StatecoreConfig, catalog: Catalog, tmp_path: Path, at_point: Hook
) -> None:
    """Files staged by an attempt killed before it recorded them are named by no pending
    commit and no record: retention deletes them. A pending checkpoint's staged files stay
    until its commit is verified."""
    run = Run(config, catalog, tmp_path)
    at_point("output:commit:before", lambda: None)
    assert run.checkpoint(1) is CheckpointStatus.COMPLETED
    orphan = Path(staged_output_folder(config.warehouse, JOB, 2, "output"), "part-cp2.parquet")
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"never recorded")
    at_point("output:commit:before", fail_once("output:commit:before"))
    with pytest.raises(OutputCommitPendingError):
        run.checkpoint(3)  # pending: its staged files are kept by the dry run
    apply_retention(config, catalog, JOB, retain=10, vacuum_after=None, dry_run=True)
    assert orphan.exists() and len(staged(config, 3)) == 2
    report = apply_retention(config, catalog, JOB, retain=10, vacuum_after=None)
    assert report.rolled_forward == (3,)
    assert not orphan.parent.parent.exists()
    assert_exactly(run, [1, 3])
    assert staged(config, 3) == []


def test_pending_output_retention_logs_which_checkpoints_since_when_and_why(
    config: StatecoreConfig, catalog: Catalog, tmp_path: Path, at_point: Hook
) -> None:
    """The maintenance DAG's retention task log (``progress``) names each pending output
    (checkpoint, table, since the checkpoint's completion, the error of the failed commit)
    before it commits it, then the checkpoints committed."""
    run = Run(config, catalog, tmp_path)
    pending_after_failed_commit(run, at_point)
    completed_at = catalog.get_checkpoint(JOB, 2).completed_at
    assert completed_at is not None
    said: list[str] = []
    report = apply_retention(
        config, catalog, JOB, retain=10, vacuum_after=None, progress=said.append
    )
    assert report.rolled_forward == (2,)
    pending = [line for line in said if "is pending since" in line]
    assert [run.output.uri in line or run.late.uri in line for line in pending] == [True, True]
    for line in pending:
        assert "checkpoint 2:" in line and f"since {completed_at:%Y-%m-%d %H:%M:%S} UTC" in line
    assert "Injected: injected at output:commit:before" in pending[0]  # the output's commit
    assert "not attempted yet" in pending[1]  # the late data's, never run after that failure
    done = said.index(f"retention {JOB}: committed the pending output of checkpoints [2]")
    assert done > said.index(pending[-1])
    assert_exactly(run, [1, 2])


def test_pending_output_retention_fails_loudly_naming_the_checkpoint_and_missing_file(
    config: StatecoreConfig, catalog: Catalog, tmp_path: Path, at_point: Hook
) -> None:
    """A pending output whose staged file is gone fails retention (so the DAG's task), its log
    and error naming the checkpoint and the file; nothing is committed, nothing expired."""
    run = Run(config, catalog, tmp_path)
    pending_after_failed_commit(run, at_point)
    other_tool_vacuum(run.output.uri, run.late.uri)
    lost = next(f for f in staged(config, 2) if f.parent.name == "output")
    lost.unlink()
    said: list[str] = []
    with pytest.raises(OutputFilesMissingError) as raised:
        apply_retention(config, catalog, JOB, retain=1, vacuum_after=None, progress=said.append)
    assert "checkpoint 2" in str(raised.value) and str(lost) in str(raised.value)
    [failed] = [line for line in said if "FAILED" in line]
    assert "checkpoint 2" in failed and str(lost) in failed and run.output.uri in failed
    assert not any("committed the pending output" in line for line in said)
    assert catalog.get_checkpoint(JOB, 1).status is CheckpointStatus.COMPLETED  # not expired
    assert read_values(run.output.uri) == [1]
    assert len(catalog.pending_outputs(JOB)) == 2


@pytest.mark.parametrize("operation", ["savepoint", "rescale", "ttl-cleanup"])
def test_pending_output_rolled_forward_first_by_each_maintenance_command(
    config: StatecoreConfig, catalog: Catalog, tmp_path: Path, at_point: Hook, operation: str
) -> None:
    """A savepoint, rescale or ttl-cleanup of the job (each holding its lease) commits the
    pending output first, saying which checkpoint's, since when and why, as retention does."""
    run = Run(config, catalog, tmp_path)
    pending_after_failed_commit(run, at_point)
    said: list[str] = []
    if operation == "savepoint":
        take_savepoint(config, catalog, JOB, name="first", progress=said.append)
    elif operation == "rescale":
        job = catalog.get_job(JOB)
        rescale(config, catalog, JOB, parallelism=job.parallelism + 1, progress=said.append)
    else:
        ttl_cleanup(config, catalog, JOB, vacuum_after=None, progress=said.append)
    pending = [line for line in said if "is pending since" in line]
    assert len(pending) == 2 and all(line.startswith(f"{operation} {JOB}:") for line in pending)
    assert "Injected: injected at output:commit:before" in pending[0]
    done = said.index(f"{operation} {JOB}: committed the pending output of checkpoints [2]")
    assert done > said.index(pending[-1])
    assert catalog.pending_outputs(JOB) == []
    assert_exactly(run, [1, 2])


def test_table_owner_retention_compacts_only_the_jobs_own_output_tables(
    config: StatecoreConfig, catalog: Catalog, tmp_path: Path
) -> None:
    """Retention's compaction commits to the output tables it is given: one owned by another
    job (its ``statecore.owner`` property) is refused before anything is done, naming the
    owner; the job's own tables are maintained."""
    run = Run(config, catalog, tmp_path)
    run.checkpoint(1)
    other = str(tmp_path / "other")
    write_deltalake(other, pa.table({"user": ["x"]}))
    DeltaTable(other).alter.set_table_properties(
        {"statecore.owner": "statecore:0123456789ab:another/main"}, raise_if_not_exists=False
    )
    version = DeltaTable(other).version()
    with pytest.raises(TableOwnedError, match="another/main"):
        apply_retention(config, catalog, JOB, retain=1, vacuum_after=None, outputs=[other])
    assert DeltaTable(other).version() == version
    assert catalog.get_checkpoint(JOB, 1).status is CheckpointStatus.COMPLETED
    report = apply_retention(
        config, catalog, JOB, retain=1, vacuum_after=None, outputs=[run.output.uri]
    )
    assert report.retained == (1,)
