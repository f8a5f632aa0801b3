"""Benchmarks of the image_classifier ensemble against the in-process limit and a naive service.

Run ``python -m benchmarks.run --help``; results land in ``benchmarks/results/``.
"""

from vision_serving import layout

# The benchmarked pipeline, for its Triton model names (image_classifier, image_classifier_core, ...);
# the model repository it is served from may be another one (a copy), holding it under the same name.
CLASSIFIER = layout.Pipeline.at(layout.MODEL_REPOSITORY / "image_classifier")
