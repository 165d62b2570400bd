"""The Dockerfile cannot be built here; check that it agrees with the lock and with the chart."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml
from helm_chart import CHART, REPO

pytestmark = pytest.mark.helm

DOCKERFILE = (REPO / "Dockerfile").read_text()


def locked(package: str) -> str:
    match = re.search(rf"^{re.escape(package)}==(\S+)$", (REPO / "requirements.lock").read_text(), re.MULTILINE)
    assert match, f"{package} is not in requirements.lock"
    return match.group(1)


def arg(name: str) -> str:
    match = re.search(rf"^ARG {name}=(\S*)$", DOCKERFILE, re.MULTILINE)
    assert match, f"ARG {name} is not set in the Dockerfile"
    return match.group(1)


def heredoc(delimiter: str) -> str:
    match = re.search(rf"<<'{delimiter}'[^\n]*\n(.*?)\n{delimiter}\n", DOCKERFILE, re.DOTALL)
    assert match, f"no <<'{delimiter}' heredoc in the Dockerfile"
    return match.group(1)


def test_python_and_java_versions_match_the_project() -> None:
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert ">=3.11" in requires
    assert arg("PYTHON_IMAGE").startswith("python:3.11-")
    assert "openjdk-17-jre-headless" in DOCKERFILE


def test_installs_exactly_the_lock_then_the_project_without_dependencies() -> None:
    assert "pip install --no-deps -r requirements.lock" in DOCKERFILE
    assert "pip install --no-deps ." in DOCKERFILE


def test_delta_jars_target_the_locked_spark() -> None:
    spark_minor = ".".join(locked("pyspark").split(".")[:2])
    assert arg("DELTA_SPARK_ARTIFACT") == f"delta-spark_{spark_minor}_2.13"
    assert re.fullmatch(r"4\.\d+\.\d+", arg("DELTA_VERSION"))
    script = heredoc("PY")
    compile(script, "Dockerfile:PY", "exec")
    for package in ("io.delta:{artifact}:{delta}", "io.delta:delta-storage:{delta}", "org.apache.hadoop:hadoop-aws:{hadoop}"):
        assert package in script


def test_image_layout_matches_the_chart() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert arg("AIRFLOW_UID") == str(values["uid"])
    assert re.search(r"^USER \$\{AIRFLOW_UID\}$", DOCKERFILE, re.MULTILINE)
    airflow_cfg = (CHART / "templates" / "airflow-configmap.yaml").read_text()
    for folder in ("dags", "plugins"):
        assert f'"{folder}_folder" "/opt/airflow/{folder}"' in airflow_cfg
        assert f"/src/{folder}/ /opt/airflow/{folder}/" in DOCKERFILE
    # The DAGs find their jobs beside them, as in the repository.
    assert "/src/jobs/ /opt/airflow/jobs/" in DOCKERFILE


def test_entrypoint_passes_airflow_commands_through(tmp_path: Path) -> None:
    entrypoint = tmp_path / "entrypoint"
    entrypoint.write_text(heredoc("SH"))
    subprocess.run(["bash", "-n", str(entrypoint)], check=True)
    out = subprocess.run(["bash", str(entrypoint), "echo", "airflow", "scheduler"], capture_output=True, text=True)
    assert out.stdout == "airflow scheduler\n"


def test_entrypoint_starts_spark_executors_like_spark_does(tmp_path: Path) -> None:
    entrypoint = tmp_path / "entrypoint"
    entrypoint.write_text(heredoc("SH"))
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    java.chmod(0o755)
    env = {
        "PATH": os.environ["PATH"],
        "JAVA_HOME": str(tmp_path / "jdk"),
        "SPARK_HOME": "/spark",
        "SPARK_EXECUTOR_MEMORY": "2g",
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@10.0.0.1:7078",
        "SPARK_EXECUTOR_ID": "3",
        "SPARK_EXECUTOR_CORES": "1",
        "SPARK_APPLICATION_ID": "spark-app",
        "SPARK_EXECUTOR_POD_IP": "10.0.0.9",
        "SPARK_RESOURCE_PROFILE_ID": "0",
        "SPARK_EXECUTOR_POD_NAME": "job-exec-3",
        "SPARK_JAVA_OPT_0": "-Dspark.driver.port=7078",
    }
    out = subprocess.run(
        ["bash", str(entrypoint), "executor"], capture_output=True, text=True, env=env, cwd=tmp_path, check=True
    )
    args = out.stdout.splitlines()
    assert args[:3] == ["-Dspark.driver.port=7078", "-Xms2g", "-Xmx2g"]
    assert args[args.index("-cp") + 1].startswith("/spark/conf:/spark/jars/*")
    assert "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend" in args
    assert args[args.index("--executor-id") + 1] == "3"
    assert args[args.index("--hostname") + 1] == "10.0.0.9"
