"""Claims of the docs that name the builders' facts, held to the code that defines them.

Here (the ONNX tier) because the builders' command line and pass registry import onnx.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from builders import cli
from builders.passes import registry
from vision_serving import layout, model_config

ROOT = Path(__file__).resolve().parents[2]
BUILDING = (ROOT / "docs" / "building.md").read_text()
SIZING = (ROOT / "docs" / "sizing.md").read_text()
# How docs/sizing.md names the shipped pipelines (a pipeline you add is not in its prose).
DOC_NAMES = {
    "image_classifier": "classifier",
    "face_detector": "face detector",
    "person_segmenter": "segmenter",
    "text_reader": "text reader",
}


def words(text: str) -> list[str]:
    return re.findall(r"[a-z_]+", text)


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_the_default_fix_passes_are_the_registrys():
    listed = re.search(r"`fix` runs, by default,\s*(.*?);", BUILDING, re.DOTALL)
    assert listed, "docs/building.md no longer lists fix's default passes"
    assert words(listed.group(1)) == list(registry.DEFAULT_PASSES)


def test_the_steps_said_to_take_force_are_those_that_do():
    listed = re.search(r"`--force` rebuilds: (.*?);", BUILDING, re.DOTALL)
    assert listed, "docs/building.md no longer says which steps take --force"
    named = set(re.findall(r"`([a-z-]+)`", listed.group(1)))
    with_force = {name for name, sub in subcommands().items() if any("--force" in a.option_strings for a in sub._actions)}
    assert named == with_force


def test_the_postprocess_shares_are_the_configs():
    """docs/sizing.md names each postprocess's cpu_share and max_instances by what its answers cost."""
    paragraph = re.search(r"The postprocess models have no `decode_threads`.*?\n\n", SIZING, re.DOTALL)
    assert paragraph, "docs/sizing.md no longer describes the postprocess shares"
    text = " ".join(paragraph.group(0).split())
    for name, said_name in DOC_NAMES.items():
        config = model_config.load_config(layout.pipeline(name, ROOT / "model_repository").model_dir("postprocess"))
        share, instances = model_config.parameter(config, "cpu_share"), model_config.parameter(config, "max_instances")
        said_share = re.search(rf"(`cpu_share` )?{re.escape(share)} for the [^;]*{said_name}", text)
        assert said_share, f"{name}: cpu_share {share} not said"
        said_instances = f"the {said_name}'s {instances}" in text or (instances == "8" and "`max_instances` 8" in text)
        assert said_instances, f"{name}: max_instances {instances} not said"
