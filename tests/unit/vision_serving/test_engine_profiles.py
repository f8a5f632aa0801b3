"""vision_serving.engine_profiles: a model's TensorRT profiles from the code that makes its input, and a TensorRT
config held to them (every profile in each instance group, each context its own profile's memory, every profile
warmed up)."""

from __future__ import annotations

import pytest

from vision_serving import engine_profiles, layout, model_config
from vision_serving.tasks.text_reading import preprocessor as text_preprocessor
from vision_serving.tasks.text_reading import steps
from vision_serving.tasks.text_reading.settings import DEFAULT

TEXT_READER = layout.pipeline("text_reader")


def tensorrt_config(role: str) -> model_config.ModelConfig:
    folder = TEXT_READER.core_dir if role == "core" else TEXT_READER.stage_dir(role)
    return model_config.load_config(folder)


def test_the_profiles_come_from_the_preprocess_and_the_task():
    preprocess = model_config.load_config(TEXT_READER.model_dir("preprocess"))
    detector = engine_profiles.for_model(TEXT_READER, "core")
    assert detector == steps.detector_profiles(DEFAULT.detection, text_preprocessor.max_detector_side(preprocess))
    assert [p.name for p in detector] == ["photo", "wide", "tall"]
    assert len(engine_profiles.for_model(TEXT_READER, "recognizer")) == 6
    assert engine_profiles.for_model(TEXT_READER, "classifier") == ()
    assert engine_profiles.for_model(layout.pipeline("image_classifier"), "core") == ()  # the image-to-tensor resize
    assert engine_profiles.role_of(TEXT_READER, "text_reader_core") == "core"
    assert engine_profiles.role_of(TEXT_READER, "text_reader_core_recognizer") == "recognizer"
    assert engine_profiles.role_of(TEXT_READER, "text_reader_postprocess") is None


@pytest.mark.parametrize("role", ["core", "recognizer", "classifier"])
def test_the_text_reader_s_tensorrt_configs_follow_their_profiles(role):
    config = tensorrt_config(role)
    profiles = engine_profiles.for_model(TEXT_READER, role)
    assert engine_profiles.check_config(config, profiles) == []
    if profiles:
        assert model_config.parameter(config, engine_profiles.ALLOCATION_STRATEGY) == engine_profiles.ON_PROFILE_CHANGE
        assert sorted(engine_profiles.warmup_samples(config)) == sorted(engine_profiles.required_warmups(config, profiles))


def test_a_config_that_does_not_follow_its_profiles_is_refused_naming_why():
    profiles = engine_profiles.for_model(TEXT_READER, "core")
    config = tensorrt_config("core")
    del config.instance_group[0].profile[2]
    (problem,) = engine_profiles.check_config(config, profiles)
    assert "instance_group 0 lists profiles ['0', '1'], not every one of [0, 1, 2] (0 photo, 1 wide, 2 tall)" in problem

    config = tensorrt_config("core")
    del config.parameters[engine_profiles.ALLOCATION_STRATEGY]
    (problem,) = engine_profiles.check_config(config, profiles)
    assert "3 profiles share each instance, and execution_context_allocation_strategy is STATIC" in problem

    config = tensorrt_config("core")
    (tall_max,) = [w for w in config.model_warmup if w.name == "tall_max"]
    tall_max.inputs["images"].dims[1] = 4128  # past max_detector_side: no profile takes it
    problems = engine_profiles.check_config(config, profiles)
    assert problems == [
        "model 'text_reader_core': warm-up at batch 8, [3, 4128, 736] fits no profile: the model would fail to load",
        "model 'text_reader_core': no warm-up of profile 'tall' at batch 8, [3, 4096, 736]",
    ]

    fixed = tensorrt_config("classifier")
    assert "its input dims are fixed, yet its input's code gives it TensorRT profiles" in engine_profiles.check_config(fixed, profiles)[0]
    assert "nothing bounds them" in engine_profiles.check_config(tensorrt_config("recognizer"), ())[0]
    cpu = model_config.load_config(TEXT_READER.core_dir, "cpu")
    assert engine_profiles.check_config(cpu, profiles) == []  # another backend: nothing to hold
