"""Mutated uploads of every accepted format, for the served fuzz benchmark (benchmarks/fuzz_served.py) and the
decode-cost comparison (benchmarks/decode_cost.py): seeded, so ``mutant(seeds, seed, index)`` rebuilds any case.

The mutations aim at what a decoder trusts:

- the format's own length and size fields: PNG chunk lengths and the IHDR's size, depth and colour type; JPEG
  segment lengths, the frame's size and component count; WebP's RIFF and chunk sizes and the VP8/VP8L/VP8X
  sizes; HEIF box sizes (every box, nested ones too), ``ispe`` sizes and ``iloc`` extents. Each is set to a
  value that breaks it: 0, 1, a few bytes off, the payload's length, 2^31 - 1, 2^32 - 1, a large random one,
  or (sizes) several times the photo's;
- truncation (with the format's end marker put back half the time: past a trailer check, into the decoder),
  bit flips, random bytes, runs inserted, deleted or repeated, and splices of two seeds of the format.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# Values a length field is set to (besides ones derived from the payload).
LENGTHS = (0, 1, 2, 7, 8, 13, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 2_436_008_941)
# Multiples of a declared side (a header edited to declare more pixels than the data holds).
SIDE_FACTORS = (2, 4, 10, 25, 100)


@dataclass(frozen=True)
class Field:
    """A big- or little-endian unsigned field of ``size`` bytes at ``offset``, and what it is."""

    offset: int
    size: int
    what: str
    little: bool = False
    is_side: bool = False  # a width or height (set to multiples, not only lengths)

    def read(self, data: bytes | bytearray) -> int:
        return int.from_bytes(data[self.offset : self.offset + self.size], "little" if self.little else "big")

    def write(self, data: bytearray, value: int) -> None:
        value &= (1 << (8 * self.size)) - 1
        data[self.offset : self.offset + self.size] = value.to_bytes(self.size, "little" if self.little else "big")


def png_fields(data: bytes) -> list[Field]:
    fields: list[Field] = []
    position = 8
    while position + 8 <= len(data) and len(fields) < 200:
        (length,) = struct.unpack_from(">I", data, position)
        kind = data[position + 4 : position + 8].decode("latin-1")
        fields.append(Field(position, 4, f"{kind} length"))
        if kind == "IHDR" and position + 21 <= len(data):
            fields += [Field(position + 8, 4, "IHDR width", is_side=True), Field(position + 12, 4, "IHDR height", is_side=True)]
            fields += [Field(position + 16, 1, "IHDR bit depth"), Field(position + 17, 1, "IHDR colour type")]
        position += 12 + length
    return fields


def jpeg_fields(data: bytes) -> list[Field]:
    fields: list[Field] = []
    position = 2
    while position + 4 <= len(data) and len(fields) < 200 and data[position] == 0xFF:
        marker = data[position + 1]
        if marker in (0xD8, 0xD9, 0x01) or 0xD0 <= marker <= 0xD7:
            position += 2
            continue
        (length,) = struct.unpack_from(">H", data, position + 2)
        fields.append(Field(position + 2, 2, f"0x{marker:02X} length"))
        if marker in (0xC0, 0xC1, 0xC2) and position + 10 <= len(data):
            fields += [Field(position + 5, 2, "SOF height", is_side=True), Field(position + 7, 2, "SOF width", is_side=True)]
            fields.append(Field(position + 9, 1, "SOF components"))
        if marker == 0xDA:
            fields.append(Field(position + 4, 1, "SOS components"))
            break  # the entropy-coded data follows
        position += 2 + length
    return fields


def webp_fields(data: bytes) -> list[Field]:
    fields = [Field(4, 4, "RIFF size", little=True)]
    position = 12
    while position + 8 <= len(data) and len(fields) < 64:
        kind = data[position : position + 4].decode("latin-1")
        (size,) = struct.unpack_from("<I", data, position + 4)
        fields.append(Field(position + 4, 4, f"{kind} size", little=True))
        if kind == "VP8 " and position + 18 <= len(data):
            fields += [
                Field(position + 14, 2, "VP8 width", little=True, is_side=True),
                Field(position + 16, 2, "VP8 height", little=True, is_side=True),
            ]
        if kind == "VP8L" and position + 13 <= len(data):
            fields.append(Field(position + 9, 4, "VP8L size bits", little=True))
        if kind == "VP8X" and position + 18 <= len(data):
            fields += [
                Field(position + 12, 3, "VP8X width", little=True, is_side=True),
                Field(position + 15, 3, "VP8X height", little=True, is_side=True),
            ]
        position += 8 + size + (size & 1)
    return fields


# HEIF boxes that hold boxes (after a FullBox header where ``full``).
_CONTAINERS = {b"meta": 4, b"iprp": 0, b"ipco": 0, b"iinf": 6, b"iref": 4, b"dinf": 0, b"moov": 0, b"trak": 0}


def heif_fields(data: bytes) -> list[Field]:
    fields: list[Field] = []

    def walk(start: int, end: int, depth: int) -> None:
        position = start
        while position + 8 <= end and len(fields) < 400:
            (size,) = struct.unpack_from(">I", data, position)
            kind = data[position + 4 : position + 8]
            fields.append(Field(position, 4, f"{kind.decode('latin-1')} size"))
            if kind == b"ispe" and position + 20 <= end:
                fields.extend([Field(position + 12, 4, "ispe width", is_side=True), Field(position + 16, 4, "ispe height", is_side=True)])
            if kind == b"iloc" and position + 16 <= end:
                fields.append(Field(position + 14, 2, "iloc item count"))
            if size < 8 or position + size > end:
                return
            if kind in _CONTAINERS and depth < 6:
                walk(position + 8 + _CONTAINERS[kind], position + size, depth + 1)
            position += size

    walk(0, len(data), 0)
    return fields


FIELDS: dict[str, Callable[[bytes], list[Field]]] = {
    "png": png_fields,
    "jpeg": jpeg_fields,
    "webp": webp_fields,
    "heic": heif_fields,
    "avif": heif_fields,
}
END_MARKERS = {"png": b"\x00\x00\x00\x00IEND\xaeB`\x82", "jpeg": b"\xff\xd9"}


def _field(rng: random.Random, data: bytearray, image_format: str) -> str:
    fields = FIELDS[image_format](bytes(data))
    if not fields:
        return _flip_bits(rng, data, image_format)
    field = rng.choice(fields)
    old = field.read(data)
    choice = rng.random()
    if field.is_side and choice < 0.5:
        value = old * rng.choice(SIDE_FACTORS)
    elif choice < 0.75:
        value = rng.choice((*LENGTHS, len(data), len(data) - field.offset, old + 1, old - 1, old + rng.randint(2, 64), old // 2))
    else:
        value = rng.randrange(1 << (8 * field.size))
    field.write(data, value)
    return f"field({field.what}: {old} -> {field.read(data)})"


def _flip_bits(rng: random.Random, data: bytearray, _format: str) -> str:
    for _ in range(rng.randint(1, 16)):
        position = rng.randrange(len(data))
        data[position] ^= 1 << rng.randrange(8)
    return "bit_flips"


def _random_bytes(rng: random.Random, data: bytearray, _format: str) -> str:
    for _ in range(rng.randint(1, 8)):
        data[rng.randrange(len(data))] = rng.randrange(256)
    return "random_bytes"


def _truncate(rng: random.Random, data: bytearray, image_format: str) -> str:
    cut = rng.randrange(16, max(17, len(data)))
    del data[cut:]
    marker = END_MARKERS.get(image_format)
    if marker and rng.random() < 0.5:
        data += marker
        return "truncate+end_marker"
    return "truncate"


def _insert_run(rng: random.Random, data: bytearray, _format: str) -> str:
    position = rng.randrange(16, max(17, len(data)))
    length = rng.randint(1, 4096)
    data[position:position] = bytes([rng.randrange(256)]) * length if rng.random() < 0.5 else rng.randbytes(min(length, 512))
    return "insert_run"


def _delete_run(rng: random.Random, data: bytearray, _format: str) -> str:
    start = rng.randrange(16, max(17, len(data) - 1))
    del data[start : start + rng.randint(1, 2048)]
    return "delete_run"


def _repeat_run(rng: random.Random, data: bytearray, _format: str) -> str:
    start = rng.randrange(16, max(17, len(data) - 1))
    chunk = data[start : start + rng.randint(1, 4096)]
    data[start:start] = chunk * rng.randint(1, 8)
    return "repeat_run"


MUTATORS = (_field, _field, _field, _field, _flip_bits, _random_bytes, _truncate, _insert_run, _delete_run, _repeat_run)


def sniffed(data: bytes) -> str:
    from vision_serving.image_codec import sniff_format

    return sniff_format(data) or "unknown"


@dataclass(frozen=True)
class Mutant:
    data: bytes
    format: str  # the seed's
    seed_index: int  # which of the seeds it was made from
    mutations: str


def mutant(seeds: Sequence[bytes], seed: int, index: int) -> Mutant:
    """Case ``index`` of run ``seed`` over ``seeds``: the payload, its seed and the mutations applied."""
    rng = random.Random(seed * 1_000_003 + index)
    seed_index = rng.randrange(len(seeds))
    original = seeds[seed_index]
    image_format = sniffed(original)
    data = bytearray(original)
    applied = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        if rng.random() < 0.08:  # splice with another seed of the same format
            others = [other for other in seeds if other is not original and sniffed(other) == image_format] or [original]
            other = rng.choice(others)
            data[rng.randrange(16, max(17, len(data))) :] = other[rng.randrange(16, max(17, len(other))) :]
            applied.append("splice")
        elif len(data) > 32:
            applied.append(rng.choice(MUTATORS)(rng, data, image_format))
    return Mutant(bytes(data), image_format, seed_index, "+".join(applied) or "none")
