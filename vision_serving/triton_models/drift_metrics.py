"""Drift statistics and non-finite outputs as Triton custom metrics (the Python backend's MetricFamily API).

The metric contract (alerts and dashboards depend on it; labels ``pipeline``, ``model`` and, per
feature, ``feature``):

- ``vision_drift_statistic`` (gauge): KS D (numeric features) or the chi-square statistic (categorical);
- ``vision_drift_p_value`` (gauge): that test's p-value, set once the window holds ``drift_min_samples``;
- ``vision_drift_window_samples`` (gauge, no ``feature``): images in the window of the latest update;
- ``vision_feature_window_mean`` / ``vision_feature_reference_mean`` (gauges): numeric features;
- ``vision_nonfinite_outputs_total`` (counter, no ``feature``): requests refused for a NaN/Inf core output.

:class:`DriftMetrics` is built at ``initialize``; the models call ``observe`` with each batch's
features (never failing a request: a drift bug is logged) and ``check_finite`` per request.
The statistics come from :class:`vision_serving.drift.DriftMonitor`; every value is set from the
request thread, and only when an update has finished (every ``drift_update_every`` images): each
``set`` is an IPC round trip from the stub to the server.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import drift, layout, model_config

FAMILIES = {
    "statistic": (
        "vision_drift_statistic",
        "Drift test statistic of a feature's window against the reference: KS D (numeric) or chi-square (categorical)",
    ),
    "p_value": ("vision_drift_p_value", "p-value of the drift test of a feature's window against the model version's reference"),
    "window_samples": ("vision_drift_window_samples", "Images in the drift window"),
    "window_mean": ("vision_feature_window_mean", "Mean of a numeric feature over the drift window"),
    "reference_mean": ("vision_feature_reference_mean", "Mean of a numeric feature over the reference sample"),
}
NONFINITE = ("vision_nonfinite_outputs_total", "Requests refused because the core produced NaN or Inf")


def pipeline_name(args: dict[str, Any]) -> str:
    """The pipeline folder holding this model (Triton's ``model_repository`` arg is the model's folder)."""
    return Path(args["model_repository"]).resolve().parent.name


class DriftMetrics:
    def __init__(
        self, pb_utils: Any, args: dict[str, Any], config: model_config.ModelConfig, features: Sequence[str], counts_nonfinite: bool = False
    ) -> None:
        """``features``: every drift feature the model computes; ``counts_nonfinite``: this model checks
        core outputs (postprocess models): export the counter."""
        self.logger = pb_utils.Logger
        self.labels = {"pipeline": pipeline_name(args), "model": config.name}
        self.monitor: drift.DriftMonitor | None = None
        self.published = 0
        self.families: dict[str, Any] = {}
        self._gauges: dict[tuple[str, str], Any] = {}
        self.window_samples: Any = None
        self.nonfinite: Any = None
        if counts_nonfinite:
            name, text = NONFINITE
            self.families["nonfinite"] = pb_utils.MetricFamily(name=name, description=text, kind=pb_utils.MetricFamily.COUNTER)
            self.nonfinite = self.families["nonfinite"].Metric(labels=dict(self.labels))
        settings = drift.DriftSettings.from_config(config, features)
        if not settings.enabled:
            self.logger.log_info(f"{config.name}: drift statistics off (drift_enabled false)")
            return
        self.monitor = self._load_monitor(Path(args["model_repository"]), config, settings)
        if self.monitor is None:
            return
        for key, (name, text) in FAMILIES.items():
            self.families[key] = pb_utils.MetricFamily(name=name, description=text, kind=pb_utils.MetricFamily.GAUGE)
        self.window_samples = self.families["window_samples"].Metric(labels=dict(self.labels))
        self.window_samples.set(0.0)
        for feature, mean in self.monitor.reference.means.items():
            self._gauge("reference_mean", feature).set(mean)

    def _load_monitor(self, model_dir: Path, config: model_config.ModelConfig, settings: drift.DriftSettings) -> drift.DriftMonitor | None:
        pipeline = layout.Pipeline.at(model_dir.parent)
        version = model_config.parameter(config, "drift_core_version", "") or None
        version_dir = drift.served_version_dir(pipeline.core_dir, version)
        path = layout.drift_reference_path(version_dir or pipeline.core_version_dir, settings.reference)
        try:
            monitor = drift.DriftMonitor(drift.load_reference(path, config.name), settings)
        except (OSError, drift.DriftError) as error:
            self.logger.log_warn(
                f"{config.name}: no drift statistics: cannot read {path} ({error}); build it with "
                f"`python -m builders drift-reference --pipeline {pipeline.name}`"
            )
            return None
        features = ", ".join(settings.features) if settings.features else "all features"
        self.logger.log_info(
            f"{config.name}: drift reference {path} (window {settings.window}, min {settings.min_samples}, "
            f"every {settings.update_every}; {features})"
        )
        return monitor

    def _gauge(self, key: str, feature: str) -> Any:
        metric = self._gauges.get((key, feature))
        if metric is None:
            metric = self.families[key].Metric(labels={**self.labels, "feature": feature})
            self._gauges[(key, feature)] = metric
        return metric

    def check_finite(self, values: np.ndarray, name: str) -> None:
        """Refuse (raise NonFiniteOutput) one request's core output holding NaN/Inf, and count it."""
        try:
            drift.check_finite(values, name)
        except drift.NonFiniteOutput:
            if self.nonfinite is not None:
                self.nonfinite.increment(1.0)
            raise

    def observe(self, compute_features: Any) -> None:
        """Compute this batch's features (a callable: skipped when drift is off) and publish the latest report."""
        if self.monitor is None:
            return
        try:
            self.monitor.observe(compute_features())
            report = self.monitor.latest()
            # Each set() is a round trip to the server process: values change only with a finished update.
            if report is not None and report.sequence > self.published:
                self.published = report.sequence
                self.window_samples.set(float(report.samples))
                for result in report.results.values():
                    if result.window_mean is not None:
                        self._gauge("window_mean", result.feature).set(result.window_mean)
                    if result.p_value is not None and result.statistic is not None:
                        self._gauge("statistic", result.feature).set(result.statistic)
                        self._gauge("p_value", result.feature).set(result.p_value)
        except Exception as error:  # drift statistics must never fail a request
            self.logger.log_error(f"{self.labels['model']}: drift statistics failed: {type(error).__name__}: {error}")

    def close(self) -> None:
        """Stop the worker; drop the metrics before their families (the backend requires that order)."""
        if self.monitor is not None:
            self.monitor.close()
        self._gauges.clear()
        self.window_samples = self.nonfinite = None
        self.families.clear()
