"""The OpenVINO CPU plugin's settings from a core config's parameters: plain Python, checked where OpenVINO is not
installed (the consistency check, the unit tier); :mod:`vision_serving.openvino_core` compiles with them."""

from __future__ import annotations

from typing import Any

from . import model_config

PERFORMANCE_HINTS = ("LATENCY", "THROUGHPUT")
INFERENCE_PRECISIONS = ("f32", "bf16", "f16")
_STREAM_KEYWORDS = ("AUTO", "NUMA")
_BOOLEANS = {"true": True, "false": False}


def compile_properties(config: model_config.ModelConfig) -> dict[str, Any]:
    """The CPU plugin's properties from the config's parameters (validated)."""
    hint = model_config.parameter(config, "performance_hint", "LATENCY").upper()
    if hint not in PERFORMANCE_HINTS:
        raise model_config.ConfigError(f"model '{config.name}': performance_hint {hint!r} is not one of {PERFORMANCE_HINTS}")
    streams = model_config.parameter(config, "num_streams", "1").upper()
    if streams not in _STREAM_KEYWORDS and not (streams.isdigit() and int(streams) > 0):
        raise model_config.ConfigError(f"model '{config.name}': num_streams {streams!r} is not a positive number, AUTO or NUMA")
    threads = model_config.int_parameter(config, "inference_threads", 1)
    if threads < 0:
        raise model_config.ConfigError(f"model '{config.name}': inference_threads must be >= 0 (0: OpenVINO's default)")
    pinning = model_config.parameter(config, "cpu_pinning", "false").lower()
    if pinning not in _BOOLEANS:
        raise model_config.ConfigError(f"model '{config.name}': cpu_pinning {pinning!r} is not true or false")
    precision = model_config.parameter(config, "inference_precision", "f32").lower()
    if precision not in INFERENCE_PRECISIONS:
        raise model_config.ConfigError(f"model '{config.name}': inference_precision {precision!r} is not one of {INFERENCE_PRECISIONS}")
    return {
        "INFERENCE_PRECISION_HINT": precision,
        "PERFORMANCE_HINT": hint,
        "NUM_STREAMS": streams,
        "INFERENCE_NUM_THREADS": threads,
        "ENABLE_CPU_PINNING": _BOOLEANS[pinning],
    }
