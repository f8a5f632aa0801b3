"""Drift features, tests, windows and cadence (vision_serving.drift), on synthetic images and samples."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from tests.support.drift_monitor import wait_idle
from vision_serving import drift, model_config
from vision_serving.tasks import registry

CLASSIFICATION = registry.task("classification").drift_features

RNG_SEED = 12


def photo_like(rng: np.random.Generator, height: int = 240, width: int = 320) -> np.ndarray:
    """A colourful, textured RGB image (smooth gradients plus noise)."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack([x / width, y / height, 0.5 + 0.5 * np.sin(x / 17.0)], axis=-1) * 200 + 30
    return np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)


def features_of(images: list[np.ndarray]) -> dict[str, np.ndarray]:
    sizes = np.array([image.shape[:2] for image in images])
    return drift.image_features(images, sizes, [1000] * len(images), ["jpeg"] * len(images)).numeric


def test_image_features_order_images_as_expected():
    rng = np.random.default_rng(RNG_SEED)
    photo = photo_like(rng)
    dark = (photo * 0.1).astype(np.uint8)
    gray = np.repeat(cv2.cvtColor(photo, cv2.COLOR_RGB2GRAY)[..., None], 3, axis=-1)
    flat = np.full_like(photo, 128)
    blurred = cv2.GaussianBlur(photo, (0, 0), 6)
    values = features_of([photo, dark, gray, flat, blurred])
    brightness, contrast, saturation, sharpness = (values[k] for k in ("brightness", "contrast", "saturation", "sharpness"))
    assert brightness[1] < 0.1 < 0.3 < brightness[0] < 1
    assert saturation[2] < 0.01 < 0.2 < saturation[0]
    assert contrast[3] == 0 and sharpness[3] == 0 and contrast[0] > 0.1
    assert sharpness[4] < sharpness[0] / 4
    assert values["width"][0] == 320 and values["height"][0] == 240 and values["aspect_ratio"][0] == pytest.approx(4 / 3)


def test_thumbnail_does_not_depend_much_on_the_image_size():
    rng = np.random.default_rng(RNG_SEED)
    photo = photo_like(rng, 480, 640)
    small = cv2.resize(photo, (320, 240), interpolation=cv2.INTER_AREA)
    values = features_of([photo, small])
    assert values["brightness"][0] == pytest.approx(values["brightness"][1], abs=0.01)
    assert values["saturation"][0] == pytest.approx(values["saturation"][1], abs=0.02)
    assert drift.thumbnail(photo).shape == (drift.THUMBNAIL_SIDE, drift.THUMBNAIL_SIDE, 3)


def test_non_finite_rows_are_found():
    values = np.zeros((3, 2, 2), np.float32)
    values[1, 0, 1] = np.nan
    values[2, 1, 1] = np.inf
    assert drift.finite_rows(values).tolist() == [True, False, False]
    drift.check_finite(values[:1], "LOGITS")
    with pytest.raises(drift.NonFiniteOutput, match=r"non-finite model output .* in LOGITS for 2 of 3"):
        drift.check_finite(values, "LOGITS")
    assert not isinstance(drift.NonFiniteOutput("x"), ValueError)  # served as INTERNAL, not INVALID_ARG


def test_ks_p_values_same_and_shifted():
    rng = np.random.default_rng(RNG_SEED)
    reference = np.sort(rng.normal(0, 1, 500))
    same = [drift.ks_test(rng.normal(0, 1, 256), reference)[1] for _ in range(20)]
    assert np.median(same) > 0.2 and min(same) >= 0.01
    statistic, p_value = drift.ks_test(rng.normal(1.0, 1, 256), reference)
    assert p_value < 1e-6 and statistic > 0.3


@pytest.mark.parametrize("shift", [0.0, 0.2, 0.5])
def test_ks_agrees_with_scipy(shift):
    from scipy import stats

    rng = np.random.default_rng(RNG_SEED)
    reference = np.sort(rng.normal(0, 1, 275))
    window = np.round(rng.normal(shift, 1, 512), 2)  # ties too
    statistic, p_value = drift.ks_test(window, reference)
    expected = stats.ks_2samp(window, reference, method="asymp")
    assert statistic == pytest.approx(expected.statistic, abs=1e-12)
    assert p_value == pytest.approx(expected.pvalue, abs=0.02, rel=0.2)


def test_chi_square_same_and_shifted():
    rng = np.random.default_rng(RNG_SEED)
    proportions = np.array([0.5, 0.3, 0.15, 0.05])
    reference_counts = np.bincount(rng.choice(4, 500, p=proportions), minlength=4)
    same = [
        drift.chi_square_test(np.bincount(rng.choice(4, 256, p=proportions), minlength=4).astype(float), reference_counts)[1]
        for _ in range(20)
    ]
    assert np.median(same) > 0.2 and min(same) >= 0.01
    shifted = np.bincount(rng.choice(4, 256, p=[0.1, 0.2, 0.2, 0.5]), minlength=4).astype(float)
    assert drift.chi_square_test(shifted, reference_counts)[1] < 1e-6


def test_category_bins_merge_rare_categories():
    counts = {"a": 50, "b": 30, "c": 15, "d": 3, "e": 2}
    assert drift.category_bins(counts, 100) == ["a", "b", "c"]  # d: 3 % of 100 < 5 expected
    prepared = drift.PreparedReference.of(drift.Reference({}, {"x": counts}), 100)
    assert prepared.bin_counts["x"].tolist() == [50, 30, 15, 5]
    assert prepared.codes("x", ["a", "d", "zzz", "c"]).tolist() == [0, 3, 3, 2]


def test_ring_buffer_keeps_the_last_values():
    buffer = drift.RingBuffer(5)
    buffer.extend(np.arange(3.0))
    assert buffer.snapshot().tolist() == [0, 1, 2]
    buffer.extend(np.arange(3.0, 7.0))
    assert buffer.snapshot().tolist() == [2, 3, 4, 5, 6]
    buffer.extend(np.arange(10.0, 22.0))
    assert buffer.snapshot().tolist() == [17, 18, 19, 20, 21]


def reference_and_stream(rng: np.random.Generator, shift: float = 0.0, count: int = 64) -> tuple[drift.Reference, drift.Features]:
    reference = drift.Reference({"level": rng.normal(0, 1, 400)}, {"kind": {"a": 200, "b": 150, "c": 50}})
    stream = drift.Features(
        {"level": rng.normal(shift, 1, count)}, {"kind": list(rng.choice(["a", "b", "c"], count, p=[0.5, 0.375, 0.125]))}
    )
    return reference, stream


def test_monitor_cadence_and_minimum_samples():
    rng = np.random.default_rng(RNG_SEED)
    reference, _ = reference_and_stream(rng)
    settings = drift.DriftSettings(window=64, min_samples=32, update_every=16)
    monitor = drift.DriftMonitor(reference, settings, background=False)
    for index in range(1, 7):
        _, batch = reference_and_stream(rng, count=8)
        monitor.observe(batch)
        report = monitor.latest()
        assert monitor.window_samples == 8 * index
        if index < 2:
            assert report is None  # no update before update_every samples
            continue
        assert report is not None and report.sequence == index // 2
        level = report.results["level"]
        assert level.window_mean is not None
        if report.samples < 32:
            assert level.p_value is None and report.results["kind"].p_value is None
        else:
            assert level.p_value is not None and report.results["kind"].statistic is not None


def test_monitor_background_worker_detects_a_shift():
    rng = np.random.default_rng(RNG_SEED)
    reference, _ = reference_and_stream(rng)
    monitor = drift.DriftMonitor(reference, drift.DriftSettings(window=256, min_samples=128, update_every=32))
    try:
        for _ in range(4):
            monitor.observe(reference_and_stream(rng, count=64)[1])
        assert wait_idle(monitor)
        report = monitor.latest()
        assert report is not None and report.samples == 256
        assert report.results["level"].p_value > 0.01 and report.results["kind"].p_value > 0.01
        for _ in range(4):
            monitor.observe(reference_and_stream(rng, shift=1.5, count=64)[1])
        assert wait_idle(monitor)
        report = monitor.latest()
        assert report is not None and report.results["level"].p_value < 1e-6
        assert report.results["level"].window_mean > 1.0
    finally:
        monitor.close()


def test_nan_values_are_left_out_of_the_window():
    rng = np.random.default_rng(RNG_SEED)
    reference, _ = reference_and_stream(rng)
    monitor = drift.DriftMonitor(reference, drift.DriftSettings(window=8, min_samples=2, update_every=4), background=False)
    monitor.observe(drift.Features({"level": np.array([1.0, np.nan, 3.0, np.nan])}, {"kind": ["a"] * 4}))
    report = monitor.latest()
    assert report is not None and report.samples == 4 and report.results["level"].samples == 2
    assert report.results["level"].window_mean == 2.0


def test_settings_from_config():
    text = """name: "m"
parameters [
  { key: "drift_enabled", value: { string_value: "true" } },
  { key: "drift_window", value: { string_value: "%d" } },
  { key: "drift_min_samples", value: { string_value: "%d" } },
  { key: "drift_update_every", value: { string_value: "32" } },
  { key: "drift_reference", value: { string_value: "drift_reference.json" } }
]"""
    settings = drift.DriftSettings.from_config(model_config.parse_config_text(text % (512, 128)))
    assert (settings.window, settings.min_samples, settings.update_every, settings.enabled) == (512, 128, 32, True)
    with pytest.raises(model_config.ConfigError, match="drift_min_samples 600 is larger than drift_window 512"):
        drift.DriftSettings.from_config(model_config.parse_config_text(text % (512, 600)))
    # A config that states none takes the defaults in code, which a generated config states (DriftSettings.parameters).
    assert drift.DriftSettings.from_config(model_config.parse_config_text('name: "m"')) == drift.DriftSettings()
    assert drift.DriftSettings().parameters() == {
        "drift_enabled": "true",
        "drift_window": "512",
        "drift_min_samples": "128",
        "drift_update_every": "32",
        "drift_reference": "drift_reference.json",
    }


def test_reference_round_trip(tmp_path):
    rng = np.random.default_rng(RNG_SEED)
    reference, stream = reference_and_stream(rng)
    built = drift.Reference.from_features([stream, stream])
    assert len(built.numeric["level"]) == 128 and sum(built.categorical["kind"].values()) == 128
    path = tmp_path / "drift_reference.json"
    path.write_text(json.dumps({"models": {"m_preprocess": reference.to_json()}}))
    loaded = drift.load_reference(path, "m_preprocess")
    np.testing.assert_allclose(loaded.numeric["level"], np.sort(reference.numeric["level"]), rtol=1e-6)
    assert loaded.categorical == reference.categorical
    with pytest.raises(drift.DriftError, match="no usable drift reference for other"):
        drift.load_reference(path, "other")


def test_served_version_dir(tmp_path):
    assert drift.served_version_dir(tmp_path) is None
    for name in ("1", "2", "10", "configs"):
        (tmp_path / name).mkdir()
    assert drift.served_version_dir(tmp_path) == tmp_path / "10"
    assert drift.served_version_dir(tmp_path, "2") == tmp_path / "2"
    assert drift.served_version_dir(tmp_path, "7") is None


DRIFT_PARAMETERS = """
  { key: "drift_enabled", value: { string_value: "true" } },
  { key: "drift_window", value: { string_value: "512" } },
  { key: "drift_min_samples", value: { string_value: "128" } },
  { key: "drift_update_every", value: { string_value: "32" } },
  { key: "drift_reference", value: { string_value: "drift_reference.json" } }"""


def config_with(name: str, extra: str = "") -> model_config.ModelConfig:
    return model_config.parse_config_text(f'name: "{name}"\nparameters [{DRIFT_PARAMETERS}{extra}\n]')


def test_drift_features_default_to_all_and_select_known_names():
    assert drift.DriftSettings.from_config(config_with("p_preprocess")).features is None
    blank = ',\n  { key: "drift_features", value: { string_value: "  " } }'
    assert drift.DriftSettings.from_config(config_with("p_preprocess", blank)).features is None
    chosen = ',\n  { key: "drift_features", value: { string_value: "brightness, format,sharpness" } }'
    assert drift.DriftSettings.from_config(config_with("p_preprocess", chosen), drift.IMAGE_FEATURES).features == (
        "brightness",
        "format",
        "sharpness",
    )
    classifier = ',\n  { key: "labels_file", value: { string_value: "labels.txt" } },\n  { key: "drift_features", value: { string_value: "confidence,predicted_class" } }'
    assert drift.DriftSettings.from_config(config_with("p_postprocess", classifier), CLASSIFICATION).features == (
        "confidence",
        "predicted_class",
    )


@pytest.mark.parametrize(
    "name, extra, problem",
    [
        ("p_preprocess", "confidence", r"unknown feature\(s\) confidence; this model's features: brightness, contrast"),
        ("p_preprocess", "brightness,,width", "an empty name"),
        ("p_preprocess", "width,width", "names width twice"),
        ("p_postprocess", "predicted_class", r"unknown feature\(s\) predicted_class; this model's features: coverage, confidence"),
    ],
)
def test_drift_features_unknown_to_the_model_are_a_config_error(name, extra, problem):
    selection = f',\n  {{ key: "drift_features", value: {{ string_value: "{extra}" }} }}'
    known = registry.task("segmentation").drift_features if name.endswith("_postprocess") else drift.IMAGE_FEATURES
    with pytest.raises(model_config.ConfigError, match=f"model '{name}': drift_features.*{problem}"):
        drift.DriftSettings.from_config(config_with(name, selection), known)


def test_each_tasks_features_are_declared_by_its_module():
    assert drift.IMAGE_FEATURES == drift.IMAGE_NUMERIC + drift.IMAGE_CATEGORICAL
    assert registry.task("classification").drift_features == ("confidence", "entropy", "predicted_class")
    assert registry.task("segmentation").drift_features == ("coverage", "confidence")
    assert registry.task("detection").drift_features == ("detections", "confidence")


def test_monitor_tests_and_exports_only_the_selected_features():
    rng = np.random.default_rng(RNG_SEED)
    reference, stream = reference_and_stream(rng)
    settings = drift.DriftSettings(window=64, min_samples=32, update_every=32, features=("kind",))
    monitor = drift.DriftMonitor(reference, settings, background=False)
    assert set(monitor.numeric) == set() and set(monitor.categorical) == {"kind"} and monitor.reference.means == {}
    monitor.observe(stream)
    report = monitor.latest()
    assert report is not None and set(report.results) == {"kind"} and report.results["kind"].p_value is not None
    with pytest.raises(drift.DriftError, match=r"the reference has no feature\(s\) sharpness"):
        drift.DriftMonitor(reference, drift.DriftSettings(features=("level", "sharpness")), background=False)
