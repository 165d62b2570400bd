"""The chart lints, renders every scenario, validates against Kubernetes schemas and its own."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest
import yaml

from helm_chart import CHART, SCENARIOS, Manifests

pytestmark = pytest.mark.helm

# Two supported Kubernetes minors, both bundled with kubernetes-validate (offline).
KUBERNETES_VERSIONS = ("1.29.0", "1.33.0")
EXPECTED_KINDS = {
    "Deployment",
    "Service",
    "ConfigMap",
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "PodDisruptionBudget",
    "Job",
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_helm_lint_strict(helm: str, scenario: str) -> None:
    values = SCENARIOS[scenario]
    args = [helm, "lint", "--strict", str(CHART), *(["--values", str(values)] if values else [])]
    result = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_scenario_renders_the_whole_platform(manifests: Manifests) -> None:
    kinds = {d["kind"] for d in manifests.docs}
    assert EXPECTED_KINDS <= kinds, f"{manifests.scenario}: missing {EXPECTED_KINDS - kinds}"
    deployments = {d["metadata"]["name"] for d in manifests.of_kind("Deployment")}
    assert deployments == {f"sc-statecore-{c}" for c in ("api-server", "scheduler", "dag-processor", "triggerer")}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_manifests_validate_strictly_against_kubernetes(
    version: str, rendered: dict[str, Manifests], tmp_path: Path
) -> None:
    files = []
    for scenario, manifests in rendered.items():
        path = tmp_path / f"{scenario}.yaml"
        path.write_text(manifests.text)
        files.append(path)
        for i, pod in enumerate(manifests.embedded_pods()):
            pod = {k: v for k, v in pod.items() if k != "_source"}
            pod_path = tmp_path / f"{scenario}-embedded-pod-{i}.yaml"
            pod_path.write_text(yaml.safe_dump(pod))
            files.append(pod_path)
    cli = Path(sys.executable).with_name("kubernetes-validate")
    result = subprocess.run(
        [str(cli), "--strict", "--quiet", "-k", version, *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_values_schema_is_valid_and_accepts_every_scenario() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.validate(defaults, schema)
    for values in filter(None, SCENARIOS.values()):
        jsonschema.validate(_merge(defaults, yaml.safe_load(values.read_text())), schema)


BAD_VALUES = {
    "negative scheduler replicas": (
        ["--set", "scheduler.replicas=-1"],
        "at '/scheduler/replicas': minimum: got -1, want 0",
    ),
    "negative api-server replicas": (
        ["--set", "apiServer.replicas=-3"],
        "at '/apiServer/replicas': minimum: got -3, want 0",
    ),
    "unknown executor": (
        ["--set", "executor=CeleryExecutor"],
        "at '/executor': value must be one of 'LocalExecutor', 'KubernetesExecutor'",
    ),
    "no bundled postgres and no metadata secret": (
        ["--set", "postgresql.enabled=false", "--set", "data.catalogSecretName=catalog"],
        "data.metadataSecretName is required when postgresql.enabled is false",
    ),
    "no bundled postgres and no catalog secret": (
        ["--set", "postgresql.enabled=false", "--set", "data.metadataSecretName=metadata"],
        "data.catalogSecretName is required when postgresql.enabled is false",
    ),
    "metadata and catalog in one database": (
        ["--set", "postgresql.enabled=false", "--set", "data.metadataSecretName=db", "--set", "data.catalogSecretName=db"],
        "the Airflow metadata and the statecore catalog live in separate databases",
    ),
    "application role named like the superuser": (
        ["--set", "postgresql.catalog.user=postgres"],
        'postgresql.catalog.user and postgresql.catalog.database must not be "postgres"',
    ),
    "s3 warehouse without bucket": (
        ["--set", "warehouse.type=s3"],
        "warehouse.s3.bucket is required when warehouse.type is s3",
    ),
    "unknown warehouse type": (
        ["--set", "warehouse.type=hdfs"],
        "at '/warehouse/type': value must be one of 'pvc', 's3'",
    ),
    "container without limits": (
        ["--set", "scheduler.resources.limits=null"],
        "at '/scheduler/resources': missing property 'limits'",
    ),
    "secret passed as a plain env value": (
        ["--set", "env[0].name=WAREHOUSE_PASSWORD", "--set", "env[0].value=hunter2"],
        "env[0] WAREHOUSE_PASSWORD looks like a secret",
    ),
    "misspelt top-level value": (
        ["--set", "exectuor=LocalExecutor"],
        "additional properties 'exectuor' not allowed",
    ),
}


@pytest.mark.parametrize("case", list(BAD_VALUES))
def test_bad_values_are_rejected_with_a_clear_message(
    case: str, helm_template: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    args, message = BAD_VALUES[case]
    result = helm_template(*args)
    assert result.returncode != 0, f"{case}: rendered although it should not"
    assert message in result.stderr, result.stderr


def _merge(base: dict, override: dict) -> dict:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged
