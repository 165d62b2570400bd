"""The jobs' input location goes from values to the DAG and the job: STATECORE_INPUT in the
Airflow pods and the Spark driver and executors, with the claim that holds it mounted read-only."""

from __future__ import annotations

from collections.abc import Callable
from subprocess import CompletedProcess
from typing import Any

import pytest
import yaml
from helm_chart import FULLNAME, REPO, Manifests

pytestmark = pytest.mark.helm

CLAIMED = "/opt/statecore/input"  # ci/kubernetes-executor-values.yaml: on claim clickstream-input


def render(helm_template: Callable[..., CompletedProcess[str]], *args: str) -> Manifests:
    result = helm_template(*args)
    assert result.returncode == 0, result.stderr
    docs = tuple(d for d in yaml.safe_load_all(result.stdout) if d)
    return Manifests(scenario="custom", text=result.stdout, docs=docs)


def config(manifests: Manifests) -> dict[str, str]:
    return manifests.get("ConfigMap", f"{FULLNAME}-config")["data"]


def spark_defaults(manifests: Manifests) -> dict[str, str]:
    lines = config(manifests)["spark-defaults.conf"].splitlines()
    return dict(line.split(" ", 1) for line in lines if line.strip())


def airflow_pods(manifests: Manifests) -> list[tuple[str, dict[str, Any]]]:
    """Every pod that runs Airflow or spark-submit (not Postgres, the Spark pods or the HTTP
    health check of `helm test`)."""
    others = ("postgresql", "spark-pod-template", "test-api-server-health")
    return [
        (where, spec)
        for where, spec, _ in manifests.pod_specs()
        if not any(other in where for other in others)
    ]


def input_mounts(pod_spec: dict[str, Any]) -> list[dict[str, Any]]:
    containers = pod_spec["containers"] + pod_spec.get("initContainers", [])
    return [m for c in containers for m in c.get("volumeMounts", []) if m["name"] == "input"]


def test_dag_and_job_read_statecore_input() -> None:
    """The variable the chart sets is the one the DAG's `input` param and the job default to."""
    for path in ("dags/stateful_pipeline.py", "jobs/clickstream.py"):
        assert 'os.environ.get("STATECORE_INPUT")' in (REPO / path).read_text(), path


def test_no_input_value_leaves_the_default_under_statecore_home(
    rendered: dict[str, Manifests],
) -> None:
    manifests = rendered["default"]
    assert "STATECORE_INPUT" not in config(manifests)
    assert not [k for k in spark_defaults(manifests) if "STATECORE_INPUT" in k or ".input." in k]
    for where, spec in airflow_pods(manifests):
        assert input_mounts(spec) == [], where


def test_input_on_a_claim_is_mounted_read_only_everywhere_it_is_read(
    rendered: dict[str, Manifests],
) -> None:
    manifests = rendered["kubernetes-executor"]
    assert config(manifests)["STATECORE_INPUT"] == CLAIMED
    pods = airflow_pods(manifests)
    # the workers (the DAG's check task) among them
    assert any(where.endswith("pod_template_file.yaml") for where, _ in pods)
    for where, spec in pods:
        (volume,) = [v for v in spec["volumes"] if v["name"] == "input"]
        assert volume["persistentVolumeClaim"] == {
            "claimName": "clickstream-input",
            "readOnly": True,
        }, where
        for mount in input_mounts(spec):
            assert mount == {"name": "input", "mountPath": CLAIMED, "readOnly": True}, where
        assert input_mounts(spec), where
    conf = spark_defaults(manifests)
    for role in ("driver", "executor"):
        prefix = f"spark.kubernetes.{role}.volumes.persistentVolumeClaim.input"
        assert conf[f"{prefix}.options.claimName"] == "clickstream-input"
        assert conf[f"{prefix}.mount.path"] == CLAIMED
        assert conf[f"{prefix}.mount.readOnly"] == "true"
    assert conf["spark.kubernetes.driverEnv.STATECORE_INPUT"] == CLAIMED
    assert conf["spark.executorEnv.STATECORE_INPUT"] == CLAIMED


def test_input_on_s3_needs_no_mount_and_spark_reads_it_with_s3a(
    rendered: dict[str, Manifests], helm_template: Callable[..., CompletedProcess[str]]
) -> None:
    manifests = rendered["s3-warehouse"]
    assert config(manifests)["STATECORE_INPUT"] == "s3://statecore-raw/clickstream"
    conf = spark_defaults(manifests)
    assert conf["spark.kubernetes.driverEnv.STATECORE_INPUT"] == "s3://statecore-raw/clickstream"
    assert conf["spark.executorEnv.STATECORE_INPUT"] == "s3://statecore-raw/clickstream"
    for where, spec in airflow_pods(manifests):
        assert input_mounts(spec) == [], where
    # An S3 input beside a PVC warehouse: Spark still reads s3:// with S3A.
    pvc_warehouse = render(helm_template, "--set", "statecore.input.location=s3://raw/clickstream/")
    assert config(pvc_warehouse)["STATECORE_INPUT"] == "s3://raw/clickstream"
    assert (
        spark_defaults(pvc_warehouse)["spark.hadoop.fs.s3.impl"]
        == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    )


def test_input_under_the_warehouse_claim_uses_that_mount(
    helm_template: Callable[..., CompletedProcess[str]],
) -> None:
    manifests = render(
        helm_template, "--set", "statecore.input.location=/opt/statecore/warehouse/input"
    )
    assert config(manifests)["STATECORE_INPUT"] == "/opt/statecore/warehouse/input"
    assert (
        spark_defaults(manifests)["spark.executorEnv.STATECORE_INPUT"]
        == "/opt/statecore/warehouse/input"
    )
    for where, spec in airflow_pods(manifests):
        assert input_mounts(spec) == [], where
        assert any(v["name"] == "warehouse" for v in spec["volumes"]), where


def test_input_claim_sub_path(helm_template: Callable[..., CompletedProcess[str]]) -> None:
    manifests = render(
        helm_template,
        "--set", "statecore.input.location=/data/clickstream",
        "--set", "statecore.input.existingClaim=raw",
        "--set", "statecore.input.subPath=events/clickstream",
    )  # fmt: skip
    for where, spec in airflow_pods(manifests):
        for mount in input_mounts(spec):
            assert mount["subPath"] == "events/clickstream", where
    conf = spark_defaults(manifests)
    assert (
        conf["spark.kubernetes.driver.volumes.persistentVolumeClaim.input.mount.subPath"]
        == "events/clickstream"
    )
