"""Every DAG's templated fields rendered as a user's trigger renders them: with its params'
defaults (the Trigger form submitted unchanged), and with each param set to each edge of its
schema (null, minimum, maximum, every enum member, both booleans) while the others keep their
defaults; for a run triggered from the UI or the REST API (no logical date) and a scheduled one.
Every field must render, and every Spark job's rendered arguments must parse with the job's own
parser: ``streaming_pipeline`` triggered with its defaults once failed with
``argument --max-files-per-trigger: invalid int value: ''``.

The DAGs run end to end with their defaults in ``test_default_params_runs.py`` (every
operations and streaming DAG on the demo's job), ``test_schedule.py`` (``stateful_pipeline``)
and, for ``streaming_kafka`` (no broker configured: the run is skipped before Spark),
``tests/kafka/test_kafka_dag.py``; this test covers every param edge, which no run could
afford."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jobs import clickstream, clickstream_kafka, clickstream_stream
from statecore.cli.demo import airflow_environment
from tests.airflow.dagrun import REPO

pytestmark = pytest.mark.airflow

RENDER = """
import json, sys
import pendulum
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk.definitions.param import ParamsDict

bag = DagBag(dag_folder=sys.argv[1])
assert not bag.import_errors, bag.import_errors


class DagRun:  # what a template may read of the run
    def __init__(self, logical_date, run_after, conf):
        self.logical_date, self.run_after, self.conf = logical_date, run_after, conf
        self.run_id = "manual__" + run_after.isoformat()


class TaskInstance:  # an upstream task's XCom, as the task returned it
    def xcom_pull(self, task_ids=None, key="return_value", **kwargs):
        if task_ids == "check":  # streaming_kafka's: the bootstrap servers it resolved
            return "broker-1:9092"
        return {"name": "upstream", "kind": "pin", "path": None, "checkpoint_id": 1}


def edges(schema):
    types = schema.get("type", [])
    types = [types] if isinstance(types, str) else types
    out = []
    if "null" in types:
        out.append(None)
    for key in ("minimum", "maximum"):
        if key in schema:
            out.append(schema[key])
    out.extend(schema.get("enum", []))
    if "boolean" in types:
        out.extend([True, False])
    if schema.get("format") == "date":
        out.append("2026-01-02")
    return out


results = []
now = pendulum.datetime(2026, 2, 1, 12, tz="UTC")
for dag_id, dag in sorted(bag.dags.items()):
    defaults = {name: dag.params[name] for name in dag.params}
    cases = [("defaults", defaults)]
    for name in dag.params:
        schema = dag.params.get_param(name).schema
        for value in edges(schema):
            cases.append((f"{name}={value!r}", {**defaults, name: value}))
    env = dag.get_template_env()
    for label, params in cases:
        checked = ParamsDict({k: dag.params.get_param(k) for k in dag.params})
        checked.update(params)
        checked.validate()  # the values a user can submit
        for trigger, logical_date in (("manual", None), ("scheduled", now)):
            run = DagRun(logical_date, now, params)
            ds = logical_date and logical_date.format("YYYY-MM-DD")
            context = {"params": checked, "dag_run": run, "run_id": run.run_id, "dag": dag,
                       "ti": TaskInstance(), "logical_date": logical_date, "ds": ds}
            for task in dag.tasks:
                rendered = {}
                partial = getattr(task, "partial_kwargs", None)  # a mapped task's fixed fields
                for field in task.template_fields:
                    if partial is not None and field not in partial:
                        continue  # mapped: its value comes from upstream (a job's name)
                    value = partial[field] if partial is not None else getattr(task, field, None)
                    try:
                        rendered[field] = task.render_template(value, context, env)
                    except Exception as exc:
                        rendered[field] = {"error": f"{type(exc).__name__}: {exc}"}
                results.append({"dag": dag_id, "case": label, "trigger": trigger,
                                "task": task.task_id, "operator": type(task).__name__,
                                "application": getattr(task, "application", None),
                                "rendered": rendered})
print("RESULT " + json.dumps(results, default=str))
"""

PARSERS = {
    "clickstream.py": clickstream.parse_args,
    "clickstream_stream.py": clickstream_stream.parse_args,
    "clickstream_kafka.py": clickstream_kafka.parse_args,
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    env = airflow_environment(REPO, tmp_path_factory.mktemp("render") / "home")
    done = subprocess.run(
        [sys.executable, "-c", RENDER, str(REPO / "dags")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    [line] = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(line[len("RESULT ") :])  # type: ignore[no-any-return]


def test_default_params_every_templated_field_renders(rendered: list[dict[str, Any]]) -> None:
    dags = {r["dag"] for r in rendered}
    assert {"stateful_pipeline", "streaming_pipeline", "rescale", "savepoint"} <= dags
    errors = [
        (r["dag"], r["case"], r["trigger"], r["task"], field, value["error"])
        for r in rendered
        for field, value in r["rendered"].items()
        if isinstance(value, dict) and set(value) == {"error"}
    ]
    assert errors == []


def test_default_params_spark_job_arguments_parse(rendered: list[dict[str, Any]]) -> None:
    submits = [r for r in rendered if r["operator"] == "SparkSubmitOperator"]
    assert {r["dag"] for r in submits} >= {
        "stateful_pipeline",
        "streaming_pipeline",
        "streaming_kafka",
    }
    for r in submits:
        parse = PARSERS[Path(r["application"]).name]
        args = r["rendered"]["application_args"]
        assert isinstance(args, list), r
        try:
            parse([str(a) for a in args])
        except SystemExit:
            pytest.fail(
                f"{r['dag']}.{r['task']} with {r['case']} ({r['trigger']} run) renders "
                f"arguments its job refuses: {shlex.join(map(str, args))}"
            )


def test_default_params_defaults_render_the_documented_values(
    rendered: list[dict[str, Any]],
) -> None:
    """With the defaults, a manual run of the daily pipeline processes the run's own date, the
    stream takes every new file per trigger (no limit), and the Kafka stream reads the topic
    ``clicks`` from the servers the ``check`` task resolved, every new record per trigger, with
    the Kafka source's JARs of ``make jars``."""
    by = {(r["dag"], r["case"], r["trigger"], r["task"]): r["rendered"] for r in rendered}
    daily = parse_for(by[("stateful_pipeline", "defaults", "manual", "clickstream")])
    assert daily.date.isoformat() == "2026-02-01"
    assert daily.parallelism is None and daily.from_savepoint == ""
    stream = clickstream_stream.parse_args(
        by[("streaming_pipeline", "defaults", "manual", "increment")]["application_args"]
    )
    assert stream.max_files_per_trigger is None and stream.parallelism is None
    kafka = by[("streaming_kafka", "defaults", "manual", "increment")]
    parsed = clickstream_kafka.parse_args([str(a) for a in kafka["application_args"]])
    assert parsed.topic == "clicks" and parsed.starting_offsets == "earliest"
    assert parsed.bootstrap_servers == "broker-1:9092"  # the check task's XCom
    assert parsed.max_offsets_per_trigger is None and parsed.parallelism is None
    assert "spark-sql-kafka-0-10_2.13-" in kafka["jars"]


def parse_for(rendered: dict[str, Any]) -> Any:
    return clickstream.parse_args([str(a) for a in rendered["application_args"]])


def test_default_params_state_maintenance_retention_renders_the_library_defaults(
    rendered: list[dict[str, Any]],
) -> None:
    """With the defaults, ``state_maintenance``'s retention keeps an hour of log entries
    (``LOG_GRACE``) and cuts no output table (the JSON of an empty list); each output path
    given renders into that list."""
    from statecore.snapshot.log import LOG_GRACE

    retention = {
        (r["case"], r["trigger"]): r["rendered"]
        for r in rendered
        if r["dag"] == "state_maintenance" and r["task"] == "retention"
    }
    for trigger in ("manual", "scheduled"):
        fields = retention[("defaults", trigger)]
        assert float(fields["log_grace_seconds"]) == LOG_GRACE.total_seconds()
        assert json.loads(fields["outputs"]) == []
    assert float(retention[("log_grace_seconds=0", "manual")]["log_grace_seconds"]) == 0


def test_own_query_streaming_dags_default_to_jobs_and_locations_of_their_own(
    rendered: list[dict[str, Any]],
) -> None:
    """With their defaults, the three streaming DAGs run three jobs, so three Spark checkpoint
    locations (``<home>/streaming/<job>``) and output tables: after ``streaming_pipeline`` ran,
    ``streaming_query`` once failed on its location ("There are [1] sources in the checkpoint
    offsets and now there are [2] sources"). Each passes its query the run's id, which the
    driver keeps in its status; ``streaming_query_stop`` stops ``streaming_query``'s job."""
    by = {(r["dag"], r["case"], r["trigger"], r["task"]): r["rendered"] for r in rendered}
    submits = {
        dag: by[(dag, "defaults", "manual", task)]["application_args"]
        for dag, task in (
            ("streaming_pipeline", "increment"),
            ("streaming_query", "query"),
            ("streaming_kafka", "increment"),
        )
    }
    pipeline = clickstream_stream.parse_args([str(a) for a in submits["streaming_pipeline"]])
    query = clickstream_stream.parse_args([str(a) for a in submits["streaming_query"]])
    kafka = clickstream_kafka.parse_args([str(a) for a in submits["streaming_kafka"]])
    jobs = [pipeline.job, query.job, kafka.job]
    assert jobs == ["clickstream_stream", "clickstream_query", "clickstream_kafka"]
    assert [a.checkpoint_location or None for a in (pipeline, query, kafka)] == [None] * 3
    run = "manual__2026-02-01T12:00:00+00:00"
    assert [pipeline.run_id, query.run_id, kafka.run_id] == [
        f"streaming_pipeline/{run}",
        f"streaming_query/{run}",
        f"streaming_kafka/{run}",
    ]
    stop = by[("streaming_query_stop", "defaults", "manual", "stop")]
    watch = by[("streaming_query", "defaults", "manual", "watch")]
    assert stop["job"] == watch["job"] == query.job
