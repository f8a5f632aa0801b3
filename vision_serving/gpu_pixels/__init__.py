"""The opt-in pixel path on the GPU: a preprocess whose spec says ``pixel_device = "gpu"`` decodes, resizes, letterboxes
and lays out (normalizes, for a float core) its JPEGs on the GPU with NVIDIA DALI, and hands the core its input in GPU
memory; what stays on the CPU is what guards the server: the upload limits, the header checks and each request's own
error.

- :mod:`.settings`: the config parameters of the mode and their defaults;
- :mod:`.plan`: per upload, plain Python: whether the GPU decoder takes it (else the served CPU decode) and the
  geometry the served resize would use, as the arguments the DALI pipeline takes;
- :mod:`.dali_pipeline`: the DALI pipeline itself, one definition for the GPU (``decoders.image`` on ``mixed``) and
  for DALI's CPU operators (the parity tests, no GPU needed); it imports DALI and numpy only;
- :mod:`.step`: one batch of the preprocess model: the GPU runs, the CPU fallbacks and each request's outputs;
- :mod:`vision_serving.triton_models.gpu_preprocess`: the Triton adapter.

docs/gpu-pixels.md says how to turn it on and what was run where.
"""
