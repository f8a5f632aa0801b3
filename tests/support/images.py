"""Crafted image payloads shared by the codec and bad-input tests."""

from __future__ import annotations

import struct
import zlib


def png_with_declared_size(width: int, height: int) -> bytes:
    """A tiny PNG whose IHDR declares width x height (a decompression bomb's header)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 16)) + chunk(b"IEND", b"")
