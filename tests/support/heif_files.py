"""HEIC and AVIF files for the tests: real encoders' files (devtools.heif_encode, in the ``heif-encode``
environment) and crafted variants of them (cut files, containers that lie), byte patches of real files."""

from __future__ import annotations

import struct

from devtools.heif_encode import encode

__all__ = ["encode", "patch_property", "with_irot", "with_ispe"]


def boxes_of_type(data: bytes, kind: bytes) -> list[int]:
    """Offsets of the boxes of type ``kind`` (their size field) anywhere in ``data``, found by their type bytes
    preceded by a plausible size: good enough for the small files the tests make."""
    found, position = [], data.find(kind)
    while position >= 4:
        (size,) = struct.unpack_from(">I", data, position - 4)
        if 8 <= size <= len(data) - position + 4:
            found.append(position - 4)
        position = data.find(kind, position + 1)
    return found


def patch_property(data: bytes, kind: bytes, payload: bytes, index: int = 0) -> bytes:
    """``data`` with the payload of its ``index``-th ``kind`` box replaced by ``payload`` (same length)."""
    start = boxes_of_type(data, kind)[index] + 8
    return data[:start] + payload + data[start + len(payload) :]


def with_ispe(data: bytes, width: int, height: int, index: int = 0) -> bytes:
    """The ``index``-th ispe property (a FullBox: version and flags, then width and height) declaring width x height."""
    return patch_property(data, b"ispe", b"\x00\x00\x00\x00" + struct.pack(">II", width, height), index)


def with_irot(data: bytes, angle: int) -> bytes:
    """The irot property turned to ``angle`` anticlockwise quarter turns (0: the file's Exif orientation remains)."""
    return patch_property(data, b"irot", bytes([angle & 3]))
