"""`helm test` runs three Pods: the api-server's health, the catalog connection, the DAGs parse.
The Python checks run here too, against a local health endpoint and a SQLite catalog."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import pytest
import yaml
from helm_chart import FULLNAME, NAMESPACE, Manifests

pytestmark = pytest.mark.helm

CHECKS = ("api-server-health", "catalog-connection", "dags-parse")
HEALTHY = {
    "metadatabase": {"status": "healthy"},
    "scheduler": {"status": "healthy", "latest_scheduler_heartbeat": "2026-11-25T19:00:00+00:00"},
    "triggerer": {"status": None, "latest_triggerer_heartbeat": None},
    "dag_processor": {
        "status": "healthy",
        "latest_dag_processor_heartbeat": "2026-11-25T19:00:00+00:00",
    },
}


def hook_pod(manifests: Manifests, check: str) -> dict[str, Any]:
    return manifests.get("Pod", f"{FULLNAME}-test-{check}")


def script(manifests: Manifests, check: str) -> str:
    (container,) = hook_pod(manifests, check)["spec"]["containers"]
    return container["args"][-1]


def test_every_check_is_a_helm_test_hook(manifests: Manifests) -> None:
    pods = {p["metadata"]["name"]: p for p in manifests.of_kind("Pod")}
    assert set(pods) == {f"{FULLNAME}-test-{c}" for c in CHECKS}
    for name, pod in pods.items():
        annotations = pod["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "test", name
        # kept after the run for `helm test --logs`, replaced by the next run
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation", name
        assert pod["spec"]["restartPolicy"] == "Never", name
        (container,) = pod["spec"]["containers"]
        assert (
            container["image"]
            == manifests.get("Deployment", f"{FULLNAME}-scheduler")["spec"]["template"]["spec"][
                "containers"
            ][0]["image"]
        ), name


def test_health_check_asks_the_api_server_service_what_its_probes_ask(manifests: Manifests) -> None:
    api = manifests.get("Deployment", f"{FULLNAME}-api-server")["spec"]["template"]["spec"][
        "containers"
    ][0]
    port = manifests.get("Service", f"{FULLNAME}-api-server")["spec"]["ports"][0]["port"]
    url = f"http://{FULLNAME}-api-server.{NAMESPACE}.svc:{port}{api['readinessProbe']['httpGet']['path']}"
    assert f'url = "{url}"' in script(manifests, "api-server-health")
    (container,) = hook_pod(manifests, "api-server-health")["spec"]["containers"]
    assert "env" not in container and "envFrom" not in container  # an HTTP client needs no secret


def test_catalog_and_dags_checks_run_with_the_airflow_pods_environment(
    manifests: Manifests,
) -> None:
    scheduler = manifests.get("Deployment", f"{FULLNAME}-scheduler")["spec"]["template"]["spec"]
    for check in ("catalog-connection", "dags-parse"):
        pod = hook_pod(manifests, check)["spec"]
        (container,) = pod["containers"]
        assert container["env"] == scheduler["containers"][0]["env"], check
        assert container["envFrom"] == scheduler["containers"][0]["envFrom"], check
        assert pod["automountServiceAccountToken"] is False, check
    dags = script(manifests, "dags-parse")
    assert (
        "airflow dags list-import-errors --local\n" in dags
    )  # the image's DAGs, parsed in the pod
    assert "airflow dags list-import-errors\n" in dags  # what the dag-processor recorded
    assert dags.startswith("set -e\n")


def test_helm_test_can_be_turned_off(helm_template: Callable[..., CompletedProcess[str]]) -> None:
    result = helm_template("--set", "helmTest.enabled=false")
    assert result.returncode == 0, result.stderr
    assert [d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "Pod"] == []


@pytest.fixture
def health_endpoint() -> Iterator[tuple[str, dict[str, Any]]]:
    """A local stand-in for /api/v2/monitor/health answering whatever the test puts in `body`."""
    body: dict[str, Any] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            payload = json.dumps(body).encode() if self.path == "/api/v2/monitor/health" else b"{}"
            self.send_response(200 if self.path == "/api/v2/monitor/health" else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", body
    server.shutdown()
    server.server_close()


def test_health_check_passes_on_healthy_and_fails_on_an_unhealthy_scheduler(
    rendered: dict[str, Manifests], health_endpoint: tuple[str, dict[str, Any]]
) -> None:
    base, body = health_endpoint
    code = script(rendered["default"], "api-server-health").replace(
        f"http://{FULLNAME}-api-server.{NAMESPACE}.svc:8080", base
    )
    body.update(HEALTHY)
    ok = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    body["scheduler"] = {"status": "unhealthy", "latest_scheduler_heartbeat": None}
    bad = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1
    assert "not healthy: {'scheduler': 'unhealthy'}" in bad.stderr


def test_catalog_check_opens_the_catalog_from_its_url(
    rendered: dict[str, Manifests], tmp_path: Path
) -> None:
    code = script(rendered["default"], "catalog-connection")
    env = {"PATH": "/usr/bin:/bin", "STATECORE_CATALOG_URL": f"sqlite:///{tmp_path / 'catalog.db'}"}
    ok = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("catalog sqlite:///") and ok.stdout.endswith(": 0 jobs\n"), (
        ok.stdout
    )
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database\n" * 512)
    env["STATECORE_CATALOG_URL"] = f"sqlite:///{garbage}"
    bad = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert bad.returncode != 0
    assert "is corrupt or not a statecore catalog" in bad.stderr, bad.stderr


def test_dags_check_uses_options_the_airflow_cli_has() -> None:
    airflow = Path(sys.executable).with_name("airflow")
    if not airflow.exists():
        pytest.skip("Airflow is not installed in this environment")
    from airflow.cli.cli_parser import get_parser

    args = get_parser().parse_args(["dags", "list-import-errors", "--local"])
    assert args.local is True
