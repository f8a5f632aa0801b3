"""The serving library of every pipeline's ensemble: decoding, preprocessing, the tasks, drift, sizing.

Only the thin ``TritonPythonModel`` adapters under ``vision_serving/triton_models/``
(``base``, ``preprocess``, ``core`` and ``postprocess``: each
``model_repository/<pipeline>/<model>/1/model.py`` imports one) import
``triton_python_backend_utils``; everything else, the rest of ``triton_models``
included, is plain Python the builders, benchmarks and tests call directly, so
calibration, the precision gates and the server all run exactly the same code.
"""
