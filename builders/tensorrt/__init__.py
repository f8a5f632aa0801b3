"""The core's TensorRT plan: ``build-engine``, ``verify-plan`` and the images' ``same-tensorrt``.

``build-engine`` turns the ONNX the precision ladder chose (the Q/DQ INT8, the FP16 or the FP32 model) into
``<pipeline>_core/<version>/model.plan`` for the GPU and TensorRT at hand; ``verify-plan`` checks a plan's
provenance against the machine it runs on (an init container, before the server starts). Read in this order:

1. :mod:`.discovery`: the GPUs and the TensorRT release on this machine, without TensorRT's bindings.
2. :mod:`.interface`: the part of TensorRT's Python API the steps use, as Protocols (the real ``tensorrt`` module of
   TensorRT 10.8+ and 11 satisfies them; the unit tests drive the build with a stand-in), and what differs between
   the releases (strong typing, hardware compatibility).
3. :mod:`.models`: which models of a pipeline are served from a plan, their files, and the plan cache's layout.
4. :mod:`.profiles`: the optimization profiles, from the config and the code that makes each input.
5. :mod:`.build`: ``build-engine``, as named steps.
6. :mod:`.verify`: ``verify-plan``.
7. :mod:`.cli`: the command-line steps (registered in ``python -m builders`` and run by ``python -m builders.tensorrt``,
   the server image's entry point, which needs neither onnx nor TensorRT's bindings).

TensorRT is imported only where a step needs it (the build, ``verify-plan --deserialize``).
"""
