"""The cluster tests' Spark driver, run in a subprocess with a session on the standalone master.

``python -m tests.cluster.job SPEC_JSON`` runs one scenario (``spec["scenario"]``) and writes what
it saw to ``spec["result"]`` (JSON). The job is the fault suite's (:mod:`tests.faults.scenario`:
per user a running ``total`` and the ``seqs`` of its events, per subtask the records
``processed``, one output row per event), so its outcome compares with the pandas expectation
that a clean ``local[2]`` run is tested equal to. Its function here also leaves a *probe* per
task (:class:`Probed`): which executor (and Python worker) ran which subtask of which checkpoint,
and whether the task continued its state warm.

Scenarios:

``batch``
    the runs of ``spec["runs"]``, in order: ``{"home", "api", "backend", "parallelism",
    "checkpoint"}``, optionally ``"restore_from"`` (a savepoint folder), or an operation
    ``{"home", "rescale": p}`` / ``{"home", "savepoint": name}``;
``stream``
    a ``keyed_stream`` over the JSON files of ``spec["input"]`` (one per micro-batch), then a
    live lookup of every user, each with the executor whose Python worker answered;
``run``
    checkpoints ``spec["checkpoints"]`` of one combination (a fault test's run: with
    ``spec["pause"]`` each task of the per-record API waits at its first record until
    ``<pause>/go`` exists).
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any, ClassVar

import psutil

from statecore.config import StatecoreConfig
from tests.faults import scenario
from tests.faults.harness import LEASE_ENV
from tests.faults.scenario import ARROW_BATCH_ROWS, INPUT, JOB, OUTPUT, PerRecord, Vectorized

REPO = Path(__file__).resolve().parents[2]
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xshare:auto"
ROCKSDB_LOCAL = "rocksdb-local"
"""RocksDB's local directory, relative: a Python worker's working directory is its executor's
(``<worker dir>/<app>/<executor>``), so each executor keeps its instances on its own disk, as
``RocksDBOptions(local_directory=...)`` on executor-local disk does on a real cluster."""


def executor_of(pid: int) -> dict[str, Any]:
    """The Spark executor a process runs under: its id and JVM pid (``driver`` on ``local``).
    A stream's task runs in a warm state host, whose executor is the one it names."""
    from statecore.spark.host import EXECUTOR_ENV

    process: psutil.Process | None = psutil.Process(pid)
    try:
        host_of = process.environ().get(EXECUTOR_ENV)  # type: ignore[union-attr]
    except psutil.Error:
        host_of = None
    if host_of:
        process = psutil.Process(int(host_of))
    while process is not None:
        try:
            command = process.cmdline()
        except psutil.Error:
            break
        if "--executor-id" in command:
            return {"executor": command[command.index("--executor-id") + 1], "jvm": process.pid}
        process = process.parent()
    return {"executor": "driver", "jvm": None}


class _Probe:
    """Leaves ``<probe_dir>/<checkpoint>-<subtask>-<pid>-<uuid>.json`` per task: where it ran and
    whether it continued the state its Python worker kept (the kept operator state store is
    the very object of the last run; a restored one is new), and else how its backend restored
    (RocksDB: key groups reopened from the executor's local instance, or ingested)."""

    _seen: ClassVar[list[Any]] = []  # the operator state stores this Python worker's tasks had

    def __init__(self, probe_dir: str, pause_dir: str | None = None) -> None:
        self.probe_dir = probe_dir
        self.pause_dir = pause_dir

    def initialize_state(self, context: Any) -> None:
        store = context.operator_state_store
        self.warm = any(store is seen for seen in _Probe._seen)
        if not self.warm:
            _Probe._seen.append(store)
        super().initialize_state(context)  # type: ignore[misc]

    def open(self, ctx: Any) -> None:
        super().open(ctx)  # type: ignore[misc]
        self.subtask = ctx.subtask_index
        self.backend = ctx.backend

    def pause(self) -> None:
        """With a ``pause_dir``, wait (once per task) until ``<pause_dir>/go`` exists."""
        if self.pause_dir is None or getattr(self, "paused", False):
            return
        self.paused = True
        folder = Path(self.pause_dir)
        (folder / f"paused-{self.subtask}-{os.getpid()}").touch()
        deadline = time.monotonic() + 120
        while not (folder / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.05)

    def snapshot_state(self, context: Any) -> None:
        super().snapshot_state(context)  # type: ignore[misc]
        probe = {
            "checkpoint": context.checkpoint_id,
            "subtask": self.subtask,
            "pid": os.getpid(),
            "warm": self.warm,
            "restore": {} if self.warm else self.backend.restore_metrics(),
            **executor_of(os.getpid()),
        }
        name = f"{context.checkpoint_id}-{self.subtask}-{os.getpid()}-{uuid.uuid4().hex}.json"
        (Path(self.probe_dir) / name).write_text(json.dumps(probe))


class Probed(_Probe, PerRecord):
    """The per-record function of the fault suite, probed; with a ``pause_dir`` each task
    pauses at its first record (mid-run: restored, input read, nothing snapshotted)."""

    def process_element(self, value: Any, ctx: Any) -> Any:
        self.pause()
        return super().process_element(value, ctx)


class ProbedVectorized(_Probe, Vectorized):
    """The vectorized function of the fault suite, probed."""


def read_probes(probe_dir: Path) -> list[dict[str, Any]]:
    return sorted(
        (json.loads(p.read_text()) for p in probe_dir.glob("*.json")),
        key=lambda p: (p["checkpoint"], p["subtask"]),
    )


def spark_session(master: str, app: str) -> Any:
    """statecore's session (:func:`~statecore.spark.session.build_session`: the driver on the
    loopback for a master on this machine, Delta's JARs) on ``master``, executors on this venv's
    Python with the repository importable; jobs wait until both executors registered."""
    from statecore.spark.session import build_session

    conf = {
        "spark.ui.enabled": "false",
        "spark.driver.extraJavaOptions": JVM_OPTIONS,
        "spark.executor.extraJavaOptions": JVM_OPTIONS,
        "spark.executor.memory": "768m",
        "spark.executor.cores": "1",
        "spark.cores.max": "2",
        "spark.pyspark.python": sys.executable,
        "spark.executorEnv.PYTHONPATH": str(REPO),
        "spark.executorEnv.SPARK_LOCAL_IP": "127.0.0.1",
        "spark.python.worker.reuse": "true",
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(ARROW_BATCH_ROWS),
    }
    return build_session(master=master, app_name=app, config=conf, log_level="ERROR")


def backend_options(backend: str) -> Any:
    if backend != "rocksdb":
        return None
    from statecore.backends.rocksdb import RocksDBOptions

    return RocksDBOptions(local_directory=ROCKSDB_LOCAL)


def run_checkpoint(spark: Any, run: dict[str, Any], probe_dir: str) -> dict[str, Any]:
    """One checkpoint of the fault suite's job on ``spark``; its restore counters."""
    from statecore.spark import keyed_process, keyed_process_batches

    config = StatecoreConfig.resolve(home=run["home"], env=LEASE_ENV)
    df = spark.createDataFrame(scenario.events(run["checkpoint"]), INPUT)
    common: dict[str, Any] = {
        "key": "user",
        "output_schema": OUTPUT,
        "job": JOB,
        "checkpoint_id": run["checkpoint"],
        "parallelism": run["parallelism"],
        "order_by": ["seq"],
        "backend": run["backend"],
        "backend_options": backend_options(run["backend"]),
        "config": config,
        "output_table": scenario.output_table(config),
        "restore_from": run.get("restore_from"),
    }
    pause = run.get("pause")
    deadline = time.monotonic() + run.get("retry_for", 0.0)
    while True:
        try:
            if run["api"] == "record":
                done = keyed_process(df, function=Probed(probe_dir, pause), **common)
            else:
                function = ProbedVectorized(probe_dir, pause)
                done = keyed_process_batches(
                    df, function=function, batch_rows=ARROW_BATCH_ROWS, **common
                )
            return dict(done.restore)
        except scenario._RETRYABLE:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def operation(run: dict[str, Any]) -> dict[str, Any]:
    from statecore.catalog import Catalog
    from statecore.ops.rescale import rescale
    from statecore.ops.savepoint import take_savepoint

    config = StatecoreConfig.resolve(home=run["home"], env=LEASE_ENV)
    with Catalog.connect(config.catalog_url) as catalog:
        if "rescale" in run:
            result = rescale(config, catalog, JOB, parallelism=run["rescale"])
            return {"rescaled_to": result.parallelism}
        point = take_savepoint(config, catalog, JOB, name=run["savepoint"])
        return {"savepoint": point.savepoint}


def batch(spark: Any, spec: dict[str, Any]) -> dict[str, Any]:
    steps = []
    for run in spec["runs"]:
        began = time.monotonic()
        if "checkpoint" in run:
            outcome: dict[str, Any] = {"restore": run_checkpoint(spark, run, spec["probes"])}
        else:
            outcome = operation(run)
        steps.append({**run, **outcome, "seconds": round(time.monotonic() - began, 1)})
    return {"steps": steps}


def stream(spark: Any, spec: dict[str, Any]) -> dict[str, Any]:
    from statecore.catalog import Catalog
    from statecore.query.lookup import lookup
    from statecore.spark import keyed_stream

    config = StatecoreConfig.resolve(home=spec["home"], env=LEASE_ENV)
    began = time.monotonic()
    source = spark.readStream.schema(INPUT).option("maxFilesPerTrigger", 1).json(spec["input"])
    query = keyed_stream(
        source,
        key="user",
        function=Probed(spec["probes"]),
        output_schema=OUTPUT,
        job=JOB,
        checkpoint_location=spec["checkpoint_location"],
        output_table=scenario.output_table(config),
        order_by=["seq"],
        parallelism=spec["parallelism"],
        backend=spec["backend"],
        backend_options=backend_options(spec["backend"]),
        config=config,
        trigger={"availableNow": True},
        retain_checkpoints=None,
        live_lookups=True,
    )
    query.awaitTermination()
    stream_seconds = time.monotonic() - began
    with Catalog.connect(config.catalog_url) as catalog:
        endpoints = catalog.live_endpoints(JOB)
    servers = {}
    for endpoint in endpoints:  # which process listens on each task's address
        host, _, port = endpoint.address.rpartition(":")
        [pid] = {
            c.pid
            for c in psutil.net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == int(port)
        }
        servers[endpoint.subtask] = {
            "address": endpoint.address,
            "host": host,
            "pid": pid,
            "key_group_start": endpoint.key_group_start,
            "key_group_end": endpoint.key_group_end,
            "checkpoint": endpoint.checkpoint_id,
            **executor_of(pid),
        }
    lookups = []
    for user in spec["users"]:
        found = lookup(JOB, "total", user, live=True, config=config)
        [subtask] = [
            s
            for s, e in servers.items()
            if e["key_group_start"] <= found.key_group <= e["key_group_end"]
        ]
        lookups.append(
            {
                "key": user,
                "value": found.value,
                "live": found.live,
                "fallback": found.fallback,
                "subtask": subtask,
                "executor": servers[subtask]["executor"],
            }
        )
    return {
        "stream_seconds": round(stream_seconds, 1),
        "servers": servers,
        "lookups": lookups,
    }


def run(spark: Any, spec: dict[str, Any]) -> dict[str, Any]:
    restores = []
    for checkpoint_id in spec["checkpoints"]:
        restores.append(
            run_checkpoint(spark, {**spec, "checkpoint": checkpoint_id}, spec["probes"])
        )
        print(f"checkpoint {checkpoint_id} done", flush=True)
    return {"restores": restores}


SCENARIOS = {"batch": batch, "stream": stream, "run": run}


def main() -> None:
    spec = json.loads(sys.argv[1])
    os.environ["PYSPARK_PYTHON"] = sys.executable
    Path(spec["probes"]).mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    spark = spark_session(spec["master"], f"statecore-cluster-{spec['scenario']}")
    session_seconds = time.monotonic() - began
    result = SCENARIOS[spec["scenario"]](spark, spec)
    result["session_seconds"] = round(session_seconds, 1)
    Path(spec["result"]).write_text(json.dumps(result, default=str))
    spark.stop()


if __name__ == "__main__":  # run the module's own copy: its classes pickle by reference
    from tests.cluster import job

    job.main()
