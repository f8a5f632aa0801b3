"""builders.configs.pixel_variants: a spec with ``pixel_device = "gpu"`` generates the GPU preprocess as config.pbtxt
and the CPU one as every configs/<variant>.pbtxt; the folder passes the offline checks and the CPU sizing; turning
the mode off removes the variants it wrote."""

from __future__ import annotations

from pathlib import Path

import pytest

from builders import model_configs
from tests.unit.builders.configs.test_generate import configs, copy, edit
from vision_serving import consistency, cpu_runtimes, cpu_sizing, layout, model_config, preprocessors
from vision_serving.gpu_pixels import settings
from vision_serving.protos import model_config_pb2

FACES = layout.pipeline("face_detector")
TEXT_READER = layout.pipeline("text_reader")
KIND_GPU = model_config_pb2.ModelInstanceGroup.KIND_GPU
KIND_CPU = model_config_pb2.ModelInstanceGroup.KIND_CPU


def on_gpu(tmp_path: Path, source: layout.Pipeline = FACES, extra: str = "") -> layout.Pipeline:
    pipeline = copy(source, tmp_path)
    edit(pipeline.recipe, "[preprocess]\n", f'[preprocess]\npixel_device = "gpu"\n{extra}')
    return pipeline


def parameters(config: model_config.ModelConfig) -> dict[str, str]:
    return {key: value.string_value for key, value in config.parameters.items()}


def test_the_gpu_preprocess_is_config_pbtxt_and_the_cpu_one_every_variant(tmp_path):
    pipeline = on_gpu(tmp_path)
    assert configs(tmp_path, "--pipeline", FACES.name) == 0
    folder = pipeline.model_dir("preprocess")
    gpu = model_config.load_config(folder)
    shipped = model_config.load_config(FACES.model_dir("preprocess"))
    assert [(group.kind, group.count) for group in gpu.instance_group] == [(KIND_GPU, settings.GPU_INSTANCES)]
    mine = parameters(gpu)
    assert mine[settings.DEVICE_PARAMETER] == "gpu" and {key: mine[key] for key in settings.GPU_DEFAULTS} == settings.GPU_DEFAULTS
    assert not set(cpu_sizing.PARAMETERS) & set(mine)  # not CPU-sized
    # Everything else is the served preprocess's: tensors, batching, limits, resize, drift.
    assert {key: value for key, value in mine.items() if key not in settings.PARAMETERS} == {
        key: value for key, value in parameters(shipped).items() if key not in cpu_sizing.PARAMETERS
    }
    assert list(gpu.input) == list(shipped.input) and list(gpu.output) == list(shipped.output)
    assert gpu.dynamic_batching == shipped.dynamic_batching and gpu.max_batch_size == shipped.max_batch_size
    # Each CPU variant is the shipped CPU preprocess itself, under every name a core has.
    names = {variant.name for variant in cpu_runtimes.config_variants()}
    assert {path.stem for path in (folder / "configs").glob("*.pbtxt")} == names
    for name in names:
        assert model_config.load_config(folder, name) == shipped
        assert (
            (folder / "configs" / f"{name}.pbtxt")
            .read_text()
            .splitlines()[1]
            .startswith(f"# {name} (`tritonserver --model-config-name={name}`)")
        )
    assert "vision_serving.triton_models.gpu_preprocess import TritonPythonModel" in (folder / "1" / "model.py").read_text()
    assert preprocessors.check(gpu) == [] and settings.device(gpu) == "gpu"
    assert consistency.check_pipeline(pipeline.repository) == []
    # The ensemble, the core and the postprocess are unchanged.
    for role in ("core", "postprocess"):
        assert model_config.load_config(pipeline.model_dir(role)) == model_config.load_config(FACES.model_dir(role))
    assert model_config.load_config(pipeline.ensemble_dir) == model_config.load_config(FACES.ensemble_dir)
    assert configs(tmp_path, "--pipeline", FACES.name, "--check") == 0


def test_the_cpu_sizing_sizes_the_cpu_variants_and_leaves_the_gpu_group(tmp_path):
    pipeline = on_gpu(tmp_path)
    assert configs(tmp_path, "--pipeline", FACES.name) == 0
    layouts = cpu_sizing.size_repository([pipeline], tmp_path / "sized", 8)
    name = pipeline.model_name("preprocess")
    assert str(layouts[name]) == str(cpu_sizing.step_layout(8, 1.0, 8))
    view = tmp_path / "sized" / FACES.name / name
    assert [(g.kind, g.count) for g in model_config.load_config(view).instance_group] == [(KIND_GPU, settings.GPU_INSTANCES)]
    assert [(g.kind, g.count) for g in model_config.load_config(view, "cpu").instance_group] == [(KIND_CPU, 8)]


def test_the_spec_sets_the_gpu_instances_and_the_mode_s_parameters(tmp_path):
    pipeline = on_gpu(tmp_path, extra="gpu_instances = 3\nhw_decoder_load = 0.8\ndali_threads = 4\n")
    assert configs(tmp_path, "--pipeline", FACES.name) == 0
    gpu = model_config.load_config(pipeline.model_dir("preprocess"))
    assert gpu.instance_group[0].count == 3
    assert {key: parameters(gpu)[key] for key in settings.GPU_DEFAULTS} == {"dali_threads": "4", "hw_decoder_load": "0.8"}
    assert settings.GPU_INSTANCES_KEY not in gpu.parameters  # the generator's, not the model's
    assert all(key not in model_config.load_config(pipeline.model_dir("preprocess"), "cpu").parameters for key in settings.PARAMETERS)


def test_turning_the_mode_off_removes_the_variants_it_wrote(tmp_path, capsys):
    pipeline = on_gpu(tmp_path)
    assert configs(tmp_path, "--pipeline", FACES.name) == 0
    edit(pipeline.recipe, 'pixel_device = "gpu"\n', "")
    assert configs(tmp_path, "--pipeline", FACES.name, "--check") == 1
    assert "configs/cpu.pbtxt: no longer generated (remove it)" in capsys.readouterr().out
    assert configs(tmp_path, "--pipeline", FACES.name) == 0
    assert not list(pipeline.model_dir("preprocess").glob("configs/*.pbtxt"))
    assert model_configs.leftovers(pipeline) == [] and configs(tmp_path, "--pipeline", FACES.name, "--check") == 0
    assert model_config.load_config(pipeline.model_dir("preprocess")) == model_config.load_config(FACES.model_dir("preprocess"))


@pytest.mark.parametrize(
    ("source", "extra", "message"),
    [
        (TEXT_READER, "", "takes the image-to-tensor resize, not preprocessor 'text_detection'"),
        (FACES, "hw_decoder_load = 1.5\n", "hw_decoder_load in [0, 1]"),
        (FACES, "gpu_instances = 0\n", "gpu_instances must be an integer >= 1"),
    ],
)
def test_a_spec_the_gpu_path_cannot_serve_is_refused_in_one_line(tmp_path, capsys, source, extra, message):
    on_gpu(tmp_path, source, extra)
    assert configs(tmp_path, "--pipeline", source.name) != 0
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert message in error and "pipeline.toml" in error


@pytest.mark.parametrize(
    ("line", "message"), [('pixel_device = "tpu"\n', "'tpu' is not one of cpu, gpu"), ("gpu_instances = 2\n", "apply to")]
)
def test_a_device_that_is_none_or_a_gpu_key_without_the_mode_is_refused(tmp_path, capsys, line, message):
    pipeline = copy(FACES, tmp_path)
    edit(pipeline.recipe, "[preprocess]\n", f"[preprocess]\n{line}")
    assert configs(tmp_path, "--pipeline", FACES.name) != 0
    assert message in capsys.readouterr().err
