"""Each shipped pipeline's answer schema is a committed fixture (answer_schemas/<pipeline>.json): a change to what the
gateway answers that would break its clients fails here. After a deliberate change, rewrite them with
``GATEWAY_WRITE_FIXTURES=1 ./scripts/test tests/unit/gateway/test_answer_schemas.py`` and say so in the API's docs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from openapi_spec_validator import validate as validate_openapi

from gateway import openapi
from tests.unit.gateway.local import shipped

FIXTURES = Path(__file__).resolve().parent / "answer_schemas"
PIPELINES = shipped()


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_the_answer_schema_is_the_committed_one(name):
    schema = openapi.answer_schema(PIPELINES[name])
    path = FIXTURES / f"{name}.json"
    text = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    if os.environ.get("GATEWAY_WRITE_FIXTURES") == "1":
        path.write_text(text)
    assert path.is_file(), f"no fixture {path.name}: write it with GATEWAY_WRITE_FIXTURES=1"
    assert json.loads(path.read_text()) == schema, f"{name}'s answer schema changed: a breaking change for its clients?"


def test_every_fixture_is_a_shipped_pipeline():
    assert sorted(path.stem for path in FIXTURES.glob("*.json")) == sorted(PIPELINES)


def test_the_document_of_the_shipped_pipelines_is_valid_openapi():
    document = openapi.document(PIPELINES, keys=True)
    validate_openapi(document)
    assert set(document["paths"]) == {"/v1/pipelines", *(f"/v1/pipelines/{name}" for name in PIPELINES)}
    post = document["paths"]["/v1/pipelines/image_classifier"]["post"]
    assert {"image/*", "application/octet-stream", "multipart/form-data", "application/json"} == set(post["requestBody"]["content"])
    (top_k,) = [p for p in post["parameters"] if p["name"] == "top_k"]
    assert top_k["schema"] == {"type": "integer", "minimum": 1, "maximum": 1000, "default": 5, "description": "how many classes"}
    assert {"400", "401", "403", "404", "413", "415", "429", "503"} <= set(post["responses"])
