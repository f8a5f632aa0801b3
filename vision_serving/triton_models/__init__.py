"""The Python-backend models' ``TritonPythonModel`` classes, shared by every pipeline.

Each ``model_repository/<pipeline>/<model>/1/model.py`` imports one of these.
They are thin: they adapt Triton requests to the plain, unit-tested modules
of ``vision_serving`` (which never import ``triton_python_backend_utils``)
and turn their errors into per-request Triton errors. They import
``triton_python_backend_utils``, which exists only inside the Python
backend's stub process.
"""
