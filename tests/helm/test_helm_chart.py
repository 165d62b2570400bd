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
from helm_chart import CHART, IMAGE_VALUES, SCENARIOS, Manifests

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
    "Pod",
}
# Custom resources kubernetes-validate has no schema for; test_helm_routes.py checks them.
CUSTOM_KINDS = {"HTTPRoute"}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_helm_lint_strict(helm: str, image_values: str, scenario: str) -> None:
    values = SCENARIOS[scenario]
    args = [helm, "lint", "--strict", str(CHART), "--values", image_values]
    args += ["--values", str(values)] if values else []
    result = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_scenario_renders_the_whole_platform(manifests: Manifests) -> None:
    kinds = {d["kind"] for d in manifests.docs}
    assert kinds >= EXPECTED_KINDS, f"{manifests.scenario}: missing {EXPECTED_KINDS - kinds}"
    deployments = {d["metadata"]["name"] for d in manifests.of_kind("Deployment")}
    assert deployments == {
        f"sc-statecore-{c}" for c in ("api-server", "scheduler", "dag-processor", "triggerer")
    }


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_manifests_validate_strictly_against_kubernetes(
    version: str, rendered: dict[str, Manifests], tmp_path: Path
) -> None:
    files = []
    for scenario, manifests in rendered.items():
        path = tmp_path / f"{scenario}.yaml"
        path.write_text(
            yaml.safe_dump_all(d for d in manifests.docs if d["kind"] not in CUSTOM_KINDS)
        )
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
    with pytest.raises(jsonschema.ValidationError, match="required: the image you built"):
        jsonschema.validate(defaults, schema)  # images.airflow.repository is left to the user
    defaults = _merge(defaults, IMAGE_VALUES)
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
        [
            "--set",
            "postgresql.enabled=false",
            "--set",
            "data.metadataSecretName=db",
            "--set",
            "data.catalogSecretName=db",
        ],
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
    "no airflow image": (
        ["--set", "images.airflow.repository="],
        "at '/images/airflow/repository': '' does not match pattern "
        "'^required: the image you built from the Dockerfile and pushed to your registry$'",
    ),
    "the old placeholder image": (
        ["--set", "images.airflow.repository=statecore"],
        "at '/images/airflow/repository': 'statecore' does not match pattern '^required: the image",
    ),
    "input neither s3 nor a path": (
        ["--set", "statecore.input.location=gs://bucket/clickstream"],
        "at '/statecore/input/location': 'gs://bucket/clickstream' does not match pattern",
    ),
    "input path on no claim": (
        ["--set", "statecore.input.location=/data/clickstream"],
        "statecore.input.location /data/clickstream is a path outside the warehouse claim "
        "(/opt/statecore/warehouse): set statecore.input.existingClaim",
    ),
    "input path on no claim with an s3 warehouse": (
        [
            "--set",
            "statecore.input.location=/opt/statecore/warehouse/input",
            "--set",
            "warehouse.type=s3",
            "--set",
            "warehouse.s3.bucket=lake",
        ],
        "is a path outside the warehouse claim (none: warehouse.type is s3)",
    ),
    "input claim for an s3 input": (
        [
            "--set",
            "statecore.input.location=s3://raw/clickstream",
            "--set",
            "statecore.input.existingClaim=raw",
        ],
        "statecore.input.existingClaim needs statecore.input.location to be an absolute path",
    ),
    "input claim mounted over STATECORE_HOME": (
        [
            "--set",
            "statecore.input.location=/opt/statecore/home",
            "--set",
            "statecore.input.existingClaim=raw",
        ],
        "statecore.input.location /opt/statecore/home is already a mount point of the Airflow pods",
    ),
    "ingress TLS without a secret": (
        [
            "--set",
            "apiServer.ingress.enabled=true",
            "--set",
            "apiServer.ingress.host=airflow.example.com",
            "--set",
            "apiServer.ingress.tls.enabled=true",
        ],
        "apiServer.ingress.tls.enabled needs apiServer.ingress.host and "
        "apiServer.ingress.tls.secretName",
    ),
    "ingress under a path the base URL lacks": (
        ["--set", "apiServer.ingress.enabled=true", "--set", "apiServer.ingress.path=/airflow"],
        "apiServer.ingress.path /airflow needs apiServer.baseUrl with the same path",
    ),
    "HTTPRoute without a Gateway": (
        ["--set", "apiServer.httpRoute.enabled=true"],
        "apiServer.httpRoute.enabled needs apiServer.httpRoute.parentRefs",
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
