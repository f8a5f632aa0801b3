"""The text reading task: a text detector's probability maps -> lines of text, read by second-stage models.

Postprocess config (``task: "text_reading"``):

- inputs by role: the detector's ``probability`` map (FP32 ``[1, H, W]``), the ``image`` the boxes are
  found in and the crops cut from (UINT8 ``[h, w, 3]``, BGR: the preprocess's resized, padded photo) and
  its ``transform`` back to the photo (FP32 ``[5]``: ratio_h, ratio_w, pad_top, photo height, width);
- outputs by role: ``texts`` (BYTES ``[K]``, UTF-8), ``scores`` and the optional ``box_scores`` (FP32
  ``[K]``), ``boxes`` (FP32 ``[K, 4, 2]``: four corners in the photo's pixels, clockwise from the
  top-left) and ``count`` (INT32 ``[1]``); K is the largest count of a response, rows past an image's
  count empty and zero;
- parameters: the second stages, each a model of the same model repository: ``recognizer_model`` and,
  optionally, ``classifier_model`` (text direction), with their tensor names (``*_input``, and
  ``*_output``: a comma list, the recognizer's each step's best class and its probability, which its
  graph computes) and the most crops one request to them may hold (``*_max_batch``, at most that
  model's ``max_batch_size``); ``characters``: the recognizer's character list (a JSON list of
  strings, beside this config, written by the build).

The second stages are reached as :class:`.reader.Stages`: the served model sends them BLS requests
(``triton_models/text_postprocess.py``); in process (:class:`vision_serving.served.ServedPipeline`) they
are the same models' CPU cores. Either way the crops go in the same chunks (:mod:`.fanout`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from rapidfuzz.distance import Levenshtein

from ... import drift, model_config
from ...model_config import ConfigError, ModelConfig
from ..base import EngineProfile, LabelledSample, Postprocessor, Role, Task, TaskResult, gate_report
from . import preprocessor as text_preprocessor
from . import reader, recognition, steps
from .agreement import Agreement
from .reader import Line
from .settings import DEFAULT

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
# The second stages a postprocess config may name: role -> required.
STAGE_ROLES = {"classifier": False, "recognizer": True}

INPUT_ROLES = (
    Role("probability", "FP32", (1, None, None), name="PROBABILITY", from_core=True),
    Role("image", "UINT8", (None, None, 3), name=steps.IMAGE),
    Role("transform", "FP32", (5,), name=steps.TRANSFORM),
)
OUTPUT_ROLES = (
    Role("texts", "BYTES", (None,), name="TEXTS"),
    Role("scores", "FP32", (None,), name="SCORES"),
    Role("boxes", "FP32", (None, 4, 2), name="BOXES"),
    Role("box_scores", "FP32", (None,), optional=True, name="BOX_SCORES"),
    Role("count", "INT32", (1,), name="COUNT"),
)

# A second stage: a batch in, its outputs (in the order the config lists them) out.
StageModel = Callable[[np.ndarray], Awaitable[tuple[np.ndarray, ...]]]
# The outputs each role's model must give, in order: the direction probabilities; each step's best class and its probability.
STAGE_OUTPUTS = {"classifier": 1, "recognizer": 2}
# Crops per recognizer run its profiles are tuned for: the mean batch measured on the text upload mix, 3.1 to 3.3 at
# 1 to 16 clients (benchmarks/results/text_reader/systems.md), rounded up.
RECOGNIZER_OPT_BATCH = 4


def stage_names(config: ModelConfig) -> dict[str, str]:
    """The second stages a postprocess config names: role -> model name (``<role>_model``)."""
    names = {role: model_config.parameter(config, f"{role}_model", "") for role in STAGE_ROLES}
    missing = [role for role, required in STAGE_ROLES.items() if required and not names[role]]
    if missing:
        raise ConfigError(f"model '{config.name}': no {missing[0]}_model parameter (the model that reads each line)")
    return {role: name for role, name in names.items() if name}


def recognizer_widths(config: ModelConfig) -> tuple[int, ...]:
    """``recognizer_widths``: the width buckets crops are padded to (each a TensorRT profile of the recognizer)."""
    text = model_config.parameter(config, "recognizer_widths", ",".join(str(w) for w in recognition.DEFAULT_BUCKETS))
    try:
        widths = tuple(int(item) for item in text.split(","))
    except ValueError:
        raise ConfigError(f"model '{config.name}': recognizer_widths {text!r} is not a comma list of widths") from None
    if not widths or list(widths) != sorted(set(widths)) or any(w < 8 or w % 8 for w in widths):
        raise ConfigError(f"model '{config.name}': recognizer_widths must rise, each a multiple of 8 (the recognizer's step), got {text!r}")
    return widths


def stage_outputs(config: ModelConfig, role: str) -> tuple[str, ...]:
    """``<role>_output``: the outputs the postprocess reads from that second stage, a comma list in order."""
    text = model_config.parameter(config, f"{role}_output")
    names = tuple(name.strip() for name in text.split(","))
    if len(names) != STAGE_OUTPUTS[role] or not all(names):
        raise ConfigError(
            f"model '{config.name}': {role}_output {text!r} must name {STAGE_OUTPUTS[role]} output(s) of {role}_model, comma-separated"
        )
    return names


class TextReadingResult(TaskResult):
    def __init__(self, post: TextReadingPostprocessor, lines: Sequence[Sequence[Line]]) -> None:
        self.post = post
        self.lines = [list(photo) for photo in lines]

    def __len__(self) -> int:
        return len(self.lines)

    def outputs(self, start: int = 0, stop: int | None = None) -> dict[str, np.ndarray]:
        values = reader.padded(self.lines[start:stop])
        by_role = {"texts": values["TEXTS"], "scores": values["SCORES"], "boxes": values["BOXES"]}
        by_role.update(box_scores=values["BOX_SCORES"], count=values["COUNT"])
        return self.post.named(by_role)

    def features(self) -> drift.Features:
        counts = np.array([len(photo) for photo in self.lines], np.float64)
        means = np.array([np.mean([line.score for line in photo]) if photo else np.nan for photo in self.lines], np.float64)
        # "confidence", as every task names its mean score: the alert on a confidence collapse covers it too.
        return drift.Features({"lines": counts, "confidence": means})


class TextReadingPostprocessor(Postprocessor):
    def __init__(self, config: ModelConfig, model_dir: Path, require_characters: bool = True) -> None:
        super().__init__(config, INPUT_ROLES, OUTPUT_ROLES)
        self.model_dir = model_dir
        self.stage_models = stage_names(config)
        self.max_batch = {role: model_config.int_parameter(config, f"{role}_max_batch", 0) for role in self.stage_models}
        for role, size in self.max_batch.items():
            if size < 1:
                raise ConfigError(f"model '{config.name}': {role}_max_batch must be a positive count of crops, got {size}")
        self.stage_tensors = {
            role: (model_config.parameter(config, f"{role}_input"), stage_outputs(config, role)) for role in self.stage_models
        }
        # RapidOCR's defaults; a config without a classifier_model reads every crop as it is cut.
        self.settings = dataclasses.replace(DEFAULT, use_classifier="classifier" in self.stage_models)
        self.widths = recognizer_widths(config)
        self.characters_file = model_dir / model_config.parameter(config, "characters", "characters.json")
        self.classes: list[str] = self.load_characters() if require_characters else []
        self._stages: dict[str, StageModel] = {}

    def load_characters(self) -> list[str]:
        """The recognizer's classes from the character list the build wrote (``FileNotFoundError`` before it)."""
        listed = json.loads(self.characters_file.read_text(encoding="utf-8"))  # the stub's locale may be ASCII
        if not isinstance(listed, list) or not all(isinstance(item, str) for item in listed):
            raise ConfigError(f"{self.characters_file}: not a JSON list of strings")
        return recognition.characters(listed)

    def use_stages(self, models: Mapping[str, StageModel]) -> None:
        """The second-stage models (role -> an async call: a batch in, the model's output out)."""
        missing = sorted(set(self.stage_models) - set(models))
        if missing:
            raise ConfigError(f"model '{self.config.name}': no {', '.join(missing)} model to call")
        self._stages = dict(models)

    def stages(self) -> reader.Stages:
        if not self._stages:
            raise RuntimeError(f"model '{self.config.name}': its second stages are not connected (use_stages)")
        return reader.Stages(
            self._stages.get("classifier"), self.max_batch.get("classifier", 1), self._stages["recognizer"], self.max_batch["recognizer"]
        )

    def parse_roles(self, values: Mapping[str, np.ndarray | None]) -> dict[str, np.ndarray]:
        # Each an array [n, ...], or in process a ragged batch (photos of different sizes: vision_serving.preprocessing.ragged).
        maps, images, transforms = (values[role] for role in ("probability", "image", "transform"))
        assert maps is not None and images is not None and transforms is not None  # required roles
        if not (len(maps) == len(images) == len(transforms)):
            raise ValueError(f"{len(maps)} detector maps, {len(images)} images and {len(transforms)} transforms: one of each per photo")
        if not all(np.isfinite(np.asarray(probability)).all() for probability in maps):
            raise ValueError("the detector's map holds NaN or Inf")
        photos = steps.from_preprocess(list(images), np.asarray([np.asarray(t, np.float32) for t in transforms]))
        out = np.empty(len(maps), dtype=object)
        for index, (probability, photo) in enumerate(zip(maps, photos)):
            out[index] = (np.asarray(probability, np.float32), photo)
        return {"photos": out}

    @staticmethod
    def concatenate(parsed: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """Requests of different sizes in one batch: the photos stay separate objects."""
        photos = [item for request in parsed for item in request["photos"]]
        out = np.empty(len(photos), dtype=object)
        for index, item in enumerate(photos):
            out[index] = item
        return {"photos": out}

    async def read(self, batch: Mapping[str, np.ndarray]) -> TextReadingResult:
        """A parsed batch -> its lines, the crops of all its photos sent to the second stages in chunks."""
        photos = list(batch["photos"])
        if not photos:
            return TextReadingResult(self, [])
        maps = [probability for probability, _ in photos]
        prepared = [photo for _, photo in photos]
        lines = await reader.read_batch(prepared, maps, self.stages(), self.classes, self.settings, self.widths)
        return TextReadingResult(self, lines)

    def run(self, batch: Mapping[str, np.ndarray]) -> TextReadingResult:
        return asyncio.run(self.read(batch))


def lines_from_outputs(outputs: Mapping[str, np.ndarray]) -> list[list[Line]]:
    """A response's outputs by role (``count`` and the rest, with the batch dim) -> each photo's lines."""
    counts = np.asarray(outputs["count"]).reshape(-1)
    texts = np.asarray(outputs["texts"], dtype=object).reshape(len(counts), -1)
    scores = np.asarray(outputs["scores"], np.float32).reshape(len(counts), -1)
    boxes = np.asarray(outputs["boxes"], np.float32).reshape(len(counts), -1, 4, 2)
    box_scores = outputs.get("box_scores")
    detected = np.zeros_like(scores) if box_scores is None else np.asarray(box_scores, np.float32).reshape(scores.shape)
    return [
        [Line(_text(texts[i, j]), float(scores[i, j]), boxes[i, j], float(detected[i, j])) for j in range(int(count))]
        for i, count in enumerate(counts)
    ]


def _text(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


class TextReadingTask(Task):
    name = "text_reading"
    drift_features = ("lines", "confidence")  # lines per photo, and their mean recognition score
    # A candidate precision against FP32, through the whole pipeline (lines paired by box IoU >= 0.5):
    # the share of lines read the same, 1 - the character error rate, the share of boxes paired
    # (2 x pairs / (FP32 lines + candidate lines)) and their mean IoU.
    gate_defaults: ClassVar[dict[str, float]] = {
        "min_exact_lines": 0.95,
        "min_character_accuracy": 0.99,
        "min_box_agreement": 0.95,
        "min_box_iou": 0.90,
    }
    dataset_layout = "DIR/<image> with its expected lines of text, one per line, in <image stem>.txt beside it (none: no text)"
    # One photo per request: photos of different sizes need different detector inputs.
    client_batch_size = 1
    # Its preprocess sizes the detector's input per photo (preprocessor "text_detection").
    preprocessors = (text_preprocessor.PREPROCESSOR,)

    def config_roles(self, config: ModelConfig) -> tuple[tuple[Role, ...], tuple[Role, ...]]:
        return INPUT_ROLES, OUTPUT_ROLES

    def postprocessor(self, config: ModelConfig, model_dir: Path) -> TextReadingPostprocessor:
        return TextReadingPostprocessor(config, model_dir)

    def output_roles(self) -> tuple[Role, ...]:
        return OUTPUT_ROLES

    def check(self, config: ModelConfig, model_dir: Path, preprocess: Any) -> list[str]:
        """The config, and each second stage it names: a model of the same repository (every config variant of
        it) with the input and output named, taking batches of ``*_max_batch``."""
        try:
            post = TextReadingPostprocessor(config, model_dir, require_characters=False)
        except (ConfigError, ValueError) as error:
            return [str(error)]
        problems = []
        for role, name in post.stage_models.items():
            folder = model_dir.parent / name
            variants = [folder / "config.pbtxt", *sorted(folder.glob("configs/*.pbtxt"))]
            if not variants[0].is_file():
                problems.append(f"model '{config.name}': {role}_model '{name}' is not a model of {model_dir.parent}")
                continue
            input_name, output_names = post.stage_tensors[role]
            for path in variants:
                stage = model_config.parse_config_text(path.read_text(), str(path))
                where = f"model '{config.name}': {role}_model '{name}' ({path.relative_to(folder)})"
                if [t.name for t in stage.input] != [input_name]:
                    problems.append(f"{where} takes {[t.name for t in stage.input]}, not the one input {role}_input '{input_name}'")
                missing = [name for name in output_names if name not in [t.name for t in stage.output]]
                if missing:
                    problems.append(f"{where} has no output {', '.join(repr(name) for name in missing)} of {role}_output")
                if post.max_batch[role] > stage.max_batch_size:
                    problems.append(f"{where}: {role}_max_batch {post.max_batch[role]} exceeds its max_batch_size {stage.max_batch_size}")
        return problems

    def engine_profiles(self, config: ModelConfig, role: str) -> tuple[EngineProfile, ...]:
        """The recognizer: one profile per width bucket (each crop is padded to one: :func:`recognizer_widths`), 48 px
        high; the classifier's input is fixed."""
        if role != "recognizer":
            return ()
        height = DEFAULT.recognition.height
        return tuple(
            EngineProfile(f"width {width}", (3, height, width), (3, height, width), (3, height, width), RECOGNIZER_OPT_BATCH)
            for width in recognizer_widths(config)
        )

    def gate(self, reference: TaskResult, candidate: TaskResult, limits: Mapping[str, float]) -> dict[str, Any]:
        assert isinstance(reference, TextReadingResult) and isinstance(candidate, TextReadingResult)
        agreement = Agreement()
        for index, (fp32, other) in enumerate(zip(reference.lines, candidate.lines)):
            agreement.add(fp32, other, str(index))
        lines_fp32 = sum(len(photo) for photo in reference.lines)
        lines_candidate = sum(len(photo) for photo in candidate.lines)
        pairs = len(agreement.ious)
        box_agreement = 2.0 * pairs / (lines_fp32 + lines_candidate) if lines_fp32 + lines_candidate else 1.0
        metrics = {
            "images": len(reference),
            "lines_fp32": lines_fp32,
            "lines_candidate": lines_candidate,
            "exact_lines": agreement.exact_rate,
            "character_error_rate": agreement.cer,
            "box_agreement": box_agreement,
            "box_iou_mean": agreement.mean_iou,
            "box_iou_min": agreement.min_iou,
            "differences": agreement.differences[:20],
        }
        return gate_report(
            metrics,
            {
                "exact_lines": (agreement.exact_rate, limits["min_exact_lines"]),
                "character_accuracy": (1.0 - agreement.cer, limits["min_character_accuracy"]),
                "box_agreement": (box_agreement, limits["min_box_agreement"]),
                "box_iou_mean": (agreement.mean_iou, limits["min_box_iou"]),
            },
        )

    def response_result(self, postprocessor: Postprocessor, outputs: Mapping[str, np.ndarray]) -> TextReadingResult:
        assert isinstance(postprocessor, TextReadingPostprocessor)
        return TextReadingResult(postprocessor, lines_from_outputs(outputs))

    def dataset(self, directory: Path, postprocessor: Postprocessor) -> list[LabelledSample]:
        samples = []
        for path in sorted(p for p in directory.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES):
            expected = path.with_suffix(".txt")
            lines = [line.strip() for line in expected.read_text(encoding="utf-8").splitlines()] if expected.is_file() else []
            samples.append(LabelledSample(path, [line for line in lines if line]))
        return samples

    def dataset_metrics(self, runs: Sequence[tuple[TaskResult, Sequence[LabelledSample]]]) -> dict[str, float]:
        """Expected lines read exactly (as a multiset per photo, over the larger of the two counts) and the
        character error rate of each photo's lines joined in reading order."""
        exact = total = edits = characters = 0
        for result, samples in runs:
            assert isinstance(result, TextReadingResult)
            for lines, sample in zip(result.lines, samples):
                read = [line.text for line in lines]
                expected = list(sample.target)
                remaining = list(read)
                for text in expected:
                    if text in remaining:
                        remaining.remove(text)
                        exact += 1
                total += max(len(expected), len(read))
                edits += Levenshtein.distance("\n".join(expected), "\n".join(read))
                characters += len("\n".join(expected))
        return {
            "exact_lines": exact / total if total else 1.0,
            "character_error_rate": edits / characters if characters else 0.0,
        }


TASK = TextReadingTask()
