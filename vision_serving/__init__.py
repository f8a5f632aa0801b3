"""Pure serving logic for the Triton image-classification ensemble.

Nothing in this package imports ``triton_python_backend_utils``: the Python
backend's ``model.py`` files adapt Triton requests to these functions, and the
builders and tests call them directly, so calibration, the accuracy gate and
the server all run exactly the same preprocessing.
"""
