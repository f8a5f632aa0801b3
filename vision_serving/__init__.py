"""The serving library of every pipeline's ensemble: decoding, preprocessing, the tasks, drift, sizing.

Only ``vision_serving.triton_models`` (the ``TritonPythonModel`` adapters every
``model.py`` imports) imports ``triton_python_backend_utils``; everything else is
plain Python the builders, benchmarks and tests call directly, so calibration,
the precision gates and the server all run exactly the same code.
"""
