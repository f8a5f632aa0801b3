"""Development tooling, used by ``scripts/`` (entry points), the tests and the benchmarks; not installed in the serving image.
It imports the library and the builders, never the benchmarks (``tests/unit/test_imports.py``).

- :mod:`~devtools.triton_server`: the local tritonserver with every pipeline (``scripts/serve``);
- :mod:`~devtools.client`: one client program for every pipeline, told its task by the script
  that runs it (``scripts/classify``, ``scripts/segment``, ``scripts/detect``, ``scripts/read-text``) or by
  ``python -m devtools.client --task NAME``; :mod:`~devtools.clients`: each task's own part of it (its
  options, its report of an answer, its drawings), one module per task, a generic one for the rest;
- :mod:`~devtools.loadgen`: servers on copies of the model repository, the load generator,
  process and ``/dev/shm`` probes;
- :mod:`~devtools.rollout` and :mod:`~devtools.canary`: a new core version rolled into a running
  server (``scripts/rollout.py``), a canary promoted or rolled back from Prometheus (``scripts/canary``);
- :mod:`~devtools.proxy` and :mod:`~devtools.prometheus`: a real nginx in front of local servers,
  a real Prometheus scraping them and evaluating the alert rules;
- :mod:`~devtools.model_image`: the model image's content (``docker/models.Dockerfile``);
- :mod:`~devtools.lock`: the dependency locks, ``requirements/*.in`` -> ``*.txt`` (``scripts/lock``).
"""
