"""The bad-input matrix: what users (and attackers) hand statecore, each refused with its error
class and a clear message, and nothing written: the catalog's rows and every file of the
warehouse (size and SHA-256) are what they were before. A refused run leaves only its
checkpoint marked FAILED, as the run path documents."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from statecore.backends import BackendParameters, HeapKeyedStateBackend
from statecore.backends.rocksdb.local import LocalInstance
from statecore.catalog import Catalog, CheckpointStatus
from statecore.checkpoint.coordinator import CheckpointCoordinator
from statecore.checkpoint.points import load_savepoint, resolve_point
from statecore.cli import main
from statecore.config import StatecoreConfig
from statecore.descriptors import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from statecore.errors import (
    CatalogError,
    CheckpointNotFoundError,
    ConfigError,
    CorruptSnapshotError,
    JobNotFoundError,
    KeyTypeError,
    MaxParallelismMismatchError,
    StateAccessError,
    StateError,
    StateMigrationError,
    StateRepairError,
    UnknownStateError,
)
from statecore.keygroups import KeyGroupRange, assign_to_key_group
from statecore.ops.repair import apply_sql
from statecore.ops.rescale import rescale
from statecore.ops.retention import apply_retention
from statecore.ops.savepoint import restore_savepoint, take_savepoint
from statecore.query import run_sql
from statecore.query.diff import diff_points
from statecore.snapshot.rewrite import table_files
from statecore.ttl import StateTtlConfig
from statecore.types import PICKLED, TypeInfo, schema_from_text
from tests.inprocess import run_checkpoint
from tests.ops.conftest import JOB, job, latest  # noqa: F401 (the fixture)
from tests.test_compatibility import Keep, write_then_read

OUTSIDE = "outside"  # a folder beside the warehouse, with a file to steal


class Evil:
    """Unpickling this runs code: it creates the file ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


def pwned(config: StatecoreConfig) -> str:
    return str(Path(config.home).parent / OUTSIDE / "pwned")


# -- what "nothing was written" means ---------------------------------------------------------


def files(root: str | Path) -> dict[str, tuple[int, str]]:
    """Every file below ``root``: its size and SHA-256."""
    base = Path(root)
    return {
        str(p.relative_to(base)): (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(base.rglob("*"))
        if p.is_file()
    }


def catalog_rows(config: StatecoreConfig, *, failed: tuple[str, int] | None = None) -> str:
    """The catalog's rows as text (without the FAILED checkpoint ``failed`` of a refused run);
    the catalog file's hash when it cannot be read."""
    try:
        catalog = Catalog.connect(config.catalog_url)
    except CatalogError:
        database = config.catalog_url.removeprefix("sqlite:///")
        return hashlib.sha256(Path(database).read_bytes()).hexdigest()
    with catalog:
        out: dict[str, Any] = {"savepoints": [str(s) for s in catalog.list_savepoints()]}
        for job_record in catalog.list_jobs():
            name = job_record.name
            checkpoints = []
            for c in catalog.list_checkpoints(name):
                if failed == (name, c.checkpoint_id):
                    assert c.status is CheckpointStatus.FAILED, c
                    continue
                checkpoints.append(str(c))
            out[name] = {
                "job": str(job_record),
                "lock": str(catalog.maintenance_lock(name)),
                "states": [str(s) for s in catalog.list_states(name)],
                "checkpoints": checkpoints,
            }
        return json.dumps(out, indent=1, sort_keys=True)


def world(config: StatecoreConfig, *, failed: tuple[str, int] | None = None) -> dict[str, Any]:
    home = Path(config.home)
    return {
        "catalog": catalog_rows(config, failed=failed),
        "warehouse": files(config.warehouse),
        "outside": files(home.parent / OUTSIDE),
        "rocksdb": files(home / "rocksdb") if (home / "rocksdb").exists() else {},
    }


# -- the cases -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    run: Callable[[StatecoreConfig], Any]
    error: type[StateError]
    match: str
    setup: Callable[[StatecoreConfig], Any] | None = None
    failed: tuple[str, int] | None = None  # the checkpoint a refused run marks FAILED


def sql(query: str, **kwargs: Any) -> Callable[[StatecoreConfig], Any]:
    def go(config: StatecoreConfig) -> Any:
        text = query.format(
            outside=Path(config.home).parent / OUTSIDE,
            warehouse=config.warehouse,
            table=latest(config).tables[0].path,
        )
        with Catalog.connect(config.catalog_url) as catalog:
            return run_sql(catalog, text, **kwargs)

    return go


def apply(statement: str) -> Callable[[StatecoreConfig], Any]:
    def go(config: StatecoreConfig) -> Any:
        with Catalog.connect(config.catalog_url) as catalog:
            return apply_sql(config, catalog, JOB, statement)

    return go


def operation(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., Any]:
    def go(config: StatecoreConfig) -> Any:
        with Catalog.connect(config.catalog_url) as catalog:
            return call(config, catalog, *args, **kwargs)

    return go


class CliError(StateError):
    """Stands for the CLI's exit status 2 and its one-line message."""


def cli(*args: str) -> Callable[[StatecoreConfig], Any]:
    def go(config: StatecoreConfig) -> Any:
        import contextlib
        import io

        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(["--home", config.home, *args])
        message = err.getvalue()
        assert "Traceback" not in message
        if code == 2 and message.startswith("statecore: error: "):
            raise CliError(message)
        return code

    return go


def write_evolve(descriptor: Any, values: list[Any]) -> Callable[[StatecoreConfig], Any]:
    """Checkpoint 1 of job ``evolve`` with ``descriptor`` holding ``values``."""

    def go(config: StatecoreConfig) -> None:
        keys = [f"user-{i}" for i in range(len(values))]
        run_checkpoint(
            config, Keep(descriptor), list(zip(keys, values)), job="evolve", checkpoint_id=1
        )

    return go


def run_evolve(
    descriptor: Any, records: list[Any] | None = None
) -> Callable[[StatecoreConfig], Any]:
    """Checkpoint 2 of job ``evolve`` with ``descriptor``: it must be refused."""

    def go(config: StatecoreConfig) -> None:
        run_checkpoint(
            config,
            Keep(descriptor),
            records if records is not None else [("user-0", None)],
            job="evolve",
            checkpoint_id=2,
        )
        assert not os.path.exists(pwned(config))

    return go


def evil_bytes(config: StatecoreConfig) -> bytes:
    import pickle

    return pickle.dumps(Evil(pwned(config)))


def corrupt_parquet(config: StatecoreConfig) -> None:
    table = next(t for t in latest(config).tables if t.state == "total")
    victim = table_files(table.path, table.version)[0].path
    Path(table.path, victim).write_bytes(b"not parquet at all")


def drop_first_commit(config: StatecoreConfig) -> None:
    table = next(t for t in latest(config).tables if t.state == "plain")
    os.remove(f"{table.path}/_delta_log/{0:020d}.json")


def garbage_catalog(config: StatecoreConfig) -> None:
    Path(config.catalog_url.removeprefix("sqlite:///")).write_bytes(b"garbage " * 4096)


def truncated_catalog(config: StatecoreConfig) -> None:
    database = Path(config.catalog_url.removeprefix("sqlite:///"))
    for extra in ("-wal", "-shm"):
        Path(f"{database}{extra}").unlink(missing_ok=True)
    os.truncate(database, database.stat().st_size // 2)


def crafted_savepoint(config: StatecoreConfig) -> None:
    """A copy of a savepoint whose metadata points a table at a folder outside it."""
    with Catalog.connect(config.catalog_url) as catalog:
        point = take_savepoint(config, catalog, JOB, name="good")
    source = Path(point.savepoint or "")
    target = Path(config.home).parent / OUTSIDE / "crafted"
    shutil.copytree(source, target)
    meta = json.loads((target / "_savepoint.json").read_text())
    meta["tables"][0]["path"] = "../../../../../.."
    (target / "_savepoint.json").write_text(json.dumps(meta))


def crafted_restore(config: StatecoreConfig) -> None:
    with Catalog.connect(config.catalog_url) as catalog:
        restore_savepoint(config, catalog, str(Path(config.home).parent / OUTSIDE / "crafted"))


def coordinator(job_name: str, operator: str = "main") -> Callable[[StatecoreConfig], Any]:
    def go(config: StatecoreConfig) -> Any:
        with Catalog.connect(config.catalog_url) as catalog:
            return CheckpointCoordinator(config, catalog, job=job_name, operator=operator)

    return go


def plan_with_max_parallelism(config: StatecoreConfig) -> None:
    with Catalog.connect(config.catalog_url) as catalog:
        CheckpointCoordinator(config, catalog, job=JOB, operator="main").plan(
            3, parallelism=2, max_parallelism=256, default_parallelism=2
        )


def local_directory(job_name: str) -> Callable[[StatecoreConfig], Any]:
    def go(config: StatecoreConfig) -> Any:
        return LocalInstance.claim(
            str(Path(config.home) / "rocksdb"),
            job=job_name,
            operator="main",
            key_groups=KeyGroupRange(0, 63),
            max_parallelism=128,
            restored_checkpoint_id=None,
            restored_files={},
        )

    return go


def wrong_value_type(config: StatecoreConfig) -> None:
    backend = HeapKeyedStateBackend(
        key_type=TypeInfo.of(str), key_group_range=KeyGroupRange(0, 127), max_parallelism=128
    )
    state = backend.get_partitioned_state(ValueStateDescriptor("v", int))
    backend.set_current_key("user-1")
    state.update("not an int")


def diff_corrupt(config: StatecoreConfig) -> Any:
    with Catalog.connect(config.catalog_url) as catalog:
        return diff_points(resolve_point(catalog, JOB, 1), resolve_point(catalog, JOB, 2))


TRAVERSAL = "../../escaped"
CASES = [
    # statecore sql: DuckDB's sandbox (reads and writes outside the state tables)
    Case(
        "sandbox_read_csv_etc_passwd",
        sql("SELECT * FROM read_csv('/etc/passwd')"),
        ConfigError,
        "reads only the state tables",
    ),
    Case(
        "sandbox_read_text_catalog",
        sql("SELECT * FROM read_text('{warehouse}/../catalog.db')"),
        ConfigError,
        "reads only the state tables",
    ),
    Case(
        "sandbox_glob_home",
        sql("SELECT * FROM glob('{warehouse}/../*')"),
        ConfigError,
        "reads only the state tables",
    ),
    Case(
        "sandbox_read_parquet_outside",
        sql("SELECT * FROM read_parquet('{outside}/secret.parquet')"),
        ConfigError,
        "reads only the state tables",
    ),
    Case(
        "sandbox_explain_analyze_copy_into_table",
        sql(
            "EXPLAIN ANALYZE COPY (SELECT 1) TO '{table}/_delta_log/{0:020d}.json'".replace(
                "{0:020d}", "0" * 20
            )
        ),
        ConfigError,
        "read-only: EXPLAIN ANALYZE",
    ),
    Case(
        "sandbox_copy_to_outside",
        sql("COPY (SELECT 1) TO '{outside}/x.csv'"),
        ConfigError,
        "read-only: COPY",
    ),
    Case("sandbox_attach", sql("ATTACH '{table}/x.db' AS x"), ConfigError, "read-only: ATTACH"),
    Case("sandbox_install", sql("INSTALL httpfs"), ConfigError, "read-only"),
    Case("sandbox_set", sql("SET enable_external_access = true"), ConfigError, "read-only"),
    # state apply: DuckDB's parser decides the target, the sandbox what it reads
    Case(
        "sandbox_apply_comment_trick",
        apply("DELETE /* the copy */ FROM __statecore.total -- UPDATE clicks.total"),
        StateRepairError,
        "must write one of the views",
    ),
    Case(
        "sandbox_apply_reads_a_file",
        apply(
            "UPDATE clicks.total SET value = (SELECT length(content) FROM read_text('/etc/passwd'))"
        ),
        StateRepairError,
        "outside the state tables",
    ),
    Case(
        "bad_input_apply_insert",
        apply("INSERT INTO clicks.total VALUES ('x', '', 1.0, 1, 5)"),
        StateRepairError,
        "only UPDATE and DELETE",
    ),
    Case(
        "bad_input_apply_changes_a_key",
        apply("UPDATE clicks.total SET key = 'x' WHERE key = 'user-1'"),
        StateRepairError,
        "cannot change",
    ),
    # bytes that statecore never pickled are never unpickled
    Case(
        "bad_input_bytes_redeclared_pickled",
        run_evolve(ValueStateDescriptor("v", PICKLED)),
        StateMigrationError,
        "job 'evolve', operator 'main', state 'v': column 'value' is now declared PICKLED",
        setup=lambda c: write_evolve(ValueStateDescriptor("v", bytes), [evil_bytes(c)])(c),
        failed=("evolve", 2),
    ),
    Case(
        "bad_input_bytes_list_redeclared_pickled",
        run_evolve(ListStateDescriptor("v", PICKLED)),
        StateMigrationError,
        "declared PICKLED",
        setup=lambda c: write_evolve(ListStateDescriptor("v", bytes), [[evil_bytes(c)]])(c),
        failed=("evolve", 2),
    ),
    Case(
        "bad_input_bytes_map_redeclared_pickled",
        run_evolve(MapStateDescriptor("v", str, PICKLED)),
        StateMigrationError,
        "declared PICKLED",
        setup=lambda c: write_evolve(MapStateDescriptor("v", str, bytes), [{"a": evil_bytes(c)}])(
            c
        ),
        failed=("evolve", 2),
    ),
    # names that would escape the warehouse
    Case("traversal_job_of_a_run", coordinator(TRAVERSAL), ConfigError, "job name '../../escaped'"),
    Case(
        "traversal_operator_of_a_run",
        coordinator("evolve", "../main"),
        ConfigError,
        "operator name '../main'",
    ),
    Case(
        "traversal_state_name",
        lambda c: ValueStateDescriptor("../total", int),
        ConfigError,
        "state name '../total'",
    ),
    Case(
        "traversal_savepoint_name",
        operation(take_savepoint, JOB, name="../../escaped"),
        ConfigError,
        "savepoint name '../../escaped'",
    ),
    Case(
        "traversal_job_of_a_savepoint",
        operation(take_savepoint, ".."),
        ConfigError,
        "job name '..'",
    ),
    Case("traversal_rocksdb_local_directory", local_directory(".."), ConfigError, "job name '..'"),
    Case(
        "traversal_savepoint_metadata",
        crafted_restore,
        CorruptSnapshotError,
        "must lie inside the savepoint folder",
        setup=crafted_savepoint,
    ),
    Case(
        "traversal_cli_savepoint", cli("savepoint", TRAVERSAL), CliError, "job name '../../escaped'"
    ),
    Case(
        "traversal_cli_sql_job",
        cli("sql", "--job", "../clicks", "SELECT 1"),
        CliError,
        "job name '../clicks'",
    ),
    Case(
        "traversal_cli_rescale",
        cli("rescale", "/etc", "--parallelism", "2"),
        CliError,
        "job name '/etc'",
    ),
    # a corrupt catalog
    Case(
        "bad_input_garbage_catalog",
        lambda c: Catalog.connect(c.catalog_url),
        CatalogError,
        "catalog.db is corrupt",
        setup=garbage_catalog,
    ),
    Case(
        "bad_input_truncated_catalog",
        lambda c: Catalog.connect(c.catalog_url),
        CatalogError,
        "catalog.db is corrupt",
        setup=truncated_catalog,
    ),
    Case(
        "bad_input_cli_truncated_catalog",
        cli("checkpoints", "list"),
        CliError,
        "catalog.db is corrupt",
        setup=truncated_catalog,
    ),
    # corrupt or missing snapshot files under sql and diff
    Case(
        "bad_input_sql_corrupt_parquet",
        sql("SELECT sum(value) FROM clicks.total"),
        CorruptSnapshotError,
        r"state 'total' of operator 'main'\) version \d+: file key_group=\d+/\S+\.parquet cannot",
        setup=corrupt_parquet,
    ),
    Case(
        "bad_input_sql_missing_delta_log_entry",
        sql("SELECT count(*) FROM clicks.plain"),
        CorruptSnapshotError,
        r"state 'plain' .* version \d+: file _delta_log/0{20}\.json is missing",
        setup=drop_first_commit,
    ),
    Case(
        "bad_input_diff_corrupt_parquet",
        diff_corrupt,
        CorruptSnapshotError,
        "cannot be read",
        setup=corrupt_parquet,
    ),
    # what users hit every day
    Case(
        "bad_input_unknown_state",
        sql("SELECT * FROM clicks.nope"),
        UnknownStateError,
        "the views are",
    ),
    Case("bad_input_unknown_job", sql("SELECT 1", job="nope"), JobNotFoundError, "nope"),
    Case(
        "bad_input_checkpoint_not_found",
        sql("SELECT 1", job=JOB, checkpoint_id=99),
        CheckpointNotFoundError,
        "99",
    ),
    Case(
        "bad_input_savepoint_not_found",
        operation(lambda cfg, cat: resolve_point(cat, JOB, "nope")),
        CheckpointNotFoundError,
        "nope",
    ),
    Case(
        "bad_input_savepoint_folder_not_a_savepoint",
        lambda c: load_savepoint(c.warehouse),
        CheckpointNotFoundError,
        "is not a savepoint",
    ),
    Case(
        "bad_input_cli_diff_unknown_ref",
        cli("diff", JOB, "1", "no-such-savepoint"),
        CliError,
        "no-such-savepoint",
    ),
    Case(
        "bad_input_wrong_value_type",
        wrong_value_type,
        StateAccessError,
        "does not match the declared type int64",
    ),
    Case(
        "bad_input_incompatible_schema",
        run_evolve(ValueStateDescriptor("v", str)),
        StateMigrationError,
        "state 'v'",
        setup=lambda c: write_evolve(ValueStateDescriptor("v", int), [1])(c),
        failed=("evolve", 2),
    ),
    Case(
        "bad_input_max_parallelism_mismatch",
        plan_with_max_parallelism,
        MaxParallelismMismatchError,
        "128",
    ),
    Case(
        "bad_input_rescale_to_zero",
        operation(rescale, JOB, parallelism=0),
        ConfigError,
        "at least 1",
    ),
    Case(
        "bad_input_rescale_above_max",
        operation(rescale, JOB, parallelism=500),
        ConfigError,
        "max-parallelism",
    ),
    Case(
        "bad_input_retention_retain_zero",
        operation(apply_retention, JOB, retain=0),
        ConfigError,
        "retain",
    ),
    Case(
        "bad_input_ttl_zero",
        lambda c: StateTtlConfig(ttl=timedelta(0)),
        ConfigError,
        "positive timedelta",
    ),
    Case(
        "bad_input_key_type",
        lambda c: assign_to_key_group([1, 2], 128),
        KeyTypeError,
        "cannot be hashed consistently with Spark",
    ),
    Case(
        "bad_input_unknown_backend",
        lambda c: BackendParameters.of("memory", None),
        ConfigError,
        "unknown state backend 'memory'",
    ),
]


@pytest.fixture
def outside(job: StatecoreConfig) -> Path:  # noqa: F811
    folder = Path(job.home).parent / OUTSIDE
    folder.mkdir()
    (folder / "secret.csv").write_text("password\nhunter2\n")
    duckdb.sql(f"COPY (SELECT 'hunter2' AS password) TO '{folder}/secret.parquet'")
    return folder


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input(case: Case, job: StatecoreConfig, outside: Path) -> None:  # noqa: F811
    assert any(word in case.name for word in ("bad_input", "sandbox", "traversal"))
    if case.setup is not None:
        case.setup(job)
    before = world(job)
    with pytest.raises(case.error, match=case.match):
        case.run(job)
    assert world(job, failed=case.failed) == before


def test_bad_input_matrix_has_30_cases() -> None:
    assert len(CASES) >= 30
    assert len({c.name for c in CASES}) == len(CASES)


def test_bad_input_guard_keeps_pickled_state_restoring(statecore_home: StatecoreConfig) -> None:
    """State written PICKLED is marked so, and restores PICKLED as before."""
    values = [{"n": i, "tags": (i, "x")} for i in range(8)]
    pickled = ValueStateDescriptor("v", PICKLED)
    assert write_then_read(statecore_home, pickled, pickled, values) == {
        f"user-{i}": v for i, v in enumerate(values)
    }
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        (state,) = catalog.list_states("evolve")
    assert schema_from_text(state.schema).field("value").metadata == {b"statecore.pickled": b"true"}
