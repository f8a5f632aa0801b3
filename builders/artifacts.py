"""Helpers every build step shares: content hashes, input records, atomic writes.

A step records what its artifact is a function of (files' sha256, package
versions, parameters), stores the record's hash in a provenance JSON beside
the artifact, and skips the work when the hash is unchanged.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

from vision_serving.layout import file_sha256


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    """The file's sha256, streamed: vision_serving.layout's (the served models check it too)."""
    return file_sha256(path)


def package_versions(names: Iterable[str]) -> dict[str, str | None]:
    """Installed version of each distribution (None where it is not installed)."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def input_hash(record: dict[str, Any]) -> str:
    """A stable hash of a JSON-serializable record of what an artifact is a function of."""
    return sha256_bytes(json.dumps(record, sort_keys=True).encode())


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write via a temporary file in the same folder and rename: readers see the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
