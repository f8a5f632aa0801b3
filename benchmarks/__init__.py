"""The benchmark harness: four entry points, one result format, one report (docs/benchmarks.md); and the capacity planner.

- ``python -m benchmarks.systems``: end-to-end systems per upload mix: the served ensembles against
  the in-process limit and a naive service, every pipeline (``--service-rates``: the queue sizes);
- ``python -m benchmarks.steps``: per-step CPU costs, in-process, one thread;
- ``python -m benchmarks.whatif``: the served configuration against changed ones, each what-if an option;
- ``python -m benchmarks.soak``: every pipeline under mixed traffic for half an hour, each process's memory.

Each writes ``<entry point>.json`` (the machine, the command, the date, the rows: ``benchmarks/report.py``)
and ``<entry point>.md`` in ``benchmarks/results/``. The in-process computation is the served one,
:class:`vision_serving.served.ServedPipeline` (``benchmarks/inprocess.py``). The capacity planner that
turns the measured costs into vCPUs, memory and pods is ``python -m benchmarks.capacity``.
"""

from vision_serving import layout

# The classifier pipeline, for its Triton model names (image_classifier, image_classifier_core, ...);
# the model repository it is served from may be another one (a copy), holding it under the same name.
CLASSIFIER = layout.Pipeline.at(layout.MODEL_REPOSITORY / "image_classifier")
