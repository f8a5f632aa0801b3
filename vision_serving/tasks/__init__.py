"""Tasks: everything a kind of answer means, one module per task, reached through :mod:`.registry`.

A task module (``classification``, ``segmentation``, ``detection``) holds its settings (read
from the postprocess model's config, whose ``task`` parameter names it), its postprocessing,
its tensors by role, its drift features, its precision-gate and labelled-dataset metrics and
how clients print its answers. Nothing outside these modules switches on the task.
"""
