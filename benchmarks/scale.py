"""Scale: the driver's costs measured here, and a projection to 100 GB and 10 TB of state.

Every measurement runs statecore's own driver code on this machine, over fake file sizes: the
Delta log records what a task would have written (paths, sizes, row counts, Delta statistics as
statecore writes them) without a data file behind it, since the driver never reads one.

- ``commit``: :meth:`statecore.snapshot.SnapshotTable.commit` of ``N`` key-group files
  (``N`` = 128, 1,024, 8,192, 32,768): the first commit (``N`` adds), a full replacement
  (``N`` removes + ``N`` adds), an incremental one (1 % of the key groups), then listing the
  version's files (what the catalog's key-group sizes and a restore plan read) and the log's bytes.
- ``log``: a 1,024-key-group table over 100 commits that each replace every key group, as a
  stream whose micro-batches touch every key group does: the time to open its head (statecore
  writes a Delta log checkpoint every 10 commits), the bytes of the newest log checkpoint
  (which keeps the ``remove`` tombstones of the retention period) and of the whole log.
- ``catalog``: checkpoint rows with ``K`` table versions of 1,024 or 32,768 key groups each:
  begin + complete, the latest checkpoint read back, the list without tables, retention, and
  the database's bytes per checkpoint.
- ``driver``: one operator at max parallelism 32,768 and parallelism 1,000, through the real
  :class:`~statecore.checkpoint.coordinator.CheckpointCoordinator`: ``plan`` (catalog + restore
  plan), ``commit`` of 1,000 subtasks' results (32,768 files), the next ``plan`` (the restore
  plan lists 32,768 files), the plan's pickled size, its cut into each subtask's part
  (:class:`~statecore.runtime.shares.TaskShares`), a subtask's share (what a task does to find
  its files), and tracemalloc's peak of each step.

- ``--proportional-before REV`` (alone): a checkpoint that changes 1 % of the key groups
  against a full replace, through the coordinator, catalog included, of this tree and of git
  revision ``REV`` in one run (:func:`proportional_before_after`; into ``RESULTS.md``).

Run: ``python -m benchmarks.scale`` (a few minutes; records ``benchmarks/SCALE_MEASURED.md``,
which ``benchmarks/SCALE.md`` quotes and projects from).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.report import replace_section

RESULTS = Path(__file__).with_name("SCALE_MEASURED.md")
MAX_PARALLELISM = 32_768
PARALLELISM = 1_000
FILE_BYTES = 3_000_000  # fake: ~100 GB / 32,768 key groups
FILE_ROWS = 30_000
JOB = "scale"
OPERATOR = "main"
STATE = "total"

ROWS = pa.schema([pa.field("key", pa.string()), pa.field("value", pa.int64())])


# -- helpers --------------------------------------------------------------------------------


TRACE = {"on": False}
"""Whether :func:`measured` traces memory (tracemalloc slows allocation-heavy code 2-3x, so the
times are taken in a pass without it and the peaks in another)."""


@contextmanager
def measured(out: dict[str, Any], name: str) -> Iterator[None]:
    """Time the block into ``out[name]`` (seconds); when tracing, its tracemalloc peak into
    ``out[name + '_peak']`` (bytes of Python objects allocated above the start)."""
    gc.collect()
    if TRACE["on"]:
        tracemalloc.start()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
    start = time.perf_counter()
    try:
        yield
    finally:
        out[name] = time.perf_counter() - start
        if TRACE["on"]:
            out[f"{name}_peak"] = tracemalloc.get_traced_memory()[1] - base
            tracemalloc.stop()


def stats_json(key_group: int) -> str:
    """Delta statistics as statecore's writer records them for a (key, value) file."""
    return json.dumps(
        {
            "numRecords": FILE_ROWS,
            "minValues": {"key": f"k{key_group:05d}-000000", "value": 0},
            "maxValues": {"key": f"k{key_group:05d}-999999", "value": 1_000_000_000},
            "nullCount": {"key": 0, "value": 0},
        }
    )


def fake_files(key_groups: range | list[int], checkpoint_id: int, subtask: int = 0) -> list[Any]:
    """Key-group files as a task reports them, with no data file written."""
    from statecore.snapshot import SnapshotFile

    now = time.time_ns() // 1_000_000
    return [
        SnapshotFile(
            path=f"key_group={kg}/cp-{checkpoint_id}-{subtask}-{uuid.uuid4().hex[:12]}.parquet",
            key_group=kg,
            rows=FILE_ROWS,
            size=FILE_BYTES,
            modification_time=now,
            stats=stats_json(kg),
        )
        for kg in key_groups
    ]


def log_bytes(uri: str) -> tuple[int, int]:
    """Bytes of the table's JSON commits and of its newest log checkpoint."""
    log = Path(uri) / "_delta_log"
    commits = sum(f.stat().st_size for f in log.glob("*.json"))
    checkpoints = sorted(log.glob("*.checkpoint*.parquet"))
    return commits, checkpoints[-1].stat().st_size if checkpoints else 0


def _table(uri: str) -> Any:
    from statecore.snapshot import SnapshotTable

    return SnapshotTable(uri, ROWS, label=f"{JOB}/{OPERATOR}/{STATE}")


# -- measurements ---------------------------------------------------------------------------


def measure_commit(root: str, sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    """Commit costs of N key-group files through ``SnapshotTable.commit``."""
    from deltalake import DeltaTable

    from statecore.keygroups import KeyGroupRange

    warm = _table(f"{root}/warmup")  # the first Delta call of a process pays for its runtime
    v = warm.commit(
        fake_files(range(64), 1),
        changed_key_groups=range(64),
        base_version=None,
        app_id="w",
        checkpoint_id=1,
    )
    warm.commit(
        fake_files(range(64), 2),
        changed_key_groups=range(64),
        base_version=v,
        app_id="w",
        checkpoint_id=2,
    )
    out = []
    for n in sizes:
        uri = f"{root}/commit-{n}"
        table, row = _table(uri), {"files": n}
        with measured(row, "first"):
            v1 = table.commit(
                fake_files(range(n), 1),
                changed_key_groups=range(n),
                base_version=None,
                app_id="a",
                checkpoint_id=1,
            )
        first_log = log_bytes(uri)[0]
        with measured(row, "replace"):
            v2 = table.commit(
                fake_files(range(n), 2),
                changed_key_groups=range(n),
                base_version=v1,
                app_id="a",
                checkpoint_id=2,
            )
        replace_log = log_bytes(uri)[0] - first_log
        changed = list(range(0, n, 100))
        with measured(row, "incremental"):
            v3 = table.commit(
                fake_files(changed, 3),
                changed_key_groups=changed,
                base_version=v2,
                app_id="a",
                checkpoint_id=3,
            )
        with measured(row, "sizes"):
            table.key_group_sizes(v3)
        with measured(row, "open_files"):
            _table(uri).files(v3)
        with measured(row, "open"):
            DeltaTable(uri)
        opened = _table(uri)
        opened.files(v3)
        with measured(row, "one_key_group"):  # what a checkpoint lookup lists, table open
            opened.files(v3, KeyGroupRange(n // 2, n // 2))
        row.update(
            incremental_files=len(changed),
            first_log=first_log,
            replace_log=replace_log,
            version=v3,
        )
        out.append(row)
        print(f"commit {n}: {row}", flush=True)
    return out


def measure_log(root: str, key_groups: int, commits: int) -> list[dict[str, Any]]:
    """Open time and log bytes of a table whose every commit replaces every key group."""
    from deltalake import DeltaTable

    from statecore.snapshot.log import log_replay_length

    uri = f"{root}/log-{key_groups}"
    table, version, out = _table(uri), None, []
    for checkpoint_id in range(1, commits + 1):
        version = table.commit(
            fake_files(range(key_groups), checkpoint_id),
            changed_key_groups=range(key_groups),
            base_version=version,
            app_id="a",
            checkpoint_id=checkpoint_id,
        )
        if checkpoint_id in (1, 10, 11, 20, 50, 51, 100, 101, 200) or checkpoint_id == commits:
            row: dict[str, Any] = {"commits": checkpoint_id, "version": version}
            with measured(row, "open"):
                DeltaTable(uri)
            with measured(row, "open_files"):
                _table(uri).files(version)
            with measured(row, "open_v1"):  # time travel to an old version
                DeltaTable(uri, version=1)
            row["json_bytes"], row["checkpoint_bytes"] = log_bytes(uri)
            row["replay"] = log_replay_length(uri)
            out.append(row)
            print(f"log {key_groups}: {row}", flush=True)
    return out


def _table_version(uri: str, version: int, key_groups: int, state: str) -> Any:
    from statecore.catalog import TableVersion

    return TableVersion(
        operator=OPERATOR,
        state=state,
        table_kind="keyed",
        path=uri,
        version=version,
        rows=FILE_ROWS * key_groups,
        bytes=FILE_BYTES * key_groups,
        key_groups={kg: (FILE_ROWS, FILE_BYTES) for kg in range(key_groups)},
    )


def measure_catalog(root: str, cases: tuple[tuple[int, int, int], ...]) -> list[dict[str, Any]]:
    """Per checkpoint row: ``(key_groups, tables, checkpoints)`` cases on a SQLite catalog."""
    from statecore.catalog import Catalog, CheckpointKind
    from statecore.checkpoint.retain import retain_checkpoints

    out = []
    for key_groups, tables, checkpoints in cases:
        path = f"{root}/catalog-{key_groups}-{tables}.db"
        job = f"{JOB}{key_groups}x{tables}"
        versions = [_table_version(f"{root}/t{i}", 1, key_groups, f"s{i}") for i in range(tables)]
        row: dict[str, Any] = {
            "key_groups": key_groups,
            "tables": tables,
            "checkpoints": checkpoints,
        }
        with Catalog.connect(f"sqlite:///{path}") as catalog:
            catalog.ensure_job(job, parallelism=PARALLELISM, max_parallelism=MAX_PARALLELISM)
            times = []
            for checkpoint_id in range(1, checkpoints + 1):
                start = time.perf_counter()
                catalog.begin_checkpoint(
                    job,
                    checkpoint_id,
                    kind=CheckpointKind.CHECKPOINT,
                    parallelism=PARALLELISM,
                    max_parallelism=MAX_PARALLELISM,
                )
                catalog.complete_checkpoint(job, checkpoint_id, tables=versions)
                times.append(time.perf_counter() - start)
            row["complete_median"] = statistics.median(times)
            with measured(row, "latest"):
                catalog.latest_checkpoint(job)
            with measured(row, "list_no_tables"):
                catalog.list_checkpoints(job, with_tables=False)
            with measured(row, "list_with_tables"):
                catalog.list_checkpoints(job)
            with measured(row, "retain"):
                result = retain_checkpoints(catalog, job, retain=max(1, checkpoints // 2))
            row["retain_expired"], row["retain_deleted"] = len(result.expired), len(result.deleted)
        row["db_bytes_per_checkpoint"] = os.path.getsize(path) / checkpoints
        out.append(row)
        print(f"catalog: {row}", flush=True)
    return out


def _results(
    files_by_subtask: list[list[Any]], schema: str, descriptor: dict[str, Any]
) -> list[Any]:
    from statecore.runtime.task import StateSnapshotResult

    return [
        StateSnapshotResult(
            state=STATE,
            schema=schema,
            descriptor=descriptor,
            changed_key_groups=tuple(f.key_group for f in files),
            files=tuple(files),
        )
        for files in files_by_subtask
    ]


def driver_cycle(
    home: str,
    *,
    max_parallelism: int = MAX_PARALLELISM,
    parallelism: int = PARALLELISM,
    changed_share: float = 0.01,
    sample_subtasks: int = 20,
) -> dict[str, Any]:
    """One operator through the real coordinator: plan, commit every key group, plan again
    (restoring 32,768 files), commit ``changed_share`` of the key groups; and a subtask's share
    of the restore plan. Every step timed, with its tracemalloc peak."""
    from statecore.backends.base import snapshot_schema
    from statecore.catalog import Catalog
    from statecore.checkpoint.coordinator import CheckpointCoordinator
    from statecore.config import StatecoreConfig
    from statecore.descriptors import ValueStateDescriptor
    from statecore.keygroups import compute_key_group_range_for_operator_index
    from statecore.runtime.shares import TaskShares
    from statecore.types import TypeInfo, schema_to_text

    config = StatecoreConfig.resolve(home=home, env={})
    descriptor = ValueStateDescriptor(STATE, int)
    schema = schema_to_text(snapshot_schema(TypeInfo.of(str), descriptor))
    described = descriptor.describe()
    ranges = [
        compute_key_group_range_for_operator_index(max_parallelism, parallelism, i)
        for i in range(parallelism)
    ]
    out: dict[str, Any] = {"max_parallelism": max_parallelism, "parallelism": parallelism}
    with Catalog.connect(config.catalog_url) as catalog:
        coordinator = CheckpointCoordinator(config, catalog, job=JOB, operator=OPERATOR)
        with measured(out, "plan_empty"):
            planned = coordinator.plan(
                1,
                parallelism=parallelism,
                max_parallelism=max_parallelism,
                default_parallelism=parallelism,
            )
        every = [fake_files(r, 1, i) for i, r in enumerate(ranges)]
        results = _results(every, schema, described)
        del every
        with measured(out, "commit_full"):
            coordinator.commit(planned, results)
        del results
        with measured(out, "plan_restore"):
            planned = coordinator.plan(
                2,
                parallelism=parallelism,
                max_parallelism=max_parallelism,
                default_parallelism=parallelism,
            )
        restore = planned.restore
        out["restore_files"] = sum(len(r.files) for r in restore.states.values())
        with measured(out, "pickle"):
            out["plan_pickled_bytes"] = len(pickle.dumps(restore))
        with measured(out, "cut"):  # each task's part of the plan (TaskShares), once per run
            shares = TaskShares.cut(
                restore, parallelism=parallelism, max_parallelism=max_parallelism
            )
            shipped = pickle.dumps(shares)
        out["shares_pickled_bytes"] = len(shipped)
        step = max(1, parallelism // sample_subtasks)
        sample = list(range(0, parallelism, step))
        out["part_pickled_bytes"] = max(len(shares.parts[i]) for i in sample)
        with measured(out, "subtask_share"):  # as a task: the spec unpickled, then its part
            for i in sample:
                mine = pickle.loads(shipped).share(i)
                mine.task_files(ranges[i], i)
                mine.bytes_to_restore(ranges[i])
                mine.file_paths(ranges[i])
        out["subtask_share"] /= len(sample)
        changed = sorted(
            {int(kg) for kg in range(0, max_parallelism, max(1, int(1 / changed_share)))}
        )
        by_subtask: list[list[Any]] = [[] for _ in range(parallelism)]
        for kg, f in zip(changed, fake_files(changed, 2), strict=True):
            by_subtask[kg * parallelism // max_parallelism].append(f)
        results = _results(by_subtask, schema, described)
        out["incremental_files"] = len(changed)
        with measured(out, "commit_incremental"):
            coordinator.commit(planned, results)
        with measured(out, "plan_after_incremental"):
            coordinator.plan(
                3,
                parallelism=parallelism,
                max_parallelism=max_parallelism,
                default_parallelism=parallelism,
            )
    return out


def proportional_cycle(home: str, *, max_parallelism: int = MAX_PARALLELISM) -> dict[str, Any]:
    """The driver's cost of a checkpoint that changes 1 % of the key groups against one that
    replaces all of them, catalog included: one operator through the real coordinator (a first
    commit of every key group, then a full replace, then a 1 % commit, each after its plan),
    at parallelism ``max_parallelism // 32`` (1,024 at 32,768). ``commit_*`` is the
    coordinator's ``commit`` (Delta commit, key-group sizes, catalog completion); ``plan_*``
    the ``plan`` before it (catalog + restore plan), reported beside it."""
    import statecore
    from statecore.backends.base import snapshot_schema
    from statecore.catalog import Catalog
    from statecore.checkpoint.coordinator import CheckpointCoordinator
    from statecore.config import StatecoreConfig
    from statecore.descriptors import ValueStateDescriptor
    from statecore.keygroups import compute_key_group_range_for_operator_index
    from statecore.types import TypeInfo, schema_to_text

    parallelism = max(1, max_parallelism // 32)
    config = StatecoreConfig.resolve(home=home, env={})
    descriptor = ValueStateDescriptor(STATE, int)
    schema = schema_to_text(snapshot_schema(TypeInfo.of(str), descriptor))
    described = descriptor.describe()
    ranges = [
        compute_key_group_range_for_operator_index(max_parallelism, parallelism, i)
        for i in range(parallelism)
    ]
    out: dict[str, Any] = {
        "max_parallelism": max_parallelism,
        "parallelism": parallelism,
        "statecore": str(Path(statecore.__file__).parent),
    }

    def plan(coordinator: Any, checkpoint_id: int) -> Any:
        return coordinator.plan(
            checkpoint_id,
            parallelism=parallelism,
            max_parallelism=max_parallelism,
            default_parallelism=parallelism,
        )

    def every(checkpoint_id: int) -> list[Any]:
        files = [fake_files(r, checkpoint_id, i) for i, r in enumerate(ranges)]
        return _results(files, schema, described)

    with Catalog.connect(config.catalog_url) as catalog:
        coordinator = CheckpointCoordinator(config, catalog, job=JOB, operator=OPERATOR)
        coordinator.commit(plan(coordinator, 1), every(1))
        with measured(out, "plan_replace"):
            planned = plan(coordinator, 2)
        results = every(2)
        with measured(out, "commit_replace"):
            coordinator.commit(planned, results)
        del results
        changed = list(range(0, max_parallelism, 100))  # 1 %
        by_subtask: list[list[Any]] = [[] for _ in range(parallelism)]
        for f in fake_files(changed, 3):
            by_subtask[f.key_group * parallelism // max_parallelism].append(f)
        with measured(out, "plan_incremental"):
            planned = plan(coordinator, 3)
        results = _results(by_subtask, schema, described)
        out["incremental_files"] = len(changed)
        with measured(out, "commit_incremental"):
            coordinator.commit(planned, results)
    out["ratio"] = out["commit_incremental"] / out["commit_replace"]
    return out


def proportional_before_after(
    root: str, *, before: str, max_parallelism: int, rounds: int
) -> list[dict[str, Any]]:
    """:func:`proportional_cycle` of this tree and of git revision ``before`` (its
    ``statecore/`` exported to a temporary folder), alternating in fresh processes, so both
    run on the same machine under the same load."""
    repo = Path(__file__).resolve().parent.parent
    old = Path(root) / "before"
    old.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", before, "statecore"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
    out = []
    for i in range(rounds):
        for label, tree in (("before", old), ("after", repo)):
            code = (
                f"import sys, json; sys.path.insert(0, {str(tree)!r}); "
                f"sys.path.insert(1, {str(repo)!r}); "
                "from benchmarks.scale import proportional_cycle; "
                f"print(json.dumps(proportional_cycle({f'{root}/{label}-{i}'!r}, "
                f"max_parallelism={max_parallelism})))"
            )
            done = subprocess.run(
                [sys.executable, "-c", code], check=True, capture_output=True, text=True
            )
            row = json.loads(done.stdout.strip().splitlines()[-1])
            row.update(label=label, round=i, revision=before if label == "before" else "HEAD")
            print(f"proportional {label} {i}: {row}", flush=True)
            out.append(row)
    return out


PROPORTIONAL_HEADING = "## Driver cost proportional to change (issue 35)"


def proportional_report(rows: list[dict[str, Any]], when: str, load: float) -> str:
    """The before/after table of :func:`proportional_before_after`, in Markdown (the section
    of ``RESULTS.md`` under :data:`PROPORTIONAL_HEADING`)."""
    after = [r["ratio"] for r in rows if r["label"] == "after"]
    before = [r["ratio"] for r in rows if r["label"] == "before"]
    lines = [
        PROPORTIONAL_HEADING,
        "",
        "`python -m benchmarks.scale --proportional-before REV`: one operator through the real "
        f"coordinator at max parallelism {rows[0]['max_parallelism']:,} and parallelism "
        f"{rows[0]['parallelism']:,}, SQLite catalog, local Delta table, fake file sizes: a full "
        f"replace of every key group, then a commit of {rows[0]['incremental_files']} key groups "
        "(1 %), each after its plan; this tree and revision REV alternating in fresh processes "
        f"in one run ({when}, load average {load:.0f} at the end on the shared 2-core machine). "
        "`commit` is the coordinator's commit: the Delta commit, the key-group sizes and the "
        "catalog's completion; `plan` (catalog + restore plan) is beside it.",
        "",
        f"1 % / full replace, commit: {', '.join(f'{x:.1%}' for x in after)} now, "
        f"{', '.join(f'{x:.1%}' for x in before)} before; plan and commit together: "
        f"{', '.join(f'{_whole(r):.1%}' for r in rows if r['label'] == 'after')} now, "
        f"{', '.join(f'{_whole(r):.1%}' for r in rows if r['label'] == 'before')} before.",
        "",
        "| code | round | plan, full (ms) | commit, full replace (ms) | plan, 1 % (ms) | "
        "commit, 1 % (ms) | "
        "1 % / full (commit) | 1 % / full (plan + commit) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['label']} ({r['revision']}) | {r['round']} | {_ms(r['plan_replace'])} | "
            f"{_ms(r['commit_replace'])} | {_ms(r['plan_incremental'])} | "
            f"{_ms(r['commit_incremental'])} | {r['ratio']:.1%} | {_whole(r):.1%} |"
        )
    return "\n".join(lines) + "\n"


def _whole(row: dict[str, Any]) -> float:
    """A checkpoint's whole driver cost, plan and commit, 1 % against a full replace."""
    return (row["plan_incremental"] + row["commit_incremental"]) / (
        row["plan_replace"] + row["commit_replace"]
    )


# -- the report -----------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f}" if seconds >= 0.01 else f"{seconds * 1000:.1f}"


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f}"


def machine() -> str:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        commit = "?"
    import deltalake

    return (
        f"{os.cpu_count()} cores (shared), python {platform.python_version()}, deltalake "
        f"{deltalake.__version__}, pyarrow {pa.__version__}, statecore commit {commit}, "
        f"load average at start {os.getloadavg()[0]:.1f}"
    )


def report(data: dict[str, Any]) -> str:
    lines = [
        "# Scale: driver costs measured (benchmarks/scale.py)",
        "",
        f"Generated by `python -m benchmarks.scale` on {data['when']} in {data['seconds']:.0f} s."
        " Do not edit by hand; `benchmarks/SCALE.md` projects from these numbers.",
        "",
        f"Machine: {data['machine']}. Files are fake (each {FILE_BYTES:,} bytes, {FILE_ROWS:,} "
        "rows in the log, no data file): the driver never reads a data file. Times are taken "
        "without tracemalloc; the driver cycle's peaks in a second, traced pass (Python objects; "
        "Arrow and delta-rs allocate outside tracemalloc, see the RSS).",
        "",
        "## Commit of N key-group files (`SnapshotTable.commit`, one Delta transaction)",
        "",
        "| files | first commit ms | full replace ms | 1% incremental ms (files) |"
        " key-group sizes ms | open + list files ms | open ms | one key group's files ms |"
        " log bytes first / replace |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in data["commit"]:
        lines.append(
            f"| {r['files']:,} | {_ms(r['first'])} | {_ms(r['replace'])} | "
            f"{_ms(r['incremental'])} ({r['incremental_files']:,}) | {_ms(r['sizes'])} | "
            f"{_ms(r['open_files'])} | {_ms(r['open'])} | {_ms(r['one_key_group'])} | "
            f"{_mb(r['first_log'])} MB / "
            f"{_mb(r['replace_log'])} MB |"
        )
    big = data["commit"][-1]
    lines += [
        "",
        f"Per file: {big['first'] / big['files'] * 1e6:,.0f} µs in a first commit, "
        f"{big['replace'] / big['files'] * 1e6:,.0f} µs in a full replace (a remove and an add), "
        f"{big['first_log'] / big['files']:,.0f} log bytes per add "
        f"({big['files']:,} files).",
        "",
        "## A long log: every commit replaces every key group",
        "",
        "| key groups | commits | open head ms | open + list files ms | open version 1 ms |"
        " replayed commits | JSON log MB | newest log checkpoint MB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in data["log"]:
        lines.append(
            f"| {data['log_key_groups']:,} | {r['commits']} | {_ms(r['open'])} | "
            f"{_ms(r['open_files'])} | {_ms(r['open_v1'])} | {r['replay']} | "
            f"{_mb(r['json_bytes'])} | {_mb(r['checkpoint_bytes'])} |"
        )
    lines += [
        "",
        "## Catalog rows (SQLite; one row per checkpoint + one per table version, with its"
        " key-group sizes as JSON)",
        "",
        "| key groups | tables | checkpoints | begin + complete ms | latest checkpoint ms |"
        " list without tables ms | list with tables ms | retain half ms (expired) |"
        " DB bytes per checkpoint |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in data["catalog"]:
        lines.append(
            f"| {r['key_groups']:,} | {r['tables']} | {r['checkpoints']} | "
            f"{_ms(r['complete_median'])} | {_ms(r['latest'])} | {_ms(r['list_no_tables'])} | "
            f"{_ms(r['list_with_tables'])} | {_ms(r['retain'])} ({r['retain_expired']}) | "
            f"{r['db_bytes_per_checkpoint']:,.0f} |"
        )
    d = data["driver"]
    lines += [
        "",
        f"## The driver's cycle at max parallelism {d['max_parallelism']:,}, parallelism "
        f"{d['parallelism']:,} (one keyed state; real coordinator, SQLite catalog, local Delta)",
        "",
        "| step | ms | tracemalloc peak MB |",
        "|---|---:|---:|",
    ]
    steps = [
        ("plan (no checkpoint yet)", "plan_empty"),
        (
            f"commit: {d['parallelism']:,} subtasks' results, {d['restore_files']:,} files",
            "commit_full",
        ),
        (f"plan: restore plan of {d['restore_files']:,} files", "plan_restore"),
        (f"pickle the restore plan ({_mb(d['plan_pickled_bytes'])} MB)", "pickle"),
        (
            f"cut the plan into each subtask's part ({_mb(d['shares_pickled_bytes'])} MB "
            f"pickled, a part at most {d['part_pickled_bytes'] / 1e3:,.1f} KB)",
            "cut",
        ),
        (
            "a subtask's share (spec unpickled, its part; task_files + bytes_to_restore + "
            "file_paths), each",
            "subtask_share",
        ),
        (f"commit: {d['incremental_files']:,} changed key groups", "commit_incremental"),
        ("plan after the incremental commit", "plan_after_incremental"),
    ]
    for label, key in steps:
        lines.append(f"| {label} | {_ms(d[key])} | {_mb(d[key + '_peak'])} |")
    lines += [
        "",
        f"Peak RSS of the whole run: {data['rss'] / 2**20:,.0f} MiB; load average at the end "
        f"{data['load_end']:.1f}.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    parser.add_argument("--no-write", action="store_true", help=f"do not write {RESULTS.name}")
    parser.add_argument(
        "--proportional-before",
        metavar="REV",
        help="only the 1 %% commit against a full replace, of this tree and of git revision REV "
        "in the same run (into RESULTS.md)",
    )
    parser.add_argument("--key-groups", type=int, default=MAX_PARALLELISM)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    if args.proportional_before:
        with tempfile.TemporaryDirectory(prefix="statecore-scale-") as root:
            rows = proportional_before_after(
                root,
                before=args.proportional_before,
                max_parallelism=args.key_groups,
                rounds=args.rounds,
            )
        when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        section = proportional_report(rows, when, os.getloadavg()[0])
        print(section)
        if not args.no_write:
            path = Path(__file__).with_name("RESULTS.md")
            path.write_text(replace_section(path.read_text(), PROPORTIONAL_HEADING, section))
        return
    started = time.perf_counter()
    data: dict[str, Any] = {
        "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
    }
    sizes = (128, 1_024) if args.quick else (128, 1_024, 8_192, 32_768)
    data["log_key_groups"] = 128 if args.quick else 1_024
    with tempfile.TemporaryDirectory(prefix="statecore-scale-") as root:
        data["commit"] = measure_commit(root, sizes)
        data["log"] = measure_log(root, data["log_key_groups"], 20 if args.quick else 101)
        cases = (
            ((1_024, 1, 20), (32_768, 1, 12))
            if args.quick
            else (
                (1_024, 1, 100),
                (1_024, 4, 25),
                (32_768, 1, 12),
                (32_768, 4, 6),
            )
        )
        data["catalog"] = measure_catalog(root, cases)
        shape = {"max_parallelism": 1_024, "parallelism": 100} if args.quick else {}
        data["driver"] = driver_cycle(f"{root}/home", **shape)
        TRACE["on"] = True
        traced = driver_cycle(f"{root}/traced", **shape)
        TRACE["on"] = False
        data["driver"].update({k: v for k, v in traced.items() if k.endswith("_peak")})
        print(f"driver: {data['driver']}", flush=True)
    data["load_end"] = os.getloadavg()[0]
    data["rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    data["seconds"] = time.perf_counter() - started
    text = report(data)
    print(text)
    if not args.no_write:
        RESULTS.write_text(text)


if __name__ == "__main__":
    main()
