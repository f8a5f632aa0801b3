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


def box_iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU of two quadrilaterals (their convex hulls: the boxes are convex up to whole-pixel truncation)."""
    first = cv2.convexHull(np.asarray(a, np.float32).reshape(-1, 1, 2))
    second = cv2.convexHull(np.asarray(b, np.float32).reshape(-1, 1, 2))
    inter, _ = cv2.intersectConvexConvex(first, second)
    union = cv2.contourArea(first) + cv2.contourArea(second) - inter
    return float(inter / union) if union > 0 else 0.0


def edit_distance(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, left in enumerate(a, 1):
        current = [i]
        for j, right in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (left != right)))
        previous = current
    return previous[-1]


@dataclass
class Agreement:
    """Two readings of the same photos: ``lines`` counted (the reference's, plus the candidate's it lacks),
    ``exact`` (same text, boxes matched), ``edits`` and ``characters`` (the reference's; an unmatched line
    counts all its characters), the matched boxes' IoUs, and the disagreements, for messages."""

    lines: int = 0
    exact: int = 0
    edits: int = 0
    characters: int = 0
    ious: list[float] | None = None
    score_deltas: list[float] | None = None
    differences: list[str] | None = None

    @property
    def exact_rate(self) -> float:
        return self.exact / self.lines if self.lines else 1.0

    @property
    def cer(self) -> float:
        return self.edits / self.characters if self.characters else 0.0

    @property
    def mean_iou(self) -> float:
        return float(np.mean(self.ious)) if self.ious else 1.0

    def summary(self) -> str:
        worst = min(self.ious) if self.ious else 1.0
        scores = max(self.score_deltas) if self.score_deltas else 0.0
        return (
            f"{self.exact}/{self.lines} lines exact ({self.exact_rate:.1%}), CER {self.cer:.2%} "
            f"({self.edits}/{self.characters}), box IoU mean {self.mean_iou:.4f} min {worst:.4f}, "
            f"line score |diff| max {scores:.5f}"
        )


def compare(reference_lines: Sequence[dict[str, Any]], candidate_lines: Sequence[Any], name: str, into: Agreement) -> Agreement:
    """Add one photo's comparison to ``into``: lines paired greedily by box IoU (at least 0.5)."""
    into.ious = into.ious if into.ious is not None else []
    into.score_deltas = into.score_deltas if into.score_deltas is not None else []
    into.differences = into.differences if into.differences is not None else []
    pairs = sorted(
        (
            (box_iou(np.array(ref["box"]), line.box), i, j)
            for i, ref in enumerate(reference_lines)
            for j, line in enumerate(candidate_lines)
        ),
        reverse=True,
    )
    matched: dict[int, int] = {}
    taken: set[int] = set()
    for iou, i, j in pairs:
        if iou >= 0.5 and i not in matched and j not in taken:
            matched[i] = j
            taken.add(j)
            into.ious.append(iou)
    for i, ref in enumerate(reference_lines):
        into.lines += 1
        into.characters += len(ref["text"])
        if i not in matched:
            into.edits += len(ref["text"])
            into.differences.append(f"{name}: missing {ref['text']!r} ({ref['score']:.3f})")
            continue
        line = candidate_lines[matched[i]]
        into.score_deltas.append(abs(float(ref["score"]) - line.score))
        distance = edit_distance(ref["text"], line.text)
        into.edits += distance
        into.exact += distance == 0
        if distance:
            into.differences.append(f"{name}: {ref['text']!r} ({ref['score']:.3f}) read {line.text!r} ({line.score:.3f})")
    for j, line in enumerate(candidate_lines):
        if j not in taken:
            into.lines += 1
            into.edits += len(line.text)
            into.differences.append(f"{name}: extra {line.text!r} ({line.score:.3f})")
    return into
