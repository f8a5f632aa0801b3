"""The Python-backend models' ``TritonPythonModel`` classes, shared by every pipeline.

Each ``model_repository/<pipeline>/<model>/1/model.py`` imports one of these
(``preprocess``, ``core``, ``postprocess``; ``base`` is what they share).
They are thin: they adapt Triton requests to the plain, unit-tested modules
of ``vision_serving`` and turn their errors into per-request Triton errors.
Those four modules import ``triton_python_backend_utils``, which exists only
inside the Python backend's stub process; the helpers beside them
(``batching``, ``errors``, ``drift_metrics``) take it as an argument or not at
all, so they import without it.
"""
