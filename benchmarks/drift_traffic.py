"""Day-one p-values of a product's traffic against the default (held-out) drift reference and against
one built from a sample of that traffic with ``builders drift-reference --photos``
(``python -m benchmarks.whatif --drift-reference``).

The "traffic" is a product that normalizes uploads: the installed package photos, each seeded
augmentation (the evaluation profile: crops, color, blur) resized to 1024x768 and sent as JPEG
(quality 80-92). Two disjoint seeded samples of it: ``reference`` photos written to a folder and
built into a reference with ``--photos`` (a copy of the classifier in .build/, never the served
repository's), and a window of ``window`` images, whose features (computed on the same served
path) are tested against both references as a full window of the served monitor would be.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import cv2
import numpy as np

from builders import calibration, drift_reference, loaded, photos
from vision_serving import drift, layout, model_config

ROOT = layout.BUILD_DIR / "bench-drift-user-reference"
SIZE = (1024, 768)


def traffic(folder: Path, count: int, seed: int) -> None:
    """``count`` JPEG uploads of the product's traffic in ``folder`` (seeded)."""
    sources = calibration.package_sources(list(photos.registry()))
    decoded = [cv2.cvtColor(cv2.imdecode(np.frombuffer(source.data, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB) for source in sources]
    folder.mkdir(parents=True)
    for index in range(count):
        rng = np.random.default_rng(np.random.SeedSequence([seed, index]))
        image, _ = calibration.augment(decoded[index % len(decoded)], rng, calibration.EVALUATION_PROFILE)
        image = cv2.cvtColor(cv2.resize(image, SIZE, interpolation=cv2.INTER_AREA), cv2.COLOR_RGB2BGR)
        ok, data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(80, 93))])
        assert ok
        (folder / f"upload_{index:05d}.jpg").write_bytes(data.tobytes())


def window_features(reference: drift.Reference) -> drift.Features:
    """A reference's values as one batch of features (order does not matter to the tests)."""
    categorical = {name: [label for label, count in counts.items() for _ in range(count)] for name, counts in reference.categorical.items()}
    return drift.Features(dict(reference.numeric), categorical)


def p_values(
    reference_path: Path, window: dict[str, drift.Reference], settings: dict[str, drift.DriftSettings]
) -> dict[str, dict[str, float]]:
    result = {}
    for model, features in window.items():
        count = max(len(values) for values in features.numeric.values())
        config = drift.DriftSettings(window=count, min_samples=settings[model].min_samples, update_every=count)
        monitor = drift.DriftMonitor(drift.load_reference(reference_path, model), config, background=False)
        monitor.observe(window_features(features))
        report = monitor.latest()
        assert report is not None
        result[model] = {name: float(f"{item.p_value:.3g}") for name, item in report.results.items() if item.p_value is not None}
    return result


def p_value_rows(reference_count: int, window_count: int) -> list[dict[str, object]]:
    """One row per drift feature of the classifier's preprocess and postprocess models: the window's p-value
    against the held-out reference and against the user reference."""
    source = layout.pipeline("image_classifier")
    shutil.rmtree(ROOT, ignore_errors=True)
    shutil.copytree(
        source.repository, ROOT / "model_repository" / source.name, ignore=shutil.ignore_patterns("__pycache__", "*.plan*", "model_int8*")
    )
    copy = layout.pipeline(source.name, ROOT / "model_repository")
    held_out = drift_reference.build(loaded.load(copy), force=True, log=lambda message: None)
    held_out_copy = ROOT / "held_out_reference.json"
    shutil.copy2(held_out, held_out_copy)
    traffic(ROOT / "reference_photos", reference_count, seed=1)
    traffic(ROOT / "window_photos", window_count, seed=2)
    user = drift_reference.build(loaded.load(copy), photos=ROOT / "reference_photos", log=lambda message: print(message, file=sys.stderr))
    # The window's features, on the same served path (a reference built from the window's photos).
    window_repository = ROOT / "window_repository"
    shutil.copytree(copy.repository, window_repository / source.name)
    window_copy = layout.pipeline(source.name, window_repository)
    window_path = drift_reference.build(loaded.load(window_copy), photos=ROOT / "window_photos", log=lambda message: None)
    models = (copy.model_name("preprocess"), copy.model_name("postprocess"))
    window = {model: drift.load_reference(window_path, model) for model in models}
    # The served settings (min_samples), no feature selection.
    settings = {model: drift.DriftSettings.from_config(model_config.load_config(copy.repository / model)) for model in models}
    held_out_p, user_p = p_values(held_out_copy, window, settings), p_values(user, window, settings)
    return [
        {"model": model, "feature": feature, "held_out": value, "user": user_p[model].get(feature)}
        for model, values in held_out_p.items()
        for feature, value in values.items()
    ]
