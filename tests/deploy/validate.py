"""Run by the deploy-check venv's Python (it has PyYAML, jsonschema, kubernetes-validate).

    python tests/deploy/validate.py manifests K8S_VERSION < rendered.yaml
    python tests/deploy/validate.py yaml < any.yaml

``manifests``: prints JSON {"objects": [...], "results": [{"kind", "name",
"apiVersion", "status", "detail"}]}: every object validated strictly against
the Kubernetes schemas of K8S_VERSION, or against a vendored schema in this
folder for the CRDs listed in CRD_SCHEMAS. Any other unknown kind is a
failure ("unknown"), never a silent pass. ``yaml``: the documents as JSON.

Two kinds of vendored schema: minimal hand-written JSON Schemas (the Prometheus
Operator's, strict as written) and the Gateway API CRDs' own openAPIV3Schema,
extracted unchanged (README.md here). An API server prunes fields a CRD schema does
not declare; here they fail instead: ``strict`` closes every object that lists its
properties (additionalProperties: false, unless the CRD says
x-kubernetes-preserve-unknown-fields) and pins apiVersion and kind. The CRDs' CEL
rules (x-kubernetes-validations) are not evaluated.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

HERE = Path(__file__).resolve().parent
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): HERE / "servicemonitor-monitoring.coreos.com-v1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): HERE / "prometheusrule-monitoring.coreos.com-v1.json",
    **{
        (f"gateway.networking.k8s.io/{version}", kind): HERE / f"{kind.lower()}-gateway.networking.k8s.io-{version}.json"
        for kind, versions in (("Gateway", ("v1", "v1beta1")), ("HTTPRoute", ("v1", "v1beta1")), ("GRPCRoute", ("v1",)))
        for version in versions
    },
}
# Vendored unchanged from the upstream CRDs (openAPIV3Schema): made strict when loaded.
CRD_OPENAPI_SCHEMAS = {key for key in CRD_SCHEMAS if key[0].startswith("gateway.networking.k8s.io/")}


def strict(schema: Any) -> Any:
    """A copy of an openAPIV3Schema in which undeclared fields fail (the API server would drop them)."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {}
    for key, value in schema.items():
        if key == "properties":
            closed[key] = {name: strict(field) for name, field in value.items()}
        elif key in ("anyOf", "oneOf", "allOf", "not"):
            closed[key] = value  # constraints on a value already described: their partial property lists stay open
        else:
            closed[key] = strict(value)
    if "properties" in schema and "additionalProperties" not in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
        closed["additionalProperties"] = False
    return closed


def load_schema(key: tuple[str, str]) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(CRD_SCHEMAS[key].read_text())
    if key not in CRD_OPENAPI_SCHEMAS:
        return schema
    schema = strict(schema)
    schema["properties"]["apiVersion"] = {"const": key[0]}
    schema["properties"]["kind"] = {"const": key[1]}
    schema["properties"]["metadata"] = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}
    schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind", "metadata"})
    return schema


def validate(obj: dict, version: str) -> dict:
    key = (obj.get("apiVersion"), obj.get("kind"))
    result = {"apiVersion": key[0], "kind": key[1], "name": obj.get("metadata", {}).get("name"), "status": "ok", "detail": ""}
    try:
        if key in CRD_SCHEMAS:
            jsonschema.validate(obj, load_schema(key))
            result["detail"] = f"vendored schema {CRD_SCHEMAS[key].name}"
        else:
            kubernetes_validate.validate(obj, version, strict=True)
            result["detail"] = f"kubernetes {version}"
    except kubernetes_validate.SchemaNotFoundError as error:
        result.update(status="unknown", detail=str(error) or f"no schema for {key[0]} {key[1]} in Kubernetes {version} and none vendored")
    except (kubernetes_validate.ValidationError, jsonschema.ValidationError) as error:
        where = "/".join(str(p) for p in getattr(error, "path", [])) or getattr(getattr(error, "caused_by", None), "path", "")
        message = getattr(getattr(error, "caused_by", None), "message", None) or getattr(error, "message", str(error))
        result.update(status="invalid", detail=f"{where}: {message}")
    return result


def main() -> int:
    mode = sys.argv[1]
    documents = [d for d in yaml.safe_load_all(sys.stdin.read()) if d is not None]
    if mode == "yaml":
        print(json.dumps(documents))
        return 0
    version = sys.argv[2]
    print(json.dumps({"objects": documents, "results": [validate(d, version) for d in documents]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
