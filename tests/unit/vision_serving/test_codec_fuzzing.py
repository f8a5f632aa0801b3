"""The upload path under coverage-guided fuzzing (devtools/fuzz_codec.py: atheris), a short run per format,
and the committed seed corpus (tests/support/upload_seeds.py) it starts from.

The short runs are what the test command affords (:data:`RUNS` executions per format); a campaign is run by hand
(``python -m devtools.fuzz_codec FORMAT --seconds 600``; docs/design.md records one). Each run fails on an
input whose decode raises anything but ``ImageError``, returns other than an RGB image within the limits,
crashes, hangs, or costs more CPU than its declared pixels allow."""

from __future__ import annotations

import os

import pytest

from devtools import fuzz_codec
from tests.support import upload_seeds
from vision_serving.image_codec import FORMATS, ImageError, ImageLimits, check, decode, sniff_format

# Executions per format: a count, not seconds, so a loaded machine runs the same check, only slower.
RUNS = int(os.environ.get("FUZZ_RUNS_PER_FORMAT", "1500"))
LIMITS = ImageLimits(max_bytes=20 * 2**20, max_pixels=50_000_000, accepted_formats=FORMATS)
# What the targets found (fuzz_codec.FINDINGS_DIR), each with the refusal it gets now. Found on the code before the
# structural checks (each cost its decoder more than the target's budget):
# In 6 minutes of the PNG target: two slow inputs (OpenCV spent 0.6 s of CPU on 496 bytes, the target's 102nd input)
# and five on which OpenCV's allocation took the process past libFuzzer's 4 GB memory limit (a lying chunk header).
FINDINGS = {
    "png/bad_interlace_field.png": "corrupt PNG: IHDR declares compression 0, filter 0, interlace 180",
    "png/bad_colour_type.png": "corrupt PNG: IHDR declares bit depth 1 for colour type 255",
    "png/oom_chunk_type_shifted.png": "corrupt PNG: the chunk at byte 33 has type b'\\x14IDA', not four letters",
    "png/oom_idat_length_4294312724.png": "corrupt PNG: chunk IDAT at byte 33 declares 4294312724 bytes, over PNG's limit of 2^31 - 1",
    "png/oom_chunk_type_binary.png": 'corrupt PNG: the chunk at byte 33 has type b"\'\\xdct\\xe9", not four letters',
    "png/oom_chunk_type_binary_2.png": "corrupt PNG: the chunk at byte 33 has type b'\\xe6\\xdd\\xb1k', not four letters",
    "png/oom_chunk_type_ff.png": "corrupt PNG: the chunk at byte 33 has type b'\\xff\\xff\\xff\\xff', not four letters",
}


@pytest.mark.parametrize("name", sorted(FINDINGS))
def test_every_finding_is_refused_by_the_checks_and_within_the_targets_budget(name):
    data = (fuzz_codec.FINDINGS_DIR / name).read_bytes()
    with pytest.raises(ImageError) as raised:
        check(data, LIMITS)
    assert str(raised.value) == FINDINGS[name]
    fuzz_codec.make_target(name.split("/")[0])(data)  # no SlowInput, no WrongResult


def test_every_finding_file_is_listed():
    assert {f"{path.parent.name}/{path.name}" for path in fuzz_codec.FINDINGS_DIR.glob("*/*")} == set(FINDINGS)


@pytest.mark.parametrize("image_format", fuzz_codec.FORMATS)
def test_a_short_fuzzing_run_finds_nothing(image_format):
    result = fuzz_codec.run(image_format, runs=RUNS, timeout_s=300)
    summary = {key: value for key, value in vars(result).items() if key != "log_tail"}
    print(f"fuzz {image_format}:", summary)
    assert result.returncode == 0 and not result.artifacts, f"{summary}\n{result.log_tail}"
    assert result.stats["number_of_executed_units"] >= RUNS, summary  # it ran, from the seeds
    assert result.coverage > 50 and result.corpus_size > 0, summary  # and coverage guided it to new inputs


def test_the_committed_seeds_are_what_the_encoders_write():
    """Refresh with ``python -m tests.support.upload_seeds`` after an encoder's upgrade."""
    committed = {f"{path.parent.name}/{path.stem}" for path in fuzz_codec.SEEDS_DIR.glob("*/*.*")}
    expected = set(upload_seeds.ENCODED) | {spec["name"] for spec in upload_seeds.HEIF_SPECS}
    assert committed == expected
    for name, make in upload_seeds.ENCODED.items():
        assert upload_seeds.seed_path(name).read_bytes() == make(), f"{name} differs from its encoder's output"


@pytest.mark.parametrize("image_format", fuzz_codec.FORMATS)
def test_every_seed_is_a_valid_upload_of_its_format(image_format):
    paths = fuzz_codec.seeds(image_format)
    assert len(paths) >= 4
    for path in paths:
        data = path.read_bytes()
        assert sniff_format(data) == image_format, path
        checked = check(data, LIMITS)
        assert decode(data, LIMITS).image.shape[2] == 3 and checked.width * checked.height > 0, path


def test_the_target_refuses_an_input_over_its_budget_and_a_wrong_result(monkeypatch):
    """The target's own checks can fail: a decode made slow, and one made to return a wrong image."""
    import time

    import numpy as np

    from vision_serving import image_codec, preprocessing

    target = fuzz_codec.make_target("png")
    seed = fuzz_codec.seeds("png")[0].read_bytes()
    target(seed)
    real = preprocessing.decode_payloads

    def slow(*args, **kwargs):
        started = time.thread_time()
        while time.thread_time() - started < target.budget_s(seed) + 0.05:
            pass
        return real(*args, **kwargs)

    monkeypatch.setattr(preprocessing, "decode_payloads", slow)
    with pytest.raises(fuzz_codec.SlowInput, match="over the budget"):
        target(seed)
    monkeypatch.setattr(preprocessing, "decode_payloads", lambda *_: [image_codec.Decoded(np.zeros((4, 4), np.uint8), 4, 4)])
    with pytest.raises(fuzz_codec.WrongResult, match=r"decoded uint8 \(4, 4\)"):
        target(seed)
