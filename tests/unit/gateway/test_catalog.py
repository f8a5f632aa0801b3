"""The pipelines found from configs as the server gives them: each shipped ensemble's task, tensors by role, options
and limits; an ensemble without a task step is no pipeline; a server that restricts its repository index is read
through its statistics (the integration tests read the Deployment's restricted server itself)."""

from __future__ import annotations

import asyncio

from gateway.catalog import Catalog, ModelSource, pipeline_from_configs, step_names
from tests.support import shipped as shipped_pipelines
from tests.unit.gateway.local import shipped
from vision_serving import model_config

PIPELINES = shipped()


def test_each_shipped_pipeline_is_found_by_its_tasks_roles():
    assert {name: p.task for name, p in PIPELINES.items()} == {
        "face_detector": "detection",
        "image_classifier": "classification",
        "person_segmenter": "segmentation",
        "text_reader": "text_reading",
    }
    classifier, faces = PIPELINES["image_classifier"], PIPELINES["face_detector"]
    assert classifier.image_input == "IMAGE" and classifier.batched and classifier.max_image_bytes == 20 * 1024 * 1024
    assert list(classifier.options) == ["top_k"] and classifier.options["top_k"].tensor == "TOP_K"
    assert list(faces.options) == ["score_threshold", "iou_threshold"]
    assert set(faces.outputs) == {"boxes", "scores", "class_ids", "labels", "count", "keypoints"}
    assert faces.output_dims["keypoints"] == (-1, 6, 2)
    assert PIPELINES["person_segmenter"].options == {} and "heic" in PIPELINES["person_segmenter"].formats


def test_an_ensemble_without_a_task_step_is_no_pipeline():
    pipeline = shipped_pipelines.pipelines()[0]
    ensemble = model_config.load_config(pipeline.ensemble_dir)
    steps = {name: model_config.load_config(pipeline.repository / name) for name in step_names(ensemble)}
    for config in steps.values():
        if "task" in config.parameters:
            del config.parameters["task"]
    assert pipeline_from_configs(ensemble, steps) is None


class RestrictedServer:
    """What a server restricting its repository index answers the gateway (Triton's UNAVAILABLE 'restricted' message)."""

    def __init__(self) -> None:
        self.configs = {}
        for pipeline in shipped_pipelines.pipelines():
            for folder in pipeline.repository.iterdir():
                if (folder / "config.pbtxt").is_file():
                    self.configs[folder.name] = model_config.load_config(folder)

    async def get_model_repository_index(self, **_):
        raise RuntimeError("[StatusCode.UNAVAILABLE] This protocol is restricted, expecting header 'triton-grpc-protocol-x-key'")

    async def get_inference_statistics(self, name, **_):
        return {"model_stats": [{"name": name, "version": "1"} for name in self.configs]}

    async def get_model_config(self, name, **_):
        from google.protobuf import json_format

        return {"config": json_format.MessageToDict(self.configs[name], preserving_proto_field_name=True)}


def test_a_restricted_index_is_read_through_the_statistics():
    catalog = Catalog(ModelSource(RestrictedServer()))
    asyncio.run(catalog.refresh())
    assert sorted(catalog.pipelines) == sorted(PIPELINES) and catalog.problems == {}
    assert catalog.pipelines["image_classifier"].options == PIPELINES["image_classifier"].options
