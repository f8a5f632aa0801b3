"""The shipped pipelines as the gateway sees them, read from model_repository/'s configs instead of a server (the same
configs the server serves), for the gateway's unit tests."""

from __future__ import annotations

from gateway.catalog import Pipeline, pipeline_from_configs, step_names
from tests.support import shipped as shipped_pipelines
from vision_serving import layout, model_config


def local_pipeline(pipeline: layout.Pipeline) -> Pipeline:
    ensemble = model_config.load_config(pipeline.ensemble_dir)
    steps = {name: model_config.load_config(pipeline.repository / name) for name in step_names(ensemble)}
    found = pipeline_from_configs(ensemble, steps)
    assert found is not None, pipeline.name
    return found


def shipped() -> dict[str, Pipeline]:
    return {pipeline.name: local_pipeline(pipeline) for pipeline in shipped_pipelines.pipelines()}
