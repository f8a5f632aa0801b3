"""Drift statistics of what the pipelines see and answer: features, sliding windows, two-sample tests.

Plain numpy/scipy (no Triton imports); the Python models export the results as Prometheus
gauges (:mod:`vision_serving.triton_models.drift_metrics`).

**Features** (one value per image, vectorized over a batch; NaN = "this image has no value"):

- preprocess (:func:`image_features`, on a 64x64 bilinear thumbnail of the decoded image, a
  fixed grid of samples whatever its size): ``brightness`` (mean Rec. 601 luma,
  0..1), ``contrast`` (luma standard deviation), ``saturation`` (mean HSV saturation), ``sharpness``
  (variance of the 4-neighbour Laplacian of the 0..255 luma thumbnail); and from the payload:
  ``width``, ``height``, ``aspect_ratio`` (width / height), ``bytes``; categorical ``format``.
- postprocess: the task's (``drift_features`` of each :mod:`vision_serving.tasks` module); every
  task exports ``confidence``: classification ``confidence`` (top-1 softmax probability),
  ``entropy`` (nats), categorical ``predicted_class``; segmentation ``coverage`` and
  ``confidence`` (mean per-pixel certainty ``|2p - 1|``); detection ``detections`` per image and
  ``confidence`` (mean score of the kept ones; an image without detections has none).

**Selection**: the optional ``drift_features`` parameter (a comma list of that model's feature
names; empty or absent: all) chooses which features are tested and exported; the
others are still computed (they are cheap) but never windowed, tested or exported.

**Tests** (:func:`compare`): numeric features, the two-sample Kolmogorov-Smirnov test of the window
against the reference sample (statistic D, asymptotic p-value: :func:`ks_test`); categorical ones, Pearson's
chi-square test of the window's counts against the reference's counts (the 2 x k table: the
statistic is the chi-square statistic, not PSI), over the reference's most frequent categories
(each expected at least ``MIN_EXPECTED`` times in a window of ``min_samples``, at most
``MAX_BINS``) plus an ``other`` bin; bins empty in both are dropped, so no expected count is zero.

**Windows** (:class:`DriftMonitor`): a fixed-size ring buffer per feature; the request thread only
appends (and, every ``update_every`` samples, hands a copy of the windows to a daemon worker
thread); the worker runs the tests and leaves its latest :class:`DriftReport` for the request
thread to publish. A test result exists only once its window holds ``min_samples`` values.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from . import image_codec, model_config

THUMBNAIL_SIDE = 64
OTHER = "other"
MIN_EXPECTED = 5.0
MAX_BINS = 20
# The config parameters every preprocess and postprocess model carries.
PARAMETERS = ("drift_enabled", "drift_window", "drift_min_samples", "drift_update_every", "drift_reference")

IMAGE_NUMERIC = ("brightness", "contrast", "saturation", "sharpness", "width", "height", "aspect_ratio", "bytes")
IMAGE_CATEGORICAL = ("format",)
# The preprocess models' features; a postprocess model's are its task's (vision_serving.tasks).
IMAGE_FEATURES = IMAGE_NUMERIC + IMAGE_CATEGORICAL


class DriftError(ValueError):
    """A drift reference or setting is unusable."""


class NonFiniteOutput(RuntimeError):
    """The core produced NaN or Inf for a request: a server-side failure, never the client's."""


# --------------------------------------------------------------------------- features


@dataclass
class Features:
    """One batch: numeric features (float64 [N], NaN = no value) and categorical ones (str [N])."""

    numeric: dict[str, np.ndarray] = field(default_factory=dict)
    categorical: dict[str, list[str]] = field(default_factory=dict)

    def __len__(self) -> int:
        for values in self.numeric.values():
            return len(values)
        for labels in self.categorical.values():
            return len(labels)
        return 0


def thumbnail(image: np.ndarray, side: int = THUMBNAIL_SIDE) -> np.ndarray:
    """HxWx3 uint8 -> side x side x 3 uint8 (aspect ratio not kept), bilinear: a fixed grid of
    side x side samples whatever the image's size (0.03 ms per image; an area resize of the whole
    image cost 1.1 ms: docs/design.md)."""
    return cv2.resize(image, (side, side), interpolation=cv2.INTER_LINEAR)


def pixel_statistics(thumbnails: np.ndarray) -> dict[str, np.ndarray]:
    """[N, s, s, 3] uint8 RGB -> brightness, contrast, saturation, sharpness per image (OpenCV on the
    N thumbnails stacked into one image, then numpy per image)."""
    count, side = len(thumbnails), thumbnails.shape[1]
    stacked = np.ascontiguousarray(thumbnails).reshape(count * side, side, 3)
    luma = cv2.cvtColor(stacked, cv2.COLOR_RGB2GRAY)  # Rec. 601 weights, 0..255
    saturation = cv2.cvtColor(stacked, cv2.COLOR_RGB2HSV)[..., 1]
    # The 4-neighbour Laplacian; each thumbnail's border rows and columns are dropped (they see a neighbour).
    laplacian = cv2.Laplacian(luma, cv2.CV_32F, ksize=1).reshape(count, side, side)[:, 1:-1, 1:-1]
    luma = luma.reshape(count, -1)
    return {
        "brightness": luma.mean(axis=1) / 255.0,
        "contrast": luma.std(axis=1) / 255.0,
        "saturation": saturation.reshape(count, -1).mean(axis=1) / 255.0,
        "sharpness": laplacian.reshape(count, -1).var(axis=1, dtype=np.float64),
    }


def image_features(images: Sequence[np.ndarray], sizes: np.ndarray, byte_sizes: Sequence[int], formats: Sequence[str]) -> Features:
    """Decoded RGB images (any size; a reduced decode is fine), each photo's own (height, width),
    its encoded size and format -> the preprocess features."""
    count = len(images)
    stats = pixel_statistics(np.stack([thumbnail(image) for image in images])) if count else {}
    sizes = np.asarray(sizes, dtype=np.float64).reshape(count, 2)
    numeric = {name: np.asarray(stats.get(name, np.empty(0)), dtype=np.float64) for name in IMAGE_NUMERIC[:4]}
    numeric["width"] = sizes[:, 1].copy()
    numeric["height"] = sizes[:, 0].copy()
    numeric["aspect_ratio"] = sizes[:, 1] / np.maximum(sizes[:, 0], 1.0)
    numeric["bytes"] = np.asarray(byte_sizes, dtype=np.float64)
    return Features(numeric, {"format": [str(item) for item in formats]})


def payload_facts(payloads: Sequence[Any]) -> tuple[list[int], list[str]]:
    """Encoded images (bytes or numpy BYTES items) -> their sizes in bytes and formats (from the magic bytes)."""
    return [len(item) for item in payloads], [
        image_codec.sniff_format(bytes(item[: image_codec.SNIFF_BYTES])) or "unknown" for item in payloads
    ]


def finite_rows(values: np.ndarray) -> np.ndarray:
    """bool [N]: which items of a batch (first axis) hold only finite numbers."""
    values = np.asarray(values)
    return np.isfinite(values.reshape(len(values), -1)).all(axis=1)


def check_finite(values: np.ndarray, name: str) -> None:
    """Raise :class:`NonFiniteOutput` when any value of one request's tensor is NaN or Inf."""
    bad = ~finite_rows(values)
    if bad.any():
        raise NonFiniteOutput(f"non-finite model output (NaN or Inf) in {name} for {int(bad.sum())} of {len(bad)} image(s)")


# --------------------------------------------------------------------------- settings and reference


def parse_features(text: str, known: Sequence[str] | None = None) -> tuple[str, ...] | None:
    """``drift_features`` ("brightness, confidence"; empty = every feature: None) -> the selected
    names, each one of ``known`` when given."""
    names = [name.strip() for name in text.split(",")] if text.strip() else []
    if not names:
        return None
    if "" in names:
        raise DriftError(f"drift_features {text!r}: an empty name (a stray comma?)")
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise DriftError(f"drift_features names {', '.join(duplicates)} twice")
    unknown = [name for name in names if known is not None and name not in known]
    if unknown and known is not None:
        raise DriftError(f"drift_features: unknown feature(s) {', '.join(unknown)}; this model's features: {', '.join(known)}")
    return tuple(names)


@dataclass(frozen=True)
class DriftSettings:
    enabled: bool = True
    window: int = 512
    min_samples: int = 128
    update_every: int = 32
    reference: str = "drift_reference.json"
    features: tuple[str, ...] | None = None  # the tested and exported features; None: all of the reference's

    def __post_init__(self) -> None:
        for name in ("window", "min_samples", "update_every"):
            if getattr(self, name) < 1:
                raise DriftError(f"drift_{name} must be positive, got {getattr(self, name)}")
        if self.min_samples > self.window:
            raise DriftError(f"drift_min_samples {self.min_samples} is larger than drift_window {self.window}")
        if not self.reference or "/" in self.reference:
            raise DriftError(f"drift_reference must be a file name, got {self.reference!r}")

    def parameters(self) -> dict[str, str]:
        """These settings as a config's parameters (:data:`PARAMETERS`): what a generated config states."""
        return {
            "drift_enabled": "true" if self.enabled else "false",
            "drift_window": str(self.window),
            "drift_min_samples": str(self.min_samples),
            "drift_update_every": str(self.update_every),
            "drift_reference": self.reference,
        }

    @classmethod
    def from_config(cls, config: model_config.ModelConfig, known: Sequence[str] | None = None) -> DriftSettings:
        """The config's drift parameters; ``known``: the features the model computes (drift_features must be among them)."""
        defaults = cls().parameters()
        enabled = model_config.parameter(config, "drift_enabled", defaults["drift_enabled"]).strip().lower()
        if enabled not in ("true", "false"):
            raise model_config.ConfigError(f"model '{config.name}': drift_enabled must be true or false, got {enabled!r}")
        try:
            return cls(
                enabled=enabled == "true",
                window=model_config.int_parameter(config, "drift_window", cls.window),
                min_samples=model_config.int_parameter(config, "drift_min_samples", cls.min_samples),
                update_every=model_config.int_parameter(config, "drift_update_every", cls.update_every),
                reference=model_config.parameter(config, "drift_reference", cls.reference),
                features=parse_features(model_config.parameter(config, "drift_features", ""), known),
            )
        except DriftError as error:
            raise model_config.ConfigError(f"model '{config.name}': {error}") from None


def served_version_dir(core_dir: Path, version: str | None = None) -> Path | None:
    """The core's version folder the reference belongs to: ``version`` if given, else the highest
    numeric one (what Triton's default version policy serves); None when there is none."""
    if version:
        path = core_dir / version
        return path if path.is_dir() else None
    versions = [path for path in core_dir.iterdir() if path.is_dir() and path.name.isdigit()] if core_dir.is_dir() else []
    return max(versions, key=lambda path: int(path.name)) if versions else None


@dataclass(frozen=True)
class Reference:
    """One model's reference sample: numeric values per feature, category counts per feature."""

    numeric: dict[str, np.ndarray]
    categorical: dict[str, dict[str, int]]

    @property
    def means(self) -> dict[str, float]:
        return {name: float(np.mean(values)) for name, values in self.numeric.items() if len(values)}

    def to_json(self) -> dict[str, Any]:
        return {
            "numeric": {name: [float(f"{value:.7g}") for value in values] for name, values in self.numeric.items()},
            "categorical": {name: dict(sorted(counts.items())) for name, counts in self.categorical.items()},
        }

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> Reference:
        numeric = {name: np.sort(np.asarray(values, dtype=np.float64)) for name, values in record.get("numeric", {}).items()}
        categorical = {name: {str(k): int(v) for k, v in counts.items()} for name, counts in record.get("categorical", {}).items()}
        for name, values in numeric.items():
            if not len(values) or not np.isfinite(values).all():
                raise DriftError(f"reference feature {name!r} is empty or not finite")
        return cls(numeric, categorical)

    def select(self, features: Sequence[str] | None) -> Reference:
        """Only ``features`` (None: all); a selected feature the reference lacks is a DriftError."""
        if features is None:
            return self
        missing = [name for name in features if name not in self.numeric and name not in self.categorical]
        if missing:
            raise DriftError(f"the reference has no feature(s) {', '.join(missing)} (drift_features); rebuild it")
        return Reference(
            {name: values for name, values in self.numeric.items() if name in features},
            {name: counts for name, counts in self.categorical.items() if name in features},
        )

    @classmethod
    def from_features(cls, batches: Sequence[Features]) -> Reference:
        """The reference of a stream of feature batches (NaN values are left out)."""
        numeric: dict[str, list[np.ndarray]] = {}
        categorical: dict[str, dict[str, int]] = {}
        for batch in batches:
            for name, values in batch.numeric.items():
                numeric.setdefault(name, []).append(values[np.isfinite(values)])
            for name, labels in batch.categorical.items():
                counts = categorical.setdefault(name, {})
                for label in labels:
                    counts[label] = counts.get(label, 0) + 1
        return cls({name: np.sort(np.concatenate(parts)) for name, parts in numeric.items()}, categorical)


def load_reference(path: Path, model_name: str) -> Reference:
    """``model_name``'s reference in a ``drift_reference.json`` (raises DriftError, OSError)."""
    try:
        record = json.loads(path.read_text())
        return Reference.from_json(record["models"][model_name])
    except (KeyError, TypeError, ValueError) as error:
        raise DriftError(f"{path}: no usable drift reference for {model_name}: {error}") from None


def category_bins(counts: Mapping[str, int], min_samples: int) -> list[str]:
    """The reference's categories tested on their own: the most frequent ones expected at least
    MIN_EXPECTED times in ``min_samples`` samples (at most MAX_BINS); everything else is ``other``."""
    total = sum(counts.values())
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    kept = [name for name, count in ranked if total and count / total * min_samples >= MIN_EXPECTED]
    return kept[:MAX_BINS]


# --------------------------------------------------------------------------- tests


@dataclass(frozen=True)
class FeatureResult:
    feature: str
    kind: str  # "ks" or "chi_square"
    samples: int
    statistic: float | None  # None until the window holds min_samples values
    p_value: float | None
    window_mean: float | None  # numeric features only


@dataclass(frozen=True)
class DriftReport:
    sequence: int
    samples: int  # images in the window
    results: dict[str, FeatureResult]


def ks_test(window: np.ndarray, reference: np.ndarray) -> tuple[float, float]:
    """Two-sample Kolmogorov-Smirnov of ``window`` against the *sorted* ``reference``: (D, p-value).

    D is exact (scipy.stats.ks_2samp's); the p-value is the Kolmogorov distribution's with
    Stephens' small-sample correction (Numerical Recipes' ``kstwo``), vectorized numpy: 0.05 ms
    for 512 vs 275 values where ks_2samp takes 2.7 ms (docs/design.md)."""
    from scipy import special

    window = np.sort(window)
    pooled = np.concatenate([window, reference])
    n, m = len(window), len(reference)
    gaps = np.searchsorted(window, pooled, side="right") / n - np.searchsorted(reference, pooled, side="right") / m
    statistic = float(np.abs(gaps).max())
    root = math.sqrt(n * m / (n + m))
    p_value = float(special.kolmogorov((root + 0.12 + 0.11 / root) * statistic))
    return statistic, min(1.0, max(0.0, p_value))


def chi_square_test(observed: np.ndarray, reference_counts: np.ndarray) -> tuple[float, float]:
    """Pearson's chi-square test that the window's counts and the reference's come from one distribution
    (the 2 x k table; expected counts from the pooled proportions; bins empty in both are dropped).

    Two-sample, because the reference is itself a sample: a goodness-of-fit test against its
    proportions, taken as exact, gave a median p-value of 0.09 (not 0.5) on same-distribution
    windows of 256 against a 500-image reference (tests/unit/vision_serving/test_drift.py)."""
    from scipy import stats

    table = np.stack([observed, reference_counts]).astype(np.float64)
    table = table[:, table.sum(axis=0) > 0]
    if table.shape[1] < 2 or table[0].sum() == 0 or table[1].sum() == 0:
        return 0.0, 1.0
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / table.sum()
    statistic = float(((table - expected) ** 2 / expected).sum())
    return statistic, float(stats.chi2.sf(statistic, table.shape[1] - 1))


def compare(
    numeric: Mapping[str, np.ndarray], categorical: Mapping[str, np.ndarray], monitor_reference: PreparedReference, min_samples: int
) -> dict[str, FeatureResult]:
    """Test every feature's window (numeric values; categorical bin codes) against the reference."""
    results: dict[str, FeatureResult] = {}
    for name, values in numeric.items():
        statistic = p_value = None
        if len(values) >= min_samples:
            statistic, p_value = ks_test(values, monitor_reference.numeric[name])
        mean = float(values.mean()) if len(values) else None
        results[name] = FeatureResult(name, "ks", len(values), statistic, p_value, mean)
    for name, codes in categorical.items():
        statistic = p_value = None
        reference_counts = monitor_reference.bin_counts[name]
        if len(codes) >= min_samples:
            observed = np.bincount(codes, minlength=len(reference_counts)).astype(np.float64)
            statistic, p_value = chi_square_test(observed, reference_counts)
        results[name] = FeatureResult(name, "chi_square", len(codes), statistic, p_value, None)
    return results


@dataclass(frozen=True)
class PreparedReference:
    """A reference ready for testing: sorted numeric samples, category -> bin code, counts per bin."""

    numeric: dict[str, np.ndarray]
    bins: dict[str, dict[str, int]]
    bin_counts: dict[str, np.ndarray]
    means: dict[str, float]

    @classmethod
    def of(cls, reference: Reference, min_samples: int) -> PreparedReference:
        bins: dict[str, dict[str, int]] = {}
        bin_counts: dict[str, np.ndarray] = {}
        for name, counts in reference.categorical.items():
            kept = category_bins(counts, min_samples)
            bins[name] = {category: code for code, category in enumerate(kept)}
            other = sum(count for category, count in counts.items() if category not in bins[name])
            bin_counts[name] = np.array([counts[category] for category in kept] + [other], dtype=np.float64)
        return cls({name: np.sort(values) for name, values in reference.numeric.items()}, bins, bin_counts, reference.means)

    def codes(self, name: str, labels: Sequence[str]) -> np.ndarray:
        lookup = self.bins[name]
        other = len(lookup)
        return np.fromiter((lookup.get(label, other) for label in labels), dtype=np.int64, count=len(labels))


# --------------------------------------------------------------------------- windows


class RingBuffer:
    """The last ``size`` values appended (float64 or int64)."""

    def __init__(self, size: int, dtype: Any = np.float64) -> None:
        self.values = np.zeros(size, dtype=dtype)
        self.position = 0
        self.count = 0

    def extend(self, values: np.ndarray) -> None:
        size = len(self.values)
        values = values[-size:]
        first = min(len(values), size - self.position)
        self.values[self.position : self.position + first] = values[:first]
        self.values[: len(values) - first] = values[first:]
        self.position = (self.position + len(values)) % size
        self.count = min(size, self.count + len(values))

    def snapshot(self) -> np.ndarray:
        """A copy of the held values (oldest first)."""
        if self.count < len(self.values):
            return self.values[: self.count].copy()
        return np.concatenate([self.values[self.position :], self.values[: self.position]])


class DriftMonitor:
    """Sliding windows of one model's features, tested against its reference every ``update_every`` samples.

    ``observe`` is what the request thread calls: it appends (NaN values are skipped per feature)
    and, when an update is due, hands copies of the windows to the worker. ``background=False``
    runs the tests inline (unit tests, measurements). ``latest()`` is the newest finished report.
    """

    def __init__(self, reference: Reference, settings: DriftSettings, background: bool = True) -> None:
        self.settings = settings
        self.reference = PreparedReference.of(reference.select(settings.features), settings.min_samples)
        self.numeric = {name: RingBuffer(settings.window) for name in self.reference.numeric}
        self.categorical = {name: RingBuffer(settings.window, np.int64) for name in self.reference.bins}
        self.images = 0  # images in the window
        self.since_update = 0
        self.updates = 0
        self._latest: DriftReport | None = None
        self._lock = threading.Lock()
        self._pending: tuple[int, int, dict[str, np.ndarray], dict[str, np.ndarray]] | None = None
        self._wake = threading.Condition(self._lock)
        self._closed = False
        self._worker: threading.Thread | None = None
        if background:
            self._worker = threading.Thread(target=self._work, name="drift-tests", daemon=True)
            self._worker.start()

    @property
    def window_samples(self) -> int:
        return self.images

    def observe(self, features: Features) -> None:
        count = len(features)
        for name, buffer in self.numeric.items():
            values = features.numeric.get(name)
            if values is not None:
                buffer.extend(values[np.isfinite(values)])
        for name, buffer in self.categorical.items():
            labels = features.categorical.get(name)
            if labels is not None:
                buffer.extend(self.reference.codes(name, labels))
        self.images = min(self.settings.window, self.images + count)
        self.since_update += count
        if self.since_update >= self.settings.update_every:
            self.since_update = 0
            self.updates += 1
            job = (
                self.updates,
                self.images,
                {name: buffer.snapshot() for name, buffer in self.numeric.items()},
                {name: buffer.snapshot() for name, buffer in self.categorical.items()},
            )
            if self._worker is None:
                self._finish(*job)
            else:
                with self._wake:
                    self._pending = job  # a job not started yet is superseded by the newer windows
                    self._wake.notify()

    def _finish(self, sequence: int, images: int, numeric: dict[str, np.ndarray], categorical: dict[str, np.ndarray]) -> None:
        report = DriftReport(sequence, images, compare(numeric, categorical, self.reference, self.settings.min_samples))
        with self._lock:
            if self._latest is None or report.sequence > self._latest.sequence:
                self._latest = report

    def _work(self) -> None:
        while True:
            with self._wake:
                while self._pending is None and not self._closed:
                    self._wake.wait()
                if self._closed:
                    return
                job, self._pending = self._pending, None
            assert job is not None
            self._finish(*job)

    def latest(self) -> DriftReport | None:
        with self._lock:
            return self._latest

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify()
