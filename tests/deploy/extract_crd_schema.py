"""Vendor the openAPIV3Schema of every version of a CustomResourceDefinition (deploy-check venv).

    python tests/deploy/extract_crd_schema.py OUT_DIR < crd.yaml

Writes OUT_DIR/<kind lowercase>-<group>-<version>.json, each exactly the CRD's
``spec.versions[].schema.openAPIV3Schema`` (validate.py adds the strictness the
API server's pruning would give: unknown fields fail). Prints the files written.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml


def main() -> int:
    out = Path(sys.argv[1])
    crd = yaml.safe_load(sys.stdin.read())
    spec = crd["spec"]
    for version in spec["versions"]:
        path = out / f"{spec['names']['kind'].lower()}-{spec['group']}-{version['name']}.json"
        path.write_text(json.dumps(version["schema"]["openAPIV3Schema"], indent=1, sort_keys=True) + "\n")
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
