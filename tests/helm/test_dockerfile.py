"""The Dockerfile cannot be built here; check that it agrees with the lock and with the chart, and
run its scripts (scripts/resolve_spark_jars.py, scripts/statecore-entrypoint.sh) as far as they
run without Docker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from helm_chart import CHART, REPO

pytestmark = pytest.mark.helm

DOCKERFILE = (REPO / "Dockerfile").read_text()
JARS_SCRIPT = REPO / "scripts" / "resolve_spark_jars.py"
POM = REPO / "jars" / "pom.xml"
ENTRYPOINT = REPO / "scripts" / "statecore-entrypoint.sh"
# what the dev lock adds to the runtime lock: none of it goes into the image
DEV_ONLY = ("pytest", "pytest-timeout", "mypy", "ruff", "import-linter", "kubernetes-validate")


def locked(package: str) -> str:
    match = re.search(
        rf"^{re.escape(package)}==(\S+)$", (REPO / "requirements.lock").read_text(), re.MULTILINE
    )
    assert match, f"{package} is not in requirements.lock"
    return match.group(1)


def arg(name: str) -> str:
    match = re.search(rf"^ARG {name}=(\S*)$", DOCKERFILE, re.MULTILINE)
    assert match, f"ARG {name} is not set in the Dockerfile"
    return match.group(1)


def lock_packages(lock: str) -> set[str]:
    text = (REPO / lock).read_text()
    return {m.lower() for m in re.findall(r"^([A-Za-z0-9._-]+)==", text, re.MULTILINE)}


def dockerignore() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_python_and_java_versions_match_the_project() -> None:
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert ">=3.11" in requires
    assert arg("PYTHON_IMAGE").startswith("python:3.11-")
    assert "openjdk-17-jre-headless" in DOCKERFILE


def test_installs_exactly_the_lock_then_the_project_without_dependencies() -> None:
    assert "pip install --no-deps -r requirements.lock" in DOCKERFILE
    assert "pip install --no-deps ." in DOCKERFILE
    instructions = "\n".join(line for line in DOCKERFILE.splitlines() if not line.startswith("#"))
    installs = re.findall(r"pip install [^\n\\&;]*", instructions)
    assert [i.strip() for i in installs] == [
        "pip install --no-deps -r requirements.lock",
        "pip install --no-deps .",
    ]


def test_the_image_carries_the_runtime_lock_only() -> None:
    runtime, dev = lock_packages("requirements.lock"), lock_packages("requirements-dev.lock")
    assert set(DEV_ONLY) <= dev
    assert not set(DEV_ONLY) & runtime
    assert runtime < dev
    assert "requirements-dev.lock" not in DOCKERFILE
    # not even in the build context, so no later step can install it by accident
    assert "requirements-dev.lock" in dockerignore()


def test_the_charts_postgres_urls_are_served_by_psycopg2_from_the_runtime_lock() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert any(d.startswith("psycopg2-binary") for d in extras["postgres"])
    assert "--extra postgres" in (REPO / "requirements.lock").read_text().splitlines()[1]
    assert "psycopg2-binary" in lock_packages("requirements.lock")
    secrets = (CHART / "templates" / "postgresql-secrets.yaml").read_text()
    urls = re.findall(r'"(postgresql[^:]*)://', secrets)
    assert urls and set(urls) == {"postgresql+psycopg2"}


def pom_property(name: str) -> str:
    match = re.search(rf"<{re.escape(name)}>([^<]*)</{re.escape(name)}>", POM.read_text())
    assert match, f"{name} is not set in jars/pom.xml"
    return match.group(1)


def test_delta_jars_target_the_locked_spark() -> None:
    spark_minor = ".".join(locked("pyspark").split(".")[:2])
    assert pom_property("delta.artifact") == f"delta-spark_{spark_minor}_2.13"
    assert pom_property("spark.version") == locked("pyspark")
    # the JVM side and the Python package of Delta are one release
    assert pom_property("delta.version") == locked("delta-spark")
    pyspark_jars = Path(__import__("pyspark").__file__).parent / "jars"
    hadoop = next(pyspark_jars.glob("hadoop-client-api-*.jar")).name
    assert hadoop == f"hadoop-client-api-{pom_property('hadoop.version')}.jar"
    pom = POM.read_text()
    for artifact in (
        "<artifactId>${delta.artifact}</artifactId>",
        "spark-sql-kafka-0-10_",
        "<artifactId>hadoop-aws</artifactId>",
    ):
        assert artifact in pom
    # S3A is in the main set (make test and the image alike), without the AWS SDK's bundle
    assert "<id>s3a</id>" not in pom
    assert "<artifactId>bundle</artifactId>" in pom  # excluded from hadoop-aws
    assert "<artifactId>s3</artifactId>" in pom


def test_the_build_runs_the_scripts_it_copies() -> None:
    assert "<<" not in DOCKERFILE  # no embedded scripts
    assert (
        "COPY jars/pom.xml jars/\nCOPY scripts/resolve_spark_jars.py scripts/\n"
        "RUN python scripts/resolve_spark_jars.py --into-pyspark" in DOCKERFILE
    )
    assert re.search(
        r"^COPY --chmod=0755 scripts/statecore-entrypoint.sh /usr/local/bin/statecore-entrypoint$",
        DOCKERFILE,
        re.MULTILINE,
    )
    assert '"/usr/local/bin/statecore-entrypoint"]' in DOCKERFILE
    ignored = dockerignore()
    assert "scripts/*" in ignored
    for script in (JARS_SCRIPT, ENTRYPOINT):
        assert f"!scripts/{script.name}" in ignored
        assert ignored.index(f"!scripts/{script.name}") > ignored.index("scripts/*")


def test_jar_resolution_refuses_a_delta_build_for_another_spark(tmp_path: Path) -> None:
    pom = tmp_path / "pom.xml"
    pom.write_text(POM.read_text().replace(pom_property("delta.artifact"), "delta-spark_3.5_2.13"))
    out = subprocess.run(
        [sys.executable, str(JARS_SCRIPT), "--pom", str(pom), "--dest", str(tmp_path / "jars")],
        capture_output=True,
        text=True,
    )
    spark_minor = ".".join(locked("pyspark").split(".")[:2])
    assert out.returncode == 1
    assert f"delta-spark_3.5_2.13 does not match pyspark {locked('pyspark')}" in out.stderr
    assert f"(want delta-spark_{spark_minor}_2.13)" in out.stderr


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
    entrypoint = ENTRYPOINT
    assert entrypoint.read_text().startswith("#!/bin/bash\n")
    subprocess.run(["bash", "-n", str(entrypoint)], check=True)
    out = subprocess.run(
        ["bash", str(entrypoint), "echo", "airflow", "scheduler"], capture_output=True, text=True
    )
    assert out.stdout == "airflow scheduler\n"


def test_entrypoint_starts_spark_executors_like_spark_does(tmp_path: Path) -> None:
    entrypoint = ENTRYPOINT
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
        ["bash", str(entrypoint), "executor"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    )
    args = out.stdout.splitlines()
    assert args[:3] == ["-Dspark.driver.port=7078", "-Xms2g", "-Xmx2g"]
    assert args[args.index("-cp") + 1].startswith("/spark/conf:/spark/jars/*")
    assert "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend" in args
    assert args[args.index("--executor-id") + 1] == "3"
    assert args[args.index("--hostname") + 1] == "10.0.0.9"
