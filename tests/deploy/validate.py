"""Run by the deploy-check venv's Python (it has PyYAML, jsonschema, kubernetes-validate).

    python tests/deploy/validate.py manifests K8S_VERSION < rendered.yaml
    python tests/deploy/validate.py yaml < any.yaml

``manifests``: prints JSON {"objects": [...], "results": [{"kind", "name",
"apiVersion", "status", "detail"}]}: every object validated strictly against
the Kubernetes schemas of K8S_VERSION, or against a vendored schema in this
folder for the CRDs listed in CRD_SCHEMAS. Any other unknown kind is a
failure ("unknown"), never a silent pass. ``yaml``: the documents as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml

HERE = Path(__file__).resolve().parent
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): HERE / "servicemonitor-monitoring.coreos.com-v1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): HERE / "prometheusrule-monitoring.coreos.com-v1.json",
}


def validate(obj: dict, version: str) -> dict:
    key = (obj.get("apiVersion"), obj.get("kind"))
    result = {"apiVersion": key[0], "kind": key[1], "name": obj.get("metadata", {}).get("name"), "status": "ok", "detail": ""}
    try:
        if key in CRD_SCHEMAS:
            jsonschema.validate(obj, json.loads(CRD_SCHEMAS[key].read_text()))
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
