"""A pipeline loaded once for the builders: its configs (and task) and its recipe.

Every build step takes a :class:`LoadedPipeline`; the command line loads it from ``--pipeline``
(:mod:`builders.arguments`), and ``all`` loads each pipeline once for all its steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from builders import recipe as recipes
from vision_serving import layout
from vision_serving.pipeline_configs import PipelineConfigs
from vision_serving.served import SERVED_CORE_CONFIG, ServedPipeline
from vision_serving.tasks.base import Task


@dataclass(frozen=True)
class LoadedPipeline:
    configs: PipelineConfigs
    recipe: recipes.Recipe

    @property
    def layout(self) -> layout.Pipeline:
        return self.configs.layout

    @property
    def name(self) -> str:
        return self.configs.name

    @property
    def task(self) -> Task:
        return self.configs.task

    def served(
        self,
        variant: str = SERVED_CORE_CONFIG,
        parameters: Mapping[str, str] | None = None,
        version_dir: Path | None = None,
        stage_parameters: Mapping[str, Mapping[str, str]] | None = None,
    ) -> ServedPipeline:
        """The in-process served pipeline with this core variant (and parameter overrides, of the core and of
        second stages by role)."""
        return ServedPipeline.load(self.configs, variant, parameters, version_dir, stage_parameters)


def load(pipeline: layout.Pipeline | Path | str) -> LoadedPipeline:
    """The pipeline (a layout, or its folder) with its configs and recipe read and checked."""
    where = pipeline if isinstance(pipeline, layout.Pipeline) else layout.Pipeline.at(pipeline)
    configs = PipelineConfigs.load(where)
    return LoadedPipeline(configs, recipes.load(where.recipe, configs.task))
