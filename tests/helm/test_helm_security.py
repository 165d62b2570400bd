"""Production defaults: no secret in plain text, non-root containers with limits and probes."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from helm_chart import CHART, Manifests

pytestmark = pytest.mark.helm

# Environment variable names that carry credentials and so must come from a Secret.
SECRET_ENV = re.compile(
    r"PASSWORD|SECRET|FERNET|JWT|TOKEN|CREDENTIAL|ACCESS_KEY|_KEY$|_KEY_|SQL_ALCHEMY_CONN|CATALOG_URL"
)
# A URL with a password in it: scheme://user:password@host
CREDENTIAL_URL = re.compile(r"[a-z0-9+.-]+://[^/\s:@]+:[^/\s@]+@")
# values.yaml keys that would hold a secret value (as opposed to the name of a Secret).
SECRET_VALUE_KEY = re.compile(r"password|secret|token|fernet|jwt|apikey|accesskey", re.IGNORECASE)


def containers(pod_spec: dict[str, Any]) -> list[tuple[str, dict[str, Any], bool]]:
    """(name, container, is_init) of one pod."""
    return [(c["name"], c, False) for c in pod_spec.get("containers", [])] + [
        (c["name"], c, True) for c in pod_spec.get("initContainers", [])
    ]


def test_env_secrets_come_from_secret_key_refs(manifests: Manifests) -> None:
    for where, pod_spec, _ in manifests.pod_specs():
        for name, container, _ in containers(pod_spec):
            for env in container.get("env", []):
                if SECRET_ENV.search(env["name"]):
                    assert "value" not in env, f"{where}/{name}: {env['name']} is plain text"
                    assert "secretKeyRef" in env.get("valueFrom", {}), (
                        f"{where}/{name}: {env['name']}"
                    )


def test_no_secret_value_appears_outside_secrets(manifests: Manifests) -> None:
    not_secrets = [d for d in manifests.docs if d["kind"] != "Secret"]
    text = yaml.safe_dump_all(not_secrets) + "".join(
        yaml.safe_dump(p) for p in manifests.embedded_pods()
    )
    for value in manifests.secret_values():
        assert value not in text, (
            f"{manifests.scenario}: a generated secret leaks into a non-Secret manifest"
        )
    assert not CREDENTIAL_URL.search(text), (
        f"{manifests.scenario}: a URL with a password outside Secrets"
    )


def test_secrets_use_data_never_string_data(manifests: Manifests) -> None:
    for secret in manifests.of_kind("Secret"):
        assert "stringData" not in secret, secret["metadata"]["name"]


def test_config_maps_hold_no_credentials(manifests: Manifests) -> None:
    for cm in manifests.of_kind("ConfigMap"):
        for key in cm.get("data", {}):
            assert not SECRET_ENV.search(key), f"{cm['metadata']['name']}: {key}"


def test_values_yaml_has_no_default_secret() -> None:
    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                here = f"{path}.{key}" if path else key
                names_a_secret = key.endswith(("SecretName", "secretName"))
                if (
                    SECRET_VALUE_KEY.search(key)
                    and not names_a_secret
                    and not isinstance(value, dict | list)
                ):
                    assert value in ("", None), f"values.yaml {here} has a default secret value"
                walk(value, here)
        elif isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, f"{path}[{i}]")

    walk(yaml.safe_load((CHART / "values.yaml").read_text()), "")


def test_generated_secrets_are_kept_and_reused_on_upgrade(rendered: dict[str, Manifests]) -> None:
    generated = rendered["default"].of_kind("Secret")
    assert {s["metadata"]["name"] for s in generated} == {
        f"sc-statecore-{n}"
        for n in (
            "fernet-key",
            "api-secret-key",
            "jwt-secret",
            "admin-password",
            "postgresql",
            "metadata",
            "catalog",
        )
    }
    for secret in generated:
        annotations = secret["metadata"].get("annotations", {})
        assert annotations.get("helm.sh/resource-policy") == "keep", secret["metadata"]["name"]
    # Values come from the Secret already in the cluster when there is one (lookup).
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert 'lookup "v1" "Secret"' in helpers
    for template in ("secrets.yaml", "postgresql-secrets.yaml"):
        assert "statecore.keptSecretValue" in (CHART / "templates" / template).read_text()


def test_existing_secrets_replace_generated_ones(rendered: dict[str, Manifests]) -> None:
    assert rendered["external-db"].of_kind("Secret") == []


def test_every_container_runs_as_non_root(manifests: Manifests) -> None:
    for where, pod_spec, _ in manifests.pod_specs():
        pod_ctx = pod_spec.get("securityContext", {})
        assert pod_ctx.get("runAsNonRoot") is True, where
        assert pod_ctx.get("runAsUser", 1) != 0, where
        for name, container, _ in containers(pod_spec):
            ctx = container.get("securityContext", {})
            assert ctx.get("runAsNonRoot", pod_ctx["runAsNonRoot"]) is True, f"{where}/{name}"
            assert ctx.get("runAsUser", pod_ctx.get("runAsUser", 1)) != 0, f"{where}/{name}"
            assert ctx.get("allowPrivilegeEscalation") is False, f"{where}/{name}"
            assert ctx.get("capabilities", {}).get("drop") == ["ALL"], f"{where}/{name}"


def test_workload_containers_have_a_read_only_root_filesystem(manifests: Manifests) -> None:
    for where, pod_spec, _ in manifests.pod_specs():
        if "spark-pod-template" in where:
            continue  # Spark's own entrypoint writes under the image's SPARK_HOME work dirs
        for name, container, _ in containers(pod_spec):
            assert container["securityContext"].get("readOnlyRootFilesystem") is True, (
                f"{where}/{name}"
            )
            mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
            if name != "write-auth-passwords":
                assert "/tmp" in mounts, f"{where}/{name}: no writable /tmp"


def test_every_container_has_requests_and_limits(manifests: Manifests) -> None:
    for where, pod_spec, _ in manifests.pod_specs():
        if "spark-pod-template" in where:
            continue  # Spark sets driver/executor resources from spark.driver/executor.* settings
        for name, container, _ in containers(pod_spec):
            resources = container.get("resources", {})
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(resources.get(kind, {})), f"{where}/{name}: {kind}"


def test_long_running_containers_have_probes(manifests: Manifests) -> None:
    for where, pod_spec, long_running in manifests.pod_specs():
        for name, container, is_init in containers(pod_spec):
            if long_running and not is_init:
                assert "livenessProbe" in container, f"{where}/{name}"
                assert "readinessProbe" in container, f"{where}/{name}"


def test_only_pods_that_use_the_api_get_a_token(manifests: Manifests) -> None:
    k8s_executor = manifests.scenario == "kubernetes-executor"
    wants_token = {"scheduler": True, "api-server": k8s_executor}
    for d in manifests.docs:
        if d["kind"] in ("Deployment", "StatefulSet", "Job"):
            component = d["metadata"]["labels"]["app.kubernetes.io/component"]
            mounted = d["spec"]["template"]["spec"].get("automountServiceAccountToken")
            assert mounted is wants_token.get(component, False), d["metadata"]["name"]
