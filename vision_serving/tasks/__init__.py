"""Tasks: everything a kind of answer means, one module (or package) per task, reached through :mod:`.registry`.

A task (``classification``, ``segmentation``, ``detection``, ``text_reading``) holds its settings (read
from the postprocess model's config, whose ``task`` parameter names it), its postprocessing, its tensors
by role, its drift features, its precision-gate and labelled-dataset metrics, the preprocessors of its own
its pipelines may name (``text_reading``'s ``text_detection``) and how clients print its answers. Nothing
outside these modules switches on the task.
"""
