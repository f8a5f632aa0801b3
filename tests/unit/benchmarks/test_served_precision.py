"""benchmarks/results/served_precision.json is the one record of what each pipeline serves: the GPU memory estimate
and the docs' tables follow it, and its INT8 rungs were quantized with their unquantized layers in FP16."""

from __future__ import annotations

import json
import re

from benchmarks import capacity, served_precision
from builders import quantize
from builders.tensorrt import models
from tests.support import shipped
from vision_serving import layout

RECORD = json.loads(served_precision.RESULT.read_text())
BY_MODEL = {model["model"]: model for model in RECORD["models"]}
DOCS = layout.REPOSITORY_ROOT / "docs"


def checks(model: str, precision: str) -> dict[str, float]:
    rung = next(r for r in BY_MODEL[model]["rungs"] if r["precision"] == precision)
    return {name: check["value"] for name, check in rung["checks"].items()}


def test_every_model_served_from_a_plan_has_its_ladder_recorded():
    expected = {models.load_core_config(pipeline, role).name for pipeline in shipped.pipelines() for role in models.engine_roles(pipeline)}
    assert set(BY_MODEL) == expected
    for record in RECORD["models"]:
        chosen = next(r for r in record["rungs"] if r["precision"] == record["precision"])
        assert chosen["pass"] and all(not r["pass"] for r in record["rungs"][: record["rungs"].index(chosen)]), record["model"]
    assert RECORD["machine"]["cpu_model"] and "instruction_sets" in RECORD["machine"]


def test_the_int8_rungs_were_quantized_with_their_unquantized_layers_in_fp16():
    int8 = [model for model in RECORD["models"] if "int8_quantizer" in model]
    assert int8 and all(model["int8_quantizer"]["high_precision_dtype"] == quantize.DEFAULT_HIGH_PRECISION == "fp16" for model in int8)


def test_the_gpu_memory_estimate_is_of_the_recorded_precisions():
    estimated = capacity.load_gpu_memory()
    assert estimated is not None
    assert {m["model"]: m["precision"] for m in estimated["models"]} == {name: m["precision"] for name, m in BY_MODEL.items()}
    assert {m["model"]: m["onnx"] for m in estimated["models"]} == {name: m["onnx"] for name, m in BY_MODEL.items()}


def table_rows(text: str, header: str) -> dict[str, list[str]]:
    """The rows of the Markdown table whose header row starts with ``header``, by their first cell."""
    lines = text.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith(header))
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


def test_building_md_s_ladder_table_is_the_record():
    rows = table_rows((DOCS / "building.md").read_text(), "| pipeline | INT8 | FP16 | serves |")
    assert set(rows) == {model["pipeline"] for model in RECORD["models"]}
    for pipeline, (int8, fp16, serves) in rows.items():
        core = BY_MODEL[layout.pipeline(pipeline).model_name("core")]
        assert serves == core["precision"].upper(), pipeline
        for text, precision in ((int8, "int8"), (fp16, "fp16")):
            figures = [float(f) for f in re.findall(r"\b0\.\d+|\b1\.000\d*", text)]
            if not figures:
                continue
            values = checks(core["model"], precision)
            for figure in figures:
                places = len(str(figure).split(".")[1])
                assert any(round(value, max(places, 3)) == round(figure, max(places, 3)) for value in values.values()) or figure in (
                    0.95,
                    0.90,
                ), (pipeline, precision, figure, values)
