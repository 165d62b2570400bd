"""The api-server is reachable from outside through an Ingress or a Gateway API HTTPRoute, both off
by default. kubernetes-validate has no schema for HTTPRoute (a CRD): ROUTE_SCHEMA holds the
gateway.networking.k8s.io/v1 fields the chart renders, with the CRD's constraints."""

from __future__ import annotations

from collections.abc import Callable
from subprocess import CompletedProcess

import jsonschema
import pytest
import yaml
from helm_chart import FULLNAME, Manifests

pytestmark = pytest.mark.helm

NAME = f"{FULLNAME}-api-server"
HOSTNAME = {
    "type": "string",
    "minLength": 1,
    "maxLength": 253,
    "pattern": r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
}
OBJECT_NAME = {"type": "string", "minLength": 1, "maxLength": 253}
SECTION_NAME = {
    "type": "string",
    "minLength": 1,
    "maxLength": 253,
    "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
}
PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
ROUTE_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "gateway.networking.k8s.io/v1"},
        "kind": {"const": "HTTPRoute"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "parentRefs": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 32,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["name"],
                        "properties": {
                            "group": {"type": "string", "maxLength": 253},
                            "kind": {"type": "string", "minLength": 1, "maxLength": 63},
                            "namespace": {"type": "string", "minLength": 1, "maxLength": 63},
                            "name": OBJECT_NAME,
                            "sectionName": SECTION_NAME,
                            "port": PORT,
                        },
                    },
                },
                "hostnames": {"type": "array", "maxItems": 16, "items": HOSTNAME},
                "rules": {
                    "type": "array",
                    "maxItems": 16,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "matches": {
                                "type": "array",
                                "maxItems": 64,
                                "items": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "properties": {
                                        "path": {
                                            "type": "object",
                                            "additionalProperties": False,
                                            "properties": {
                                                "type": {
                                                    "enum": [
                                                        "Exact",
                                                        "PathPrefix",
                                                        "RegularExpression",
                                                    ]
                                                },
                                                "value": {
                                                    "type": "string",
                                                    "maxLength": 1024,
                                                    "pattern": "^/",
                                                },
                                            },
                                        }
                                    },
                                },
                            },
                            "backendRefs": {
                                "type": "array",
                                "maxItems": 16,
                                "items": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["name"],
                                    "properties": {
                                        "group": {"type": "string"},
                                        "kind": {"type": "string"},
                                        "name": OBJECT_NAME,
                                        "namespace": {"type": "string"},
                                        "port": PORT,
                                        "weight": {
                                            "type": "integer",
                                            "minimum": 0,
                                            "maximum": 1000000,
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def render(helm_template: Callable[..., CompletedProcess[str]], *args: str) -> Manifests:
    result = helm_template(*args)
    assert result.returncode == 0, result.stderr
    docs = tuple(d for d in yaml.safe_load_all(result.stdout) if d)
    return Manifests(scenario="custom", text=result.stdout, docs=docs)


def service_port(manifests: Manifests) -> dict[str, object]:
    (port,) = manifests.get("Service", NAME)["spec"]["ports"]
    return port


def test_no_route_by_default(rendered: dict[str, Manifests]) -> None:
    for kind in ("Ingress", "HTTPRoute"):
        assert rendered["default"].of_kind(kind) == []


def test_ingress_with_tls_routes_to_the_api_server_service(rendered: dict[str, Manifests]) -> None:
    manifests = rendered["external-db"]
    ingress = manifests.get("Ingress", NAME)
    assert ingress["apiVersion"] == "networking.k8s.io/v1"
    assert ingress["metadata"]["annotations"] == {"cert-manager.io/cluster-issuer": "letsencrypt"}
    spec = ingress["spec"]
    assert spec["ingressClassName"] == "nginx"
    assert spec["tls"] == [
        {"hosts": ["airflow.example.com"], "secretName": "airflow-example-com-tls"}
    ]
    (rule,) = spec["rules"]
    assert rule["host"] == "airflow.example.com"
    (path,) = rule["http"]["paths"]
    assert (path["path"], path["pathType"]) == ("/", "Prefix")
    assert path["backend"] == {
        "service": {"name": NAME, "port": {"name": service_port(manifests)["name"]}}
    }


def test_ingress_under_a_path_matches_the_base_url(
    helm_template: Callable[..., CompletedProcess[str]],
) -> None:
    manifests = render(
        helm_template,
        "--set", "apiServer.ingress.enabled=true",
        "--set", "apiServer.ingress.path=/airflow",
        "--set", "apiServer.baseUrl=https://tools.example.com/airflow/",
    )  # fmt: skip
    spec = manifests.get("Ingress", NAME)["spec"]
    (rule,) = spec["rules"]
    assert "host" not in rule and "tls" not in spec and "ingressClassName" not in spec
    assert rule["http"]["paths"][0]["path"] == "/airflow"
    cfg = manifests.get("ConfigMap", f"{FULLNAME}-airflow-config")["data"]["airflow.cfg"]
    assert "base_url = https://tools.example.com/airflow/" in cfg


def test_http_route_attaches_to_the_gateway_and_routes_to_the_api_server(
    rendered: dict[str, Manifests],
) -> None:
    manifests = rendered["s3-warehouse"]
    route = manifests.get("HTTPRoute", NAME)
    jsonschema.validate(route, ROUTE_SCHEMA)
    spec = route["spec"]
    assert spec["parentRefs"] == [
        {"name": "public", "namespace": "gateway-system", "sectionName": "https"}
    ]
    assert spec["hostnames"] == ["airflow.example.com"]
    (rule,) = spec["rules"]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]
    assert rule["backendRefs"] == [{"name": NAME, "port": service_port(manifests)["port"]}]
    assert route["metadata"]["labels"]["app.kubernetes.io/component"] == "api-server"


def test_route_schema_catches_what_the_crd_refuses() -> None:
    """The hand-written schema is not vacuous: it refuses what the API server would."""
    good = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "r"},
        "spec": {
            "parentRefs": [{"name": "gw"}],
            "rules": [{"backendRefs": [{"name": "s", "port": 80}]}],
        },
    }
    jsonschema.validate(good, ROUTE_SCHEMA)
    for bad in (
        {**good, "apiVersion": "gateway.networking.k8s.io/v1beta2"},
        {**good, "spec": {**good["spec"], "parentRefs": []}},
        {**good, "spec": {**good["spec"], "hostnames": ["Airflow.Example.com"]}},
        {**good, "spec": {**good["spec"], "rules": [{"backendRefs": [{"name": "s", "port": 0}]}]}},
        {
            **good,
            "spec": {
                **good["spec"],
                "rules": [{"matches": [{"path": {"type": "Prefix", "value": "/"}}]}],
            },
        },
        {**good, "spec": {**good["spec"], "parentRef": [{"name": "gw"}]}},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, ROUTE_SCHEMA)
