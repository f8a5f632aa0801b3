"""Optimization profiles from the config and the code that makes each input (builders/tensorrt/profiles.py)."""

from __future__ import annotations

import pytest

from builders.tensorrt import models, profiles
from tests.support.tensorrt import TINY_CONFIG, core_config
from vision_serving import layout, model_config

CLASSIFIER = layout.pipeline("image_classifier")


def test_profile_from_the_real_core_config():
    core = models.load_core_config(CLASSIFIER)
    (profile,) = profiles.optimization_profile(core)
    dims = tuple(core.input[0].dims)
    assert profile.name == core.input[0].name
    assert profile.min == (1, *dims) and profile.max == (core.max_batch_size, *dims) and profile.opt == profile.max
    (profile,) = profiles.optimization_profile(core, opt_batch=8)
    assert profile.opt == (8, *dims)


@pytest.mark.parametrize("opt", [0, 5, 100])
def test_profile_rejects_an_opt_batch_outside_the_range(opt):
    with pytest.raises(model_config.ConfigError, match=r"outside 1\.\.4"):
        profiles.optimization_profile(core_config(), opt_batch=opt)


def test_profile_without_batching_and_with_variable_dims():
    unbatched = core_config(TINY_CONFIG.replace("max_batch_size: 4", "max_batch_size: 0"))
    (profile,) = profiles.optimization_profile(unbatched)
    assert profile.min == profile.opt == profile.max == (3, 8, 8)
    with pytest.raises(model_config.ConfigError, match="--opt-batch does not apply"):
        profiles.optimization_profile(unbatched, opt_batch=2)
    with pytest.raises(model_config.ConfigError, match="variable dims"):
        profiles.optimization_profile(core_config(TINY_CONFIG.replace("dims: [ 3, 8, 8 ]", "dims: [ 3, -1, -1 ]")))


def test_dynamic_dims_take_their_input_s_profiles_one_plan_profile_each():
    """The text reader: the detector's photo, wide and tall ranges from its preprocess, the recognizer's one fixed width
    per bucket from its task; batch 1..max added, tuned for each profile's own batch unless --opt-batch says."""
    from vision_serving.tasks.text_reading.task import RECOGNIZER_OPT_BATCH

    text_reader = layout.pipeline("text_reader")
    assert models.engine_roles(text_reader) == ["core", "classifier", "recognizer"]
    detector = models.load_core_config(text_reader)
    found = profiles.optimization_profiles(detector, None, models.model_profiles(text_reader, "core"))
    assert [(p[0].min, p[0].opt, p[0].max) for p in found] == [
        ((1, 3, 736, 736), (1, 3, 736, 736), (8, 3, 1984, 1984)),
        ((1, 3, 736, 2016), (1, 3, 736, 2944), (8, 3, 736, 4096)),
        ((1, 3, 2016, 736), (1, 3, 2944, 736), (8, 3, 4096, 736)),
    ]
    recognizer = models.load_core_config(text_reader, "recognizer")
    ranges = models.model_profiles(text_reader, "recognizer")
    found = profiles.optimization_profiles(recognizer, None, ranges)
    assert [p[0].max for p in found] == [(16, 3, 48, w) for w in (320, 480, 640, 960, 1280, 1920)]
    assert all(p[0].min == (1, 3, 48, p[0].max[-1]) and p[0].opt[0] == RECOGNIZER_OPT_BATCH for p in found)
    assert all(p[0].opt[0] == 2 for p in profiles.optimization_profiles(recognizer, 2, ranges))  # --opt-batch
    classifier = models.load_core_config(text_reader, "classifier")
    assert models.model_profiles(text_reader, "classifier") == ()
    assert len(profiles.optimization_profiles(classifier)) == 1  # fixed dims: the one batch profile
    with pytest.raises(model_config.ConfigError, match="are dynamic; the plan needs the profiles of its one input"):
        profiles.optimization_profiles(detector)
    with pytest.raises(model_config.ConfigError, match="does not fit input dims"):
        profiles.optimization_profiles(recognizer, None, models.model_profiles(text_reader, "core"))
    with pytest.raises(model_config.ConfigError, match="its input dims are fixed"):
        profiles.optimization_profiles(classifier, None, ranges)
    with pytest.raises(model_config.ConfigError, match=r"opt batch 17 is outside 1\.\.16"):
        profiles.optimization_profiles(recognizer, 17, ranges)


def test_the_provenance_records_one_profile_as_a_mapping_and_several_as_a_list():
    one = profiles.optimization_profiles(core_config(), 2)
    assert profiles.profile_record(one) == {"images": {"min": [1, 3, 8, 8], "opt": [2, 3, 8, 8], "max": [4, 3, 8, 8]}}
    assert profiles.profile_record([*one, *one]) == [profiles.profile_record(one)] * 2
