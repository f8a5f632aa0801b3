"""The stream service: cameras and videos in, tracked detections, line and zone counts out, through the served
detection pipelines (docs/streams.md). It runs beside Triton and imports nothing of the serving library.

``python -m vision_streams --config streams.toml`` (``./scripts/streams``) starts it.
"""
