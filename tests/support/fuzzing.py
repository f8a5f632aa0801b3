"""Seeded mutants of real JPEGs (radamsa-like), shared by the fuzz tests and their child processes.

``mutant(seed, index)`` rebuilds any case a failure reports.
"""

from __future__ import annotations

import io
import random
from functools import lru_cache

from PIL import Image

from builders import photos
from vision_serving.image_codec import ImageLimits, decode_rgb

DECODE_BUDGET_S = 2.0  # CPU seconds of one decode (time.process_time)
SEED_PHOTOS = ("coffee", "chelsea", "camera", "astronaut", "motorcycle_left", "rocket")


# --------------------------------------------------------------------------- seeds and mutators


@lru_cache(maxsize=1)
def seed_jpegs() -> tuple[bytes, ...]:
    """Real photos as JPEGs of a few encoder flavours (baseline, progressive, grayscale, subsampling)."""
    limits = ImageLimits(max_bytes=2**30, max_pixels=2**30)
    seeds = []
    for index, name in enumerate(SEED_PHOTOS):
        image = Image.fromarray(decode_rgb(photos.photo_bytes(name), limits))
        image.thumbnail((320, 320))
        for options in ({"quality": 85}, {"quality": 75, "progressive": True}, {"quality": 90, "subsampling": 0}):
            buffer = io.BytesIO()
            (image.convert("L") if index % 3 == 2 and options.get("progressive") else image).save(buffer, "JPEG", **options)
            seeds.append(buffer.getvalue())
    return tuple(seeds)


def _markers(data: bytes) -> list[int]:
    return [i for i in range(len(data) - 1) if data[i] == 0xFF and data[i + 1] not in (0x00, 0xFF)]


def _flip_bits(rng: random.Random, data: bytearray) -> str:
    for _ in range(rng.randint(1, 16)):
        position = rng.randrange(len(data))
        data[position] ^= 1 << rng.randrange(8)
    return "bit_flips"


def _random_bytes(rng: random.Random, data: bytearray) -> str:
    for _ in range(rng.randint(1, 8)):
        data[rng.randrange(len(data))] = rng.randrange(256)
    return "random_bytes"


def _interesting_values(rng: random.Random, data: bytearray) -> str:
    position = rng.randrange(2, min(len(data) - 2, 700))  # the headers
    data[position : position + 2] = rng.choice([b"\x00\x00", b"\xff\xff", b"\x7f\xff", b"\x80\x00", b"\x00\x01", b"\xff\xd9"])
    return "interesting_values"


def _truncate(rng: random.Random, data: bytearray) -> str:
    cut = rng.randrange(2, len(data))
    keep_eoi = rng.random() < 0.6  # past the trailer check, into the decoder
    del data[cut:]
    if keep_eoi:
        data += b"\xff\xd9"
    return "truncate" + ("_keep_eoi" if keep_eoi else "")


def _insert_run(rng: random.Random, data: bytearray) -> str:
    position = rng.randrange(2, len(data))
    run = (
        bytes(rng.randrange(256) for _ in range(rng.randint(1, 512)))
        if rng.random() < 0.5
        else bytes([rng.randrange(256)]) * rng.randint(1, 4096)
    )
    data[position:position] = run
    return "insert_run"


def _delete_run(rng: random.Random, data: bytearray) -> str:
    start = rng.randrange(2, len(data) - 1)
    del data[start : start + rng.randint(1, 2048)]
    return "delete_run"


def _duplicate_run(rng: random.Random, data: bytearray) -> str:
    start = rng.randrange(2, len(data) - 1)
    chunk = data[start : start + rng.randint(1, 4096)]
    position = rng.randrange(2, len(data))
    data[position:position] = chunk
    return "duplicate_run"


def _corrupt_marker(rng: random.Random, data: bytearray) -> str:
    markers = _markers(bytes(data[:4096]))
    if not markers:
        return _flip_bits(rng, data)
    position = rng.choice(markers)
    choice = rng.random()
    if choice < 0.4:
        data[position + 1] = rng.randrange(256)  # another marker type
    elif choice < 0.8 and position + 3 < len(data):
        data[position + 2 : position + 4] = rng.randrange(65536).to_bytes(2, "big")  # segment length
    else:
        del data[position : position + 2]  # drop the marker
    return "corrupt_marker"


def _splice(rng: random.Random, data: bytearray) -> str:
    other = rng.choice(seed_jpegs())
    cut, other_cut = rng.randrange(2, len(data)), rng.randrange(2, len(other))
    data[cut:] = other[other_cut:]
    return "splice"


MUTATORS = (
    _flip_bits, _random_bytes, _interesting_values, _truncate, _insert_run,
    _delete_run, _duplicate_run, _corrupt_marker, _corrupt_marker, _splice,
)  # fmt: skip


def mutant(seed: int, index: int) -> tuple[bytes, str]:
    """Case ``index`` of run ``seed``: (payload, the mutations applied)."""
    rng = random.Random(seed * 1_000_003 + index)
    data = bytearray(rng.choice(seed_jpegs()))
    applied = [rng.choice(MUTATORS)(rng, data) for _ in range(rng.choice((1, 1, 1, 2, 3)))]
    return bytes(data), "+".join(applied)


# --------------------------------------------------------------------------- in-process
