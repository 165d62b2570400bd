"""``statecore retention`` cuts the Delta logs as the library does: ``--log-grace SECONDS``
(default :data:`~statecore.snapshot.log.LOG_GRACE`) keeps young entries, ``--output PATH``
(repeatable) adds the job's output and late-data tables, which the catalog does not know. Bad
input (a negative or non-numeric grace, an output path that is no Delta table or is one of the
job's state tables) exits with status 2, names what is wrong and changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from statecore.catalog import Catalog
from statecore.cli import _parser, main
from statecore.config import StatecoreConfig
from statecore.snapshot.log import LOG_CHECKPOINT_INTERVAL, LOG_GRACE, log_entries
from statecore.snapshot.output import OutputTable, OutputWriter, output_version_at
from statecore.snapshot.storage import open_table
from tests.ops.statebuilder import (
    Table,
    catalog_snapshot,
    files_under,
    value_rows,
    write_checkpoint,
)

JOB = "clicks"
CHECKPOINTS = LOG_CHECKPOINT_INTERVAL + 3  # a log checkpoint below the oldest retained version
RETAIN = 3
OUT = pa.schema([("key", pa.string()), ("n", pa.int64())])


def commits(uri: str) -> int:
    return sum(1 for name in log_entries(uri) if name.endswith(".json"))


@pytest.fixture
def job(statecore_home: StatecoreConfig) -> tuple[StatecoreConfig, str]:
    """``CHECKPOINTS`` checkpoints of ``JOB`` (one value state), each with its rows in an
    output table, committed as the Spark runner commits them."""
    output = f"{statecore_home.home}/output/{JOB}"
    sink = OutputTable(output, OUT, app_id=f"statecore:{JOB}/main")
    for checkpoint_id in range(1, CHECKPOINTS + 1):
        rows = value_rows({"user-0": float(checkpoint_id), "user-1": 1.0})
        write_checkpoint(statecore_home, JOB, checkpoint_id, {"total": Table(rows)})
        writer = OutputWriter(output, OUT, checkpoint_id=checkpoint_id, subtask=0)
        writer.write(pa.record_batch({"key": ["user-0"], "n": [checkpoint_id]}, schema=OUT))
        written = writer.close()
        assert written is not None
        sink.commit([written], checkpoint_id=checkpoint_id)
    return statecore_home, output


def tables(config: StatecoreConfig, output: str) -> tuple[dict[str, int], dict[str, int]]:
    """Every file of the job's tables and of its output table, with its size."""
    return files_under(config.warehouse), files_under(output)


def retention(
    config: StatecoreConfig, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    code = main(["--home", config.home, "retention", JOB, "--retain", str(RETAIN), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_retention_log_grace_and_output_cut_the_output_log(
    job: tuple[StatecoreConfig, str], capsys: pytest.CaptureFixture[str]
) -> None:
    config, output = job
    state = f"{config.warehouse}/{JOB}/main/keyed/total"
    before = commits(output)
    assert before == CHECKPOINTS + 1  # its creation, then one commit per checkpoint
    code, out, err = retention(
        config, capsys, "--no-vacuum", "--log-grace", "0", "--output", output, "--format", "json"
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["expired"] == list(range(1, CHECKPOINTS - RETAIN + 1))
    assert report["log_files_deleted"] > 0
    assert f"log entries of {output}" in err and f"log entries of {state}" in err
    for uri in (output, state):  # cut back to the log checkpoint below the oldest retained
        assert commits(uri) <= RETAIN + LOG_CHECKPOINT_INTERVAL < before, uri
    for checkpoint_id in range(CHECKPOINTS - RETAIN + 1, CHECKPOINTS + 1):
        version = output_version_at(output, checkpoint_id)
        assert version is not None
        assert open_table(output, version=version).to_pyarrow_table().num_rows == checkpoint_id


def test_cli_retention_default_log_grace_keeps_young_entries(
    job: tuple[StatecoreConfig, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Without ``--log-grace``, entries younger than ``LOG_GRACE`` (an hour) stay: this job's
    are seconds old, so the checkpoints expire and no log entry goes."""
    config, output = job
    defaults = _parser().parse_args(["retention", JOB, "--retain", "1"])
    assert defaults.log_grace == LOG_GRACE.total_seconds() and defaults.outputs == []
    logs = log_entries(output)
    code, out, err = retention(
        config, capsys, "--no-vacuum", "--output", output, "--format", "json"
    )
    assert code == 0, err
    report = json.loads(out)
    assert len(report["expired"]) == CHECKPOINTS - RETAIN and report["log_files_deleted"] == 0
    now = log_entries(output)  # the entries there before all stay (the merge of the expired
    assert {name: now.get(name) for name in logs} == logs  # checkpoints' files adds one)


def test_cli_retention_bad_log_grace_is_refused_before_anything_changes(
    job: tuple[StatecoreConfig, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A negative, non-numeric or NaN grace: argparse's usage error (status 2) naming it."""
    config, output = job
    catalog, files = catalog_snapshot(config), tables(config, output)
    cases = {
        "-5": "--log-grace: -5 seconds: a grace period cannot be negative",
        "an hour": "--log-grace: 'an hour' is not a number of seconds",
        "nan": "--log-grace: 'nan' is not a number of seconds",
        "1e300": "--log-grace: '1e300' is not a number of seconds",
    }
    for grace, message in cases.items():
        with pytest.raises(SystemExit) as exited:
            retention(config, capsys, "--log-grace", grace, "--output", output)
        assert exited.value.code == 2
        assert message in capsys.readouterr().err
        assert catalog_snapshot(config) == catalog and tables(config, output) == files


def test_cli_retention_bad_output_is_refused_before_anything_changes(
    job: tuple[StatecoreConfig, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """An output path that does not exist, that is a folder but no Delta table, or that is one
    of the job's state tables: status 2, one line naming it, nothing expired or deleted."""
    config, output = job
    state = f"{config.warehouse}/{JOB}/main/keyed/total"
    (tmp_path / "plain-folder").mkdir()
    catalog, files = catalog_snapshot(config), tables(config, output)
    cases = {
        str(tmp_path / "no-such-table"): "is not a Delta table",
        str(tmp_path / "plain-folder"): "is not a Delta table",
        state: "is one of the job's state tables",
    }
    for path, problem in cases.items():
        code, out, err = retention(
            config, capsys, "--vacuum-retention-hours", "0", "--log-grace", "0",
            "--output", output, "--output", path,
        )  # fmt: skip
        assert code == 2 and out == ""
        assert err.startswith(f"statecore: error: job '{JOB}': output table {path} {problem}")
        assert "nothing was changed" in err and len(err.splitlines()) == 1
        assert catalog_snapshot(config) == catalog and tables(config, output) == files
    with Catalog.connect(config.catalog_url) as opened:
        assert opened.maintenance_lock(JOB) is None  # refused before taking the lease


def test_cli_retention_relative_output_path_is_the_table_it_names(
    job: tuple[StatecoreConfig, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--output output/clicks`` from the home folder names the same table as its absolute
    path (the path the job wrote): the library gets it absolute."""
    config, output = job
    monkeypatch.chdir(config.home)
    code, _, err = retention(
        config, capsys, "--no-vacuum", "--log-grace", "0", "--output", f"output/{JOB}/",
        "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    assert f"log entries of {output} " in err
    assert commits(output) <= RETAIN + LOG_CHECKPOINT_INTERVAL
