"""The benchmarks' in-process parts on the real models (onnxruntime, no server): the variants are the served
computation with one thing changed, the limit's modes answer, and the steps and what-if entry points each
write one result in the report format."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import CLASSIFIER, detection, images, inprocess, report, steps, text_reading, whatif
from benchmarks.cpu import cpu_ms
from vision_serving import layout, model_config
from vision_serving.pipeline_configs import PipelineConfigs
from vision_serving.served import ServedPipeline


@pytest.fixture(scope="module")
def payloads(built_repository) -> list[bytes]:
    return [p.data for p in images.upload_mix("web")][:4]


def test_the_served_variant_answers_as_the_served_pipeline(payloads):
    served = ServedPipeline.load(PipelineConfigs.load(CLASSIFIER))
    benched = inprocess.load(CLASSIFIER)
    expected, got = served.run(payloads).outputs(), benched.run(payloads).outputs()
    assert expected.keys() == got.keys()
    for name, value in expected.items():
        np.testing.assert_array_equal(got[name], value)


def test_variants_change_one_thing(payloads):
    phone = next(p.data for p in images.upload_mix("phone") if "exif6" in p.name)  # stored sideways, displayed portrait
    served = inprocess.load(CLASSIFIER)
    full = inprocess.load(CLASSIFIER, inprocess.Variant(decode="full"))
    before = inprocess.load(CLASSIFIER, inprocess.Variant(decode="opencv", core_config="cpu_onnxruntime"))
    assert served.decode(phone).image.shape[0] * served.decode(phone).image.shape[1] < 1_000_000  # reduced
    assert full.decode(phone).image.shape[:2] == before.decode(phone).image.shape[:2] == (4000, 3000)  # EXIF applied
    wider = inprocess.load(CLASSIFIER, inprocess.Variant(decode_oversampling=4.0, resize_reducing_gap=0.0))
    assert wider.spec.decode_oversampling == 4.0 and wider.spec.resize_reducing_gap == 0.0
    assert wider.minimum.shorter_side > served.minimum.shorter_side
    naive = inprocess.load(CLASSIFIER, inprocess.Variant(library_defaults=True))
    assert model_config.parameter(naive.core_config, "intra_op_threads") == "0"
    assert model_config.parameter(naive.core_config, "allow_spinning") == "1"
    with pytest.raises(ValueError, match="decode"):
        inprocess.Variant(decode="pillow")


def test_every_mode_of_the_limit_answers(payloads):
    rows = inprocess.limit(CLASSIFIER, payloads, [2], 0.3, modes=inprocess.MODES)
    assert [row["mode"].split()[0] for row in rows] == list(inprocess.MODES)
    assert all(row["images"] > 0 and row["throughput"] > 0 and row["cpu_ms_per_image"] > 0 for row in rows)
    single = inprocess.single_request(CLASSIFIER, payloads, 0.3)
    assert single["batch_size"] == 1 and single["batch_ms_p50"] > 0


def test_steps_writes_one_result(tmp_path, built_repository):
    arguments = ["--parts", "pipelines,detection", "--pipelines", CLASSIFIER.name, "--mixes", "thumbnail", "--repeats", "1"]
    code = steps.main([*arguments, "--output", str(tmp_path)])
    assert code == 0
    result = json.loads((tmp_path / "steps.json").read_text())
    assert result["benchmark"] == "steps" and "AVX2" in result["machine"]["instruction_sets"]
    (served, before) = report.rows(result, "pipelines")
    assert (served["decoder"], before["decoder"]) == ("served", "opencv")
    for row in (served, before):
        assert all(row[step] > 0 for step in ("decode", "preprocess", "core", "core_openvino", "postprocess"))
        assert row["total"] >= row["decode"] + row["preprocess"] + row["core"]
    assert len(report.rows(result, "detection")) == 3 * len(detection.heads())
    assert (tmp_path / "steps.md").read_text() == report.markdown(result)


def test_a_two_stage_pipelines_postprocess_costs_leave_its_second_stages_apart(built_repository):
    """The text reader's postprocess calls its classifier and recognizer: on a GPU those are TensorRT plans like the
    core, so the CPU steps (what the capacity planner sizes pods by) are the postprocess's own code."""
    served = inprocess.load(layout.pipeline("text_reader"), inprocess.Variant(threads=1))
    payloads = [text_reading.photo_with_lines(5)]
    costs = steps.served_costs(served, payloads, 1)
    assert costs["core"] > 0 and costs["stages"] > 0
    answered = served.with_core(served.preprocessed([served.decode(payloads[0])]))
    with_stages = cpu_ms(lambda: served.postprocess(answered).outputs(), 1, 3)
    assert costs["postprocess"] < with_stages - 0.5 * costs["stages"]
    planned = steps.served_costs(served, payloads, 1, core=False)
    assert {"core", "stages"}.isdisjoint(planned) and planned["postprocess"] < with_stages - 0.5 * costs["stages"]


def test_whatif_decode_gate_and_config_edits(tmp_path, built_repository):
    code = whatif.main(["--per-photo", "0", "--reducing-gap", "0", "--repeats", "1", "--output", str(tmp_path)])
    result = json.loads((tmp_path / "whatif.json").read_text())
    gates = {row["variant"]: row for row in report.rows(result, "decode_gate", images="all")}
    assert set(gates) == {"served", "resize_reducing_gap 0"}
    assert code == (0 if gates["served"]["gate"] else 1)  # the served configuration's gate sets the exit code
    assert all(0 < row["top1_agreement"] <= 1 for row in gates.values())
    assert {row["variant"] for row in report.rows(result, "decode_costs")} == set(gates)
    repository = whatif.prepare(
        "edited", "core.instances=1;core.param.intra_op_threads=2;preprocess.delay_us=750", CLASSIFIER.name, tmp_path
    )
    edited = PipelineConfigs.load(whatif.layout.pipeline(CLASSIFIER.name, repository))
    assert edited.core_variant("cpu").instance_group[0].count == 1
    assert model_config.parameter(edited.core_variant("cpu"), "intra_op_threads") == "2"
    assert edited.preprocess.dynamic_batching.max_queue_delay_microseconds == 750
    with pytest.raises(ValueError, match="unknown key"):
        whatif.apply_edit(repository, CLASSIFIER.name, "core.colour=red")


def test_text_reading_part_measures_every_step_at_each_line_count():
    """The text reader's part of benchmarks.steps (one pass): a row per line count, the drawn lines found
    and read, the recognizer's cost growing with them."""
    from benchmarks import text_reading

    rows = {row["lines_drawn"]: row for row in text_reading.measure(repeats=1)}
    assert sorted(rows) == list(text_reading.LINES)
    assert rows[0]["crops"] == rows[0]["lines_read"] == 0 and rows[0]["recognizer"] == 0
    assert rows[5]["crops"] == rows[5]["lines_read"] == 5
    assert rows[50]["lines_read"] >= 45
    assert rows[50]["recognizer"] > rows[5]["recognizer"] > 0
    for row in rows.values():
        assert row["detector"] > 0 and row["total"] >= row["preprocess"] + row["detector"]
