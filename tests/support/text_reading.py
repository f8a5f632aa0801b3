"""Photos with text the tests draw, RapidOCR's reading of them, and how two readings are compared.

No photo with known text ships in an installed package, so the tests make them: lines of words in
several fonts (the TrueType fonts inside matplotlib's wheel: DejaVu, STIX, Computer Modern), sizes,
colours and angles (upright, tilted, a quarter turn, upside down) drawn with Pillow on the project's
package photos (:mod:`builders.photos`), as PNG (lossless: both sides decode the same pixels).
:func:`reference` runs RapidOCR itself on them in its own environment
(``tests/support/rapidocr_reference.py`` in ``.build/envs/rapidocr``) and caches the answer under
``.build/references/`` by the hash of the images, the script and the environment's lock;
:func:`unclip_reference` does the same for RapidOCR's box growing. :func:`compare` matches two
readings line by line (box IoU) and measures how far they agree.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from builders import Log, build_envs, photos, stderr_logger
from builders.artifacts import sha256_bytes, sha256_file
from vision_serving import layout
from vision_serving.tasks.text_reading import agreement, reader

SCRIPT = Path(__file__).resolve().parent / "rapidocr_reference.py"
CACHE_DIR = layout.BUILD_DIR / "references"
ENV = "rapidocr"
# matplotlib's wheel (requirements/dev.txt) ships these TrueType fonts in mpl-data/fonts/ttf.
FONTS = (
    "DejaVuSans.ttf",
    "DejaVuSans-Bold.ttf",
    "DejaVuSerif.ttf",
    "DejaVuSerif-Italic.ttf",
    "DejaVuSansMono.ttf",
    "STIXGeneral.ttf",
    "cmr10.ttf",
    "cmss10.ttf",
)
WORDS = (
    "Triton", "inference", "server", "ensemble", "vision", "pipeline", "model", "batch", "tensor", "photo",
    "reader", "text", "OPEN", "EXIT", "SALE", "Coffee", "Street", "Station", "Platform", "Gate", "Road",
    "North", "Main", "Hotel", "Museum", "Garden", "Market", "Bakery", "Library", "Parking",
)  # fmt: skip
BACKGROUNDS = ("astronaut", "coffee", "chelsea", "rocket", "china", "flower", "brick", "camera", "grace_hopper", "motorcycle_left")

log_to_stderr = stderr_logger("rapidocr")


def font_dir() -> Path:
    """matplotlib's font folder, located without importing matplotlib."""
    spec = importlib.util.find_spec("matplotlib")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("matplotlib is not installed; its wheel provides the fonts the text photos are drawn with")
    return Path(next(iter(spec.submodule_search_locations))) / "mpl-data" / "fonts" / "ttf"


def _phrase(rng: np.random.Generator) -> str:
    words = [str(rng.choice(WORDS)) for _ in range(int(rng.integers(1, 4)))]
    if rng.random() < 0.4:
        words.append(str(int(rng.integers(1, 2100))))
    return " ".join(words)


@dataclass(frozen=True)
class DrawnLine:
    text: str
    font: str
    size: int
    angle: float


def text_photo(rng: np.random.Generator, background: str, lines: int = 4) -> tuple[bytes, list[DrawnLine]]:
    """A package photo with ``lines`` lines of text drawn on it, as PNG bytes, and what was drawn.

    Each line has its own font, size (18..56 px), colour (dark on a light band or light on a dark
    one, or straight on the photo) and angle: mostly within 12 degrees of upright, sometimes a
    quarter turn (a tall box) or upside down (for the direction classifier)."""
    image = Image.open(io.BytesIO(photos.photo_bytes(background))).convert("RGB")
    if max(image.size) < 640:
        scale = 640 / max(image.size)
        image = image.resize((round(image.width * scale), round(image.height * scale)), Image.Resampling.BICUBIC)
    fonts = font_dir()
    drawn: list[DrawnLine] = []
    slots = np.linspace(0.08, 0.85, lines)
    for index in range(lines):
        text = _phrase(rng)
        font_name = FONTS[int(rng.integers(0, len(FONTS)))]
        size = int(rng.integers(18, 57))
        font = ImageFont.truetype(str(fonts / font_name), size)
        left, top, right, bottom = font.getbbox(text)
        margin = size // 3
        layer = Image.new("RGBA", (right - left + 2 * margin, bottom - top + 2 * margin), (0, 0, 0, 0))
        draw = ImageDraw.Draw(layer)
        style = rng.random()
        dark = (int(rng.integers(0, 60)), int(rng.integers(0, 60)), int(rng.integers(0, 90)), 255)
        light = (int(rng.integers(220, 256)), int(rng.integers(220, 256)), int(rng.integers(200, 256)), 255)
        if style < 0.45:
            draw.rectangle((0, 0, layer.width, layer.height), fill=(*light[:3], 235))
            color = dark
        elif style < 0.75:
            draw.rectangle((0, 0, layer.width, layer.height), fill=(*dark[:3], 220))
            color = light
        else:
            color = dark if rng.random() < 0.5 else light
        draw.text((margin - left, margin - top), text, font=font, fill=color)
        turn = rng.random()
        angle = 90.0 if turn < 0.1 else 180.0 if turn < 0.2 else float(rng.uniform(-12, 12))
        rotated = layer.rotate(angle, resample=Image.Resampling.BICUBIC, expand=True)
        if rotated.width >= image.width or rotated.height >= image.height:
            continue
        x = int(rng.integers(0, image.width - rotated.width))
        y = int(min(max(slots[index] * image.height - rotated.height / 2, 0), image.height - rotated.height))
        image.paste(rotated, (x, y), rotated)
        drawn.append(DrawnLine(text, font_name, size, angle))
    out = io.BytesIO()
    image.save(out, format="PNG", icc_profile=None)  # the photo's ICC profile stays out (libpng warns about some)
    return out.getvalue(), drawn


def text_photos(count: int, seed: int = 0) -> dict[str, tuple[bytes, list[DrawnLine]]]:
    """``count`` text photos by name (``text-<i>-<background>``), deterministic for ``seed``."""
    made = {}
    for index in range(count):
        background = BACKGROUNDS[index % len(BACKGROUNDS)]
        rng = np.random.default_rng([seed, index])
        made[f"text-{index:02d}-{background}"] = text_photo(rng, background, lines=int(rng.integers(3, 6)))
    return made


def decode_bgr(data: bytes) -> np.ndarray:
    return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)


# --------------------------------------------------------------------------- RapidOCR's answers


def _key(*parts: str) -> str:
    inputs = [sha256_file(SCRIPT), sha256_file(build_envs.requirements_file(ENV)), *parts]
    return hashlib.sha256("\n".join(inputs).encode()).hexdigest()[:20]


def reference(images: dict[str, bytes], log: Log = log_to_stderr) -> dict[str, dict[str, Any]]:
    """RapidOCR's reading per image name: ``{"lines": [{"text", "score", "box"}], "detections": {"boxes", "scores"}}``
    (``tests/support/rapidocr_reference.py read``), and ``"versions"`` under the key ``""``."""
    names = sorted(images)
    cache = CACHE_DIR / f"rapidocr-{_key(*(f'{n}:{sha256_bytes(images[n])}' for n in names))}.json"
    if not cache.is_file():
        build_envs.ensure_env(ENV, log)
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=CACHE_DIR) as scratch:
            paths = []
            for index, name in enumerate(names):
                path = Path(scratch) / f"{index:03d}_{name}.png"
                path.write_bytes(images[name])
                paths.append(str(path))
            partial = Path(scratch) / "out.json"
            log(f"running RapidOCR on {len(names)} images")
            build_envs.run_in_env(ENV, [str(SCRIPT), "read", "--out", str(partial), *paths], log, timeout=1200)
            partial.replace(cache)
    recorded = json.loads(cache.read_text(encoding="utf-8"))
    answers: dict[str, dict[str, Any]] = dict(zip(names, recorded["images"]))
    answers[""] = recorded["versions"]
    return answers


def unclip_reference(boxes: Sequence[np.ndarray], log: Log = log_to_stderr) -> list[dict[str, Any]]:
    """RapidOCR's ``unclip`` + ``get_mini_boxes`` per float32 box: ``{"points", "box", "short_side"}``."""
    payload = json.dumps([np.asarray(box, np.float32).tolist() for box in boxes])
    cache = CACHE_DIR / f"rapidocr-unclip-{_key(sha256_bytes(payload.encode()))}.json"
    if not cache.is_file():
        build_envs.ensure_env(ENV, log)
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=CACHE_DIR) as scratch:
            given, partial = Path(scratch) / "boxes.json", Path(scratch) / "out.json"
            given.write_text(payload)
            build_envs.run_in_env(ENV, [str(SCRIPT), "unclip", "--boxes", str(given), "--out", str(partial)], log, timeout=600)
            partial.replace(cache)
    return json.loads(cache.read_text())["boxes"]


# --------------------------------------------------------------------------- comparing readings


def rapidocr_lines(record: Sequence[dict[str, Any]]) -> list[reader.Line]:
    """RapidOCR's lines (the reference script's JSON: text, score, box) as the reader's ``Line``s."""
    return [reader.Line(line["text"], float(line["score"]), np.asarray(line["box"], np.float32).reshape(4, 2), 0.0) for line in record]


def against_rapidocr(rapidocr: dict[str, dict[str, Any]], read: dict[str, Sequence[reader.Line]]) -> agreement.Agreement:
    """The agreement of ``read`` (lines by photo name) with RapidOCR's readings of the same photos."""
    counts = agreement.Agreement()
    for name, lines in read.items():
        counts.add(rapidocr_lines(rapidocr[name]["lines"]), lines, name)
    return counts


# --------------------------------------------------------------------------- the pipeline's own models


def pipeline_models() -> tuple[dict[str, Path], list[str]]:
    """The text_reader pipeline's three ONNX files by the reader's roles (the rapidocr wheel's files with their
    tensors renamed, exported when missing) and the recognizer's classes: ``benchmarks.text_reading``'s."""
    from benchmarks.text_reading import pipeline_models as built

    return built()
