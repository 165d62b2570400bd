"""What the Helm tests share: the chart's scenarios and the rendered manifests of one.

A scenario is the default values or one file of ``helm/statecore/ci/``.
"""

from __future__ import annotations

import base64
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "statecore"
RELEASE = "sc"
NAMESPACE = "data"
FULLNAME = f"{RELEASE}-statecore"
SCENARIOS: dict[str, Path | None] = {
    "default": None,
    **{
        p.name.removesuffix("-values.yaml"): p for p in sorted((CHART / "ci").glob("*-values.yaml"))
    },
}
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "Job")
# The image every render uses (the chart refuses to render without one); a scenario's own wins.
IMAGE_REPOSITORY = "registry.example.com/data/statecore"
IMAGE_VALUES = {"images": {"airflow": {"repository": IMAGE_REPOSITORY}}}


@dataclass(frozen=True)
class Manifests:
    """The documents `helm template` rendered for one scenario."""

    scenario: str
    text: str
    docs: tuple[dict[str, Any], ...]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        found = [d for d in self.of_kind(kind) if d["metadata"]["name"] == name]
        assert found, f"{self.scenario}: no {kind} named {name}"
        return found[0]

    def find(self, kind: str, name: str) -> dict[str, Any] | None:
        found = [d for d in self.of_kind(kind) if d["metadata"]["name"] == name]
        return found[0] if found else None

    def embedded_pods(self) -> list[dict[str, Any]]:
        """Pod templates carried in ConfigMaps (KubernetesExecutor workers, Spark pods)."""
        pods = []
        for cm in self.of_kind("ConfigMap"):
            for key, value in (cm.get("data") or {}).items():
                if key.endswith(".yaml") and "kind: Pod" in value:
                    pods.append(
                        {**yaml.safe_load(value), "_source": f"{cm['metadata']['name']}/{key}"}
                    )
        return pods

    def pod_specs(self) -> list[tuple[str, dict[str, Any], bool]]:
        """(where, pod spec, long-running) for every workload, bare Pod (`helm test`) and
        embedded pod template."""
        specs = [
            (
                f"{d['kind']}/{d['metadata']['name']}",
                d["spec"]["template"]["spec"],
                d["kind"] != "Job",
            )
            for d in self.docs
            if d["kind"] in WORKLOAD_KINDS
        ]
        specs += [(f"Pod/{d['metadata']['name']}", d["spec"], False) for d in self.of_kind("Pod")]
        specs += [(p["_source"], p["spec"], False) for p in self.embedded_pods()]
        return specs

    def secret_values(self) -> set[str]:
        """Every decoded value of every Secret the chart renders."""
        return {
            base64.b64decode(v).decode()
            for s in self.of_kind("Secret")
            for v in (s.get("data") or {}).values()
        }


def helm_path() -> Path:
    """Where scripts/install_helm.py installs Helm: the running virtualenv."""
    return Path(sys.prefix) / "bin" / "helm"
