"""The operations on the command line: sizes per key group, savepoints, diff, check, SQL over a
savepoint, repair, and errors that exit with status 2 and change nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from statecore.catalog import Catalog
from statecore.cli import main
from statecore.config import StatecoreConfig
from statecore.descriptors import ValueStateDescriptor
from statecore.runtime import KeyedProcessFunction, RuntimeContext
from tests.ops.conftest import JOB
from tests.ops.statebuilder import catalog_snapshot, files_under


class Deployed(KeyedProcessFunction):
    """The job's next version: ``plain`` as before, ``total`` without its TTL, ``seen`` a value
    state now, ``fresh`` new; no operator state any more."""

    def open(self, ctx: RuntimeContext) -> None:
        ctx.get_state(ValueStateDescriptor("plain", float))
        ctx.get_state(ValueStateDescriptor("total", float))
        ctx.get_state(ValueStateDescriptor("seen", int))
        ctx.get_state(ValueStateDescriptor("fresh", str))

    def process_element(self, value: Any, ctx: Any) -> None:
        return None


def run(
    config: StatecoreConfig, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    code = main(["--home", config.home, *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_sizes_per_state_and_key_group(job: StatecoreConfig, capsys: Any) -> None:
    code, out, _ = run(
        job, capsys, "checkpoints", "show", JOB, "2", "--key-groups", "--format", "json"
    )
    rows = json_lines(out)
    assert code == 0 and rows[0]["checkpoint"] == 2
    per_group = rows[1:]
    assert {r["state"] for r in per_group} == {"total", "seen", "plain", "timers", "offsets"}
    assert {r["partition"] for r in per_group if r["state"] == "offsets"} == {"subtask"}
    assert sum(r["rows"] for r in per_group if r["state"] == "total") == 41


def test_savepoint_list_show_and_sql_over_it(job: StatecoreConfig, capsys: Any) -> None:
    code, out, err = run(job, capsys, "savepoint", JOB, "--name", "sp1", "--format", "json")
    assert code == 0 and json_lines(out)[0]["name"] == "sp1"
    assert "savepoint sp1: pinned checkpoint 2" in err  # progress on stderr
    code, out, _ = run(job, capsys, "savepoints", "list", "--format", "csv")
    assert code == 0 and "sp1" in out and "manual" in out
    code, out, _ = run(job, capsys, "savepoints", "show", "sp1", "--job", JOB)
    assert code == 0 and "offsets" in out and "timers" in out
    code, out, _ = run(
        job,
        capsys,
        "sql",
        "--job",
        JOB,
        "--savepoint",
        "sp1",
        "--format",
        "json",
        "SELECT count(*) AS n FROM clicks.plain",
    )
    assert code == 0 and json_lines(out) == [{"n": 41}]
    code, out, _ = run(
        job, capsys, "sql", "--format", "json", "SELECT name, reason FROM statecore.savepoints"
    )
    assert json_lines(out) == [{"name": "sp1", "reason": "manual"}]


def test_diff_between_checkpoints(job: StatecoreConfig, capsys: Any) -> None:
    code, out, _ = run(job, capsys, "diff", JOB, "1", "2", "--format", "json")
    diffs = {d["state"]: d for d in json_lines(out)}
    assert code == 0
    assert (diffs["plain"]["added"], diffs["plain"]["removed"], diffs["plain"]["changed"]) == (
        1,
        0,
        1,
    )
    assert diffs["plain"]["examples"] == ["changed user-0", "added user-new"]  # by key
    assert (diffs["offsets"]["added"], diffs["offsets"]["changed"]) == (0, 0)


def test_check_a_deploy_against_a_savepoint(job: StatecoreConfig, capsys: Any) -> None:
    assert run(job, capsys, "savepoint", JOB, "--name", "sp")[0] == 0
    code, out, err = run(job, capsys, "check", JOB, "--against", "sp", "--format", "json")
    assert code == 0 and "can restore" in out  # the registered states: all compatible
    assert {c["verdict"] for c in json_lines(out)} == {"compatible"}
    code, out, err = run(
        job,
        capsys,
        "check",
        JOB,
        "--against",
        "sp",
        "--format",
        "json",
        "--function",
        "tests.ops.test_cli_ops:Deployed",
    )
    verdicts = {c["state"]: c["verdict"] for c in json_lines(out)}
    assert code == 2 and verdicts == {
        "plain": "compatible",
        "total": "compatible after migration",
        "seen": "incompatible",
        "fresh": "new",
        "timers": "compatible",
        "offsets": "not restored",
    }
    assert "main/seen: incompatible (the kind changed from list to value)" in err
    assert "main/offsets: not restored" in err and "total" not in err


def test_errors_exit_2_and_change_nothing(job: StatecoreConfig, capsys: Any) -> None:
    before, files = catalog_snapshot(job), files_under(job.warehouse)
    for args, message in [
        (["savepoint", "nope"], "job 'nope' is not in the checkpoint catalog"),
        (["rescale", JOB, "--parallelism", "0"], "must be at least 1"),
        (["rescale", JOB, "--parallelism", "500"], "pass a larger --max-parallelism"),
        (["state", "apply", JOB, "--sql", "UPDATE clicks.total SET key = 'x'"], "cannot change"),
        (["sql", "DROP VIEW clicks.total"], "read-only"),
        (["diff", JOB, "1", "77"], "checkpoint 77"),
    ]:
        code, _, err = run(job, capsys, *args)
        assert code == 2 and message in err, (args, err)
    with Catalog.connect(job.catalog_url) as catalog:
        catalog.acquire_maintenance_lock(JOB, operation="rescale", owner="host:1")
    code, _, err = run(job, capsys, "ttl-cleanup", JOB, "--now-ms", "99999999")
    assert code == 2 and "held by the maintenance operation 'rescale'" in err
    code, out, _ = run(job, capsys, "unlock", JOB)
    assert code == 0 and "released" in out
    assert catalog_snapshot(job) == before and files_under(job.warehouse) == files


def test_cleanup_retention_and_repair_commands(job: StatecoreConfig, capsys: Any) -> None:
    code, out, _ = run(
        job, capsys, "ttl-cleanup", JOB, "--now-ms", "21020", "--no-vacuum", "--format", "json"
    )
    rows = json_lines(out)
    assert code == 0 and rows[-1]["expired"] == 21 + 62 and rows[-1]["checkpoint_id"]
    code, out, _ = run(
        job,
        capsys,
        "retention",
        JOB,
        "--retain",
        "1",
        "--vacuum-retention-hours",
        "0",
        "--format",
        "json",
    )
    assert code == 0 and json_lines(out)[0]["expired"] == [1, 2]
    code, out, _ = run(job, capsys, "state", "delete", JOB, "--key", "user-7")
    assert code == 0 and "savepoint: " in out and "timers" in out
