"""The pieces are wired together: secrets, databases, Spark RBAC, executors, warehouse."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_chart import FULLNAME, NAMESPACE, RELEASE, Manifests

pytestmark = pytest.mark.helm

AIRFLOW_COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
SPARK_RESOURCES_VERBS = {
    "pods": {"create", "delete", "get", "list", "watch"},
    "services": {"create", "delete", "get", "list", "watch"},
    "configmaps": {"create", "delete", "get", "list", "watch"},
    "persistentvolumeclaims": {"create", "delete", "get", "list", "watch"},
}


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def airflow_containers(manifests: Manifests) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for component in AIRFLOW_COMPONENTS:
        spec = manifests.get("Deployment", f"{FULLNAME}-{component}")["spec"]["template"]["spec"]
        found += [(f"{component}/{c['name']}", c) for c in spec["containers"]]
        found += [
            (f"{component}/{c['name']}", c)
            for c in spec.get("initContainers", [])
            if c["name"].startswith("wait")
        ]
    job = manifests.of_kind("Job")[0]
    found += [(f"job/{c['name']}", c) for c in job["spec"]["template"]["spec"]["containers"]]
    return found


def config(manifests: Manifests) -> dict[str, str]:
    return manifests.get("ConfigMap", f"{FULLNAME}-config")["data"]


def spark_defaults(manifests: Manifests) -> dict[str, str]:
    lines = config(manifests)["spark-defaults.conf"].splitlines()
    return dict(line.split(" ", 1) for line in lines if line.strip())


def test_catalog_url_is_wired_to_a_secret(manifests: Manifests) -> None:
    expected = (
        "statecore-catalog-db" if manifests.scenario == "external-db" else f"{FULLNAME}-catalog"
    )
    for where, container in airflow_containers(manifests):
        ref = env_of(container)["STATECORE_CATALOG_URL"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": expected, "key": "connection"}, where
    assert (
        spark_defaults(manifests)["spark.kubernetes.driver.secretKeyRef.STATECORE_CATALOG_URL"]
        == f"{expected}:connection"
    )
    if manifests.scenario != "external-db":
        assert "connection" in manifests.get("Secret", expected)["data"]


def test_airflow_secrets_are_wired(manifests: Manifests) -> None:
    external = manifests.scenario == "external-db"
    expected = {
        "AIRFLOW__CORE__FERNET_KEY": (
            "airflow-fernet-key" if external else f"{FULLNAME}-fernet-key",
            "fernet-key",
        ),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": (
            "airflow-metadata-db" if external else f"{FULLNAME}-metadata",
            "connection",
        ),
        "AIRFLOW__API__SECRET_KEY": (
            "airflow-api-secret-key" if external else f"{FULLNAME}-api-secret-key",
            "api-secret-key",
        ),
        "AIRFLOW__API_AUTH__JWT_SECRET": (
            "airflow-jwt-secret" if external else f"{FULLNAME}-jwt-secret",
            "jwt-secret",
        ),
    }
    for where, container in airflow_containers(manifests):
        env = env_of(container)
        for name, (secret, key) in expected.items():
            assert env[name]["valueFrom"]["secretKeyRef"] == {"name": secret, "key": key}, (
                f"{where}: {name}"
            )


def test_bundled_postgres_keeps_metadata_and_catalog_in_separate_databases(
    rendered: dict[str, Manifests],
) -> None:
    manifests = rendered["default"]
    sts = manifests.get("StatefulSet", f"{FULLNAME}-postgresql")
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]
    env = env_of(sts["spec"]["template"]["spec"]["containers"][0])
    assert env["POSTGRES_USER"]["value"] == "postgres"
    assert (env["METADATA_USER"]["value"], env["METADATA_DB"]["value"]) == ("airflow", "airflow")
    assert (env["CATALOG_USER"]["value"], env["CATALOG_DB"]["value"]) == ("statecore", "statecore")
    initdb = manifests.get("ConfigMap", f"{FULLNAME}-postgresql-initdb")["data"][
        "10-statecore-databases.sh"
    ]
    for db in ("metadata", "catalog"):
        assert f'CREATE DATABASE :"{db}_db" OWNER :"{db}_user"' in initdb
        assert f'REVOKE ALL ON DATABASE :"{db}_db" FROM PUBLIC' in initdb
    # Each application connects as its own role to its own database.
    assert "SUPERUSER" not in initdb


def test_external_database_replaces_the_bundled_one(rendered: dict[str, Manifests]) -> None:
    manifests = rendered["external-db"]
    assert manifests.of_kind("StatefulSet") == []
    assert manifests.find("Service", f"{FULLNAME}-postgresql") is None


def test_migration_runs_as_a_helm_hook(manifests: Manifests) -> None:
    (job,) = manifests.of_kind("Job")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "post-install,post-upgrade"
    assert "before-hook-creation" in annotations["helm.sh/hook-delete-policy"]
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["airflow", "db", "migrate"]


def test_airflow_components_run_their_airflow_3_commands(manifests: Manifests) -> None:
    for component, args in {
        "api-server": ["airflow", "api-server"],
        "scheduler": ["airflow", "scheduler"],
        "dag-processor": ["airflow", "dag-processor"],
        "triggerer": ["airflow", "triggerer"],
    }.items():
        container = manifests.get("Deployment", f"{FULLNAME}-{component}")["spec"]["template"][
            "spec"
        ]["containers"][0]
        assert container["args"] == args
    api = manifests.get("Deployment", f"{FULLNAME}-api-server")["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert api["readinessProbe"]["httpGet"]["path"] == "/api/v2/monitor/health"
    service = manifests.get("Service", f"{FULLNAME}-api-server")
    assert service["spec"]["ports"][0]["port"] == 8080


def test_api_server_has_a_disruption_budget(manifests: Manifests) -> None:
    pdb = manifests.get("PodDisruptionBudget", f"{FULLNAME}-api-server")
    api = manifests.get("Deployment", f"{FULLNAME}-api-server")
    assert pdb["spec"]["selector"]["matchLabels"] == api["spec"]["selector"]["matchLabels"]
    assert api["spec"]["replicas"] >= 2


def test_spark_rbac_lets_the_driver_manage_executors(manifests: Manifests) -> None:
    role = manifests.get("Role", f"{FULLNAME}-spark")
    granted: dict[str, set[str]] = {}
    for rule in role["rules"]:
        assert rule["apiGroups"] == [""]
        for resource in rule["resources"]:
            granted.setdefault(resource, set()).update(rule["verbs"])
    for resource, verbs in SPARK_RESOURCES_VERBS.items():
        assert verbs <= granted.get(resource, set()), resource
    binding = manifests.get("RoleBinding", f"{FULLNAME}-spark")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    task_account = (
        f"{FULLNAME}-worker"
        if manifests.scenario == "kubernetes-executor"
        else f"{FULLNAME}-scheduler"
    )
    subjects = {(s["kind"], s["name"], s["namespace"]) for s in binding["subjects"]}
    assert subjects == {
        ("ServiceAccount", f"{FULLNAME}-spark", NAMESPACE),
        ("ServiceAccount", task_account, NAMESPACE),
    }
    assert manifests.get("ServiceAccount", f"{FULLNAME}-spark")
    conf = spark_defaults(manifests)
    assert conf["spark.kubernetes.authenticate.driver.serviceAccountName"] == f"{FULLNAME}-spark"
    assert conf["spark.kubernetes.namespace"] == NAMESPACE


def test_spark_default_connection_points_at_the_cluster_api(manifests: Manifests) -> None:
    conn = json.loads(config(manifests)["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert conn["conn_type"] == "spark"
    assert conn["host"] == "k8s://https://kubernetes.default.svc"
    assert conn["port"] == 443
    assert conn["extra"]["namespace"] == NAMESPACE
    assert "password" not in conn and "login" not in conn
    assert spark_defaults(manifests)["spark.master"] == "k8s://https://kubernetes.default.svc:443"


def test_cluster_mode_uploads_the_application_beside_the_warehouse(manifests: Manifests) -> None:
    conf = spark_defaults(manifests)
    assert conf["spark.submit.deployMode"] == "cluster"
    expected = (
        "s3a://statecore-warehouse/_spark-uploads"
        if manifests.scenario == "s3-warehouse"
        else "file:///opt/statecore/warehouse/_spark-uploads"
    )
    assert conf["spark.kubernetes.file.upload.path"] == expected


def test_spark_sql_uses_delta(manifests: Manifests) -> None:
    conf = spark_defaults(manifests)
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert (
        conf["spark.sql.catalog.spark_catalog"] == "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    )


def test_kubernetes_executor_has_its_pod_template_and_rbac(rendered: dict[str, Manifests]) -> None:
    manifests = rendered["kubernetes-executor"]
    cfg = manifests.get("ConfigMap", f"{FULLNAME}-airflow-config")["data"]["airflow.cfg"]
    assert "executor = KubernetesExecutor" in cfg
    assert "pod_template_file = /opt/airflow/pod_templates/pod_template_file.yaml" in cfg
    (pod,) = [
        p for p in manifests.embedded_pods() if p["_source"].endswith("pod_template_file.yaml")
    ]
    assert pod["spec"]["containers"][0]["name"] == "base"
    assert pod["spec"]["serviceAccountName"] == f"{FULLNAME}-worker"
    assert pod["spec"]["nodeSelector"] == {"workload": "airflow-workers"}
    launcher = manifests.get("Role", f"{FULLNAME}-pod-launcher")
    pod_verbs = {v for r in launcher["rules"] if "pods" in r["resources"] for v in r["verbs"]}
    assert {"create", "delete", "get", "list", "watch", "patch"} <= pod_verbs
    binding = manifests.get("RoleBinding", f"{FULLNAME}-pod-launcher")
    assert binding["subjects"][0]["name"] == f"{FULLNAME}-scheduler"
    scheduler = manifests.get("Deployment", f"{FULLNAME}-scheduler")["spec"]["template"]["spec"]
    assert any(
        v.get("configMap", {}).get("name") == f"{FULLNAME}-pod-template"
        for v in scheduler["volumes"]
    )


def test_local_executor_has_no_pod_launcher(rendered: dict[str, Manifests]) -> None:
    manifests = rendered["default"]
    assert (
        "executor = LocalExecutor"
        in manifests.get("ConfigMap", f"{FULLNAME}-airflow-config")["data"]["airflow.cfg"]
    )
    assert manifests.find("Role", f"{FULLNAME}-pod-launcher") is None
    assert manifests.find("ConfigMap", f"{FULLNAME}-pod-template") is None


def test_pvc_warehouse_is_mounted_in_airflow_and_spark_pods(rendered: dict[str, Manifests]) -> None:
    manifests = rendered["default"]
    assert config(manifests)["STATECORE_WAREHOUSE"] == "/opt/statecore/warehouse"
    pvc = manifests.get("PersistentVolumeClaim", f"{FULLNAME}-warehouse")
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    conf = spark_defaults(manifests)
    for role in ("driver", "executor"):
        key = f"spark.kubernetes.{role}.volumes.persistentVolumeClaim.warehouse.options.claimName"
        assert conf[key] == f"{FULLNAME}-warehouse"
    for where, container in airflow_containers(manifests):
        assert "/opt/statecore/warehouse" in {m["mountPath"] for m in container["volumeMounts"]}, (
            where
        )


def test_s3_warehouse_uses_the_object_store_with_secret_credentials(
    rendered: dict[str, Manifests],
) -> None:
    manifests = rendered["s3-warehouse"]
    data = config(manifests)
    assert data["STATECORE_WAREHOUSE"] == "s3://statecore-warehouse/prod"
    assert data["AWS_ENDPOINT_URL"] == "http://minio.minio.svc:9000"
    assert manifests.of_kind("PersistentVolumeClaim") == []
    conf = spark_defaults(manifests)
    assert conf["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    for role in ("driver", "executor"):
        assert (
            conf[f"spark.kubernetes.{role}.secretKeyRef.AWS_SECRET_ACCESS_KEY"]
            == "statecore-s3:AWS_SECRET_ACCESS_KEY"
        )
    for where, container in airflow_containers(manifests):
        ref = env_of(container)["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": "statecore-s3", "key": "AWS_SECRET_ACCESS_KEY"}, where


def test_configuration_changes_roll_the_pods(rendered: dict[str, Manifests]) -> None:
    def checksums(m: Manifests) -> dict[str, str]:
        return m.get("Deployment", f"{FULLNAME}-scheduler")["spec"]["template"]["metadata"][
            "annotations"
        ]

    assert checksums(rendered["default"]) != checksums(rendered["s3-warehouse"])


def test_airflow_reads_the_rendered_configuration(
    rendered: dict[str, Manifests], tmp_path: Path
) -> None:
    """Airflow 3.3 itself parses the airflow.cfg the chart renders and finds nothing to lint."""
    airflow = Path(sys.executable).with_name("airflow")
    if not airflow.exists():
        pytest.skip("Airflow is not installed in this environment")
    cfg = tmp_path / "airflow.cfg"
    cfg.write_text(
        rendered["default"].get("ConfigMap", f"{FULLNAME}-airflow-config")["data"]["airflow.cfg"]
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(tmp_path), AIRFLOW_CONFIG=str(cfg))
    lint = subprocess.run(
        [str(airflow), "config", "lint"], capture_output=True, text=True, env=env, timeout=120
    )
    assert "No issues found" in lint.stdout, lint.stdout + lint.stderr


def test_live_lookups_bind_the_pod_ip_and_only_the_release_reaches_executors(
    rendered: dict[str, Manifests], helm_template: Any
) -> None:
    manifests = rendered["default"]
    assert spark_defaults(manifests)["spark.executorEnv.STATECORE_LIVE_PORT"] == "7079"
    template = yaml.safe_load(
        manifests.get("ConfigMap", f"{FULLNAME}-config")["data"]["spark-pod-template.yaml"]
    )
    [spark] = template["spec"]["containers"]
    assert {
        "name": "STATECORE_LIVE_HOST",
        "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
    } in spark["env"]
    policy = manifests.get("NetworkPolicy", f"{FULLNAME}-spark-executors")["spec"]
    assert policy["podSelector"]["matchLabels"] == {
        "spark-role": "executor",
        "app.kubernetes.io/instance": RELEASE,
    }
    assert (
        template["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
    )  # executors match
    assert policy["policyTypes"] == ["Ingress"]
    assert policy["ingress"] == [
        {"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/instance": RELEASE}}}]}
    ]
    off = helm_template("--set", "spark.liveLookups.networkPolicy=false")
    assert off.returncode == 0 and "kind: NetworkPolicy" not in off.stdout
