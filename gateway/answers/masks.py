"""A mask in an answer, as the caller chooses (``mask_format``): the pipeline's PNG as it is, base64 (``png``), or COCO's
run-length encoding (``rle``: ``{"size": [height, width], "counts": "..."}``, the compressed string of COCO's results
files, which ``pycocotools.mask.decode`` reads)."""

from __future__ import annotations

from typing import Any

import numpy as np

from vision_serving.tasks.segmentation import decode_png

from .base import JsonSchema, b64, obj

FORMATS = ("png", "rle")
CHOICE: JsonSchema = {
    "type": "string",
    "enum": list(FORMATS),
    "default": "png",
    "description": "how masks are written: PNG (base64) or COCO RLE",
}


def run_lengths(mask: np.ndarray) -> list[int]:
    """COCO's counts of a binary mask [H, W]: alternating runs of 0 and 1 in column-major order, starting with 0s."""
    flat = (np.asarray(mask) > 0).reshape(-1, order="F").astype(np.int8)
    if flat.size == 0:
        return []
    changes = np.flatnonzero(np.diff(flat)) + 1
    edges = np.concatenate([[0], changes, [flat.size]])
    counts = np.diff(edges).tolist()
    return [0, *counts] if flat[0] else counts


def rle_string(counts: list[int]) -> str:
    """COCO's compressed string of run lengths (pycocotools' rleToString: each count, after the second less the one two
    before it, in 5-bit groups with a continuation bit, offset by 48)."""
    characters = []
    for index, count in enumerate(counts):
        x = count - counts[index - 2] if index > 2 else count
        more = True
        while more:
            c = x & 0x1F
            x >>= 5
            more = x != -1 if c & 0x10 else x != 0
            if more:
                c |= 0x20
            characters.append(chr(c + 48))
    return "".join(characters)


def rle_counts(string: str) -> list[int]:
    """The run lengths of a COCO compressed string (pycocotools' rleFrString), the inverse of :func:`rle_string`."""
    counts: list[int] = []
    position = 0
    while position < len(string):
        x = shift = 0
        more = True
        while more:
            c = ord(string[position]) - 48
            x |= (c & 0x1F) << (5 * shift)
            more = bool(c & 0x20)
            position += 1
            shift += 1
            if not more and c & 0x10:
                x |= -1 << (5 * shift)
        if len(counts) > 2:
            x += counts[-2]
        counts.append(x)
    return counts


def decode_rle(rle: dict[str, Any]) -> np.ndarray:
    """A COCO RLE (compressed string counts) -> uint8 mask [H, W] of 0 and 1."""
    height, width = rle["size"]
    values = np.zeros(height * width, dtype=np.uint8)
    position, value = 0, 0
    for count in rle_counts(rle["counts"]):
        values[position : position + count] = value
        position += count
        value ^= 1
    return values.reshape((height, width), order="F")


def encoded(png: bytes, mask_format: str) -> dict[str, Any]:
    """A PNG mask as the answer writes it: ``{"png": base64}`` or ``{"rle": {"size", "counts"}}``."""
    if mask_format == "rle":
        mask = decode_png(png)
        return {"rle": {"size": [int(mask.shape[0]), int(mask.shape[1])], "counts": rle_string(run_lengths(mask))}}
    return {"png": b64(png)}


def schema(description: str) -> JsonSchema:
    """One of the two forms of :func:`encoded`."""
    rle = obj(
        {
            "size": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2, "description": "height, width"},
            "counts": {"type": "string", "description": "COCO's compressed run lengths, column-major, starting with background"},
        }
    )
    return {
        "description": description,
        "oneOf": [
            obj({"png": {"type": "string", "format": "byte", "description": "a one-channel PNG, base64"}}),
            obj({"rle": rle}),
        ],
    }


def with_fields(form: JsonSchema, fields: dict[str, JsonSchema]) -> list[JsonSchema]:
    """The alternatives of :func:`schema`'s ``form``, each with ``fields`` beside its mask (all required)."""
    return [
        {**alternative, "properties": {**fields, **alternative["properties"]}, "required": [*fields, *alternative["required"]]}
        for alternative in form["oneOf"]
    ]
