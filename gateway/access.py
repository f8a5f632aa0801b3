"""API keys: stored hashed, passed in the ``X-API-Key`` header, each with its own rate limit and concurrency limit.

The keys file (TOML, ``--api-keys FILE``) holds one table per key, its SHA-256 and its limits, never the key::

    [[key]]
    name = "web-frontend"
    sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    requests_per_second = 20     # the sustained rate (a token bucket)
    burst = 40                   # requests above the rate it may send at once
    max_concurrent = 8           # requests in flight at a time

``python -m gateway.access new-key NAME`` prints a new random key and its table. Without a keys file every request is
admitted (a gateway behind its own authentication). A missing key is 401, an unknown one 403, a key over its rate or
its concurrency 429 with ``Retry-After``.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import math
import secrets
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ApiError

HEADER = "x-api-key"
DEFAULTS = {"requests_per_second": 10.0, "burst": 20.0, "max_concurrent": 4}


@dataclass
class Key:
    name: str
    sha256: str
    requests_per_second: float
    burst: float
    max_concurrent: int
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    tokens: float = field(init=False)
    updated: float = field(init=False)
    in_flight: int = 0

    def __post_init__(self) -> None:
        self.tokens, self.updated = self.burst, self.clock()

    def take(self) -> float:
        """One request's token: 0 when there was one, else the seconds until there is."""
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.requests_per_second)
        self.updated = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.requests_per_second


def digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


@dataclass
class KeyRing:
    keys: dict[str, Key]  # by sha256

    @classmethod
    def load(cls, path: Path, clock: Callable[[], float] = time.monotonic) -> KeyRing:
        try:
            tables = tomllib.loads(path.read_text()).get("key", [])
        except (OSError, tomllib.TOMLDecodeError) as error:
            raise ValueError(f"{path}: {error}") from None
        keys: dict[str, Key] = {}
        for index, table in enumerate(tables):
            unknown = sorted(set(table) - {"name", "sha256", *DEFAULTS})
            sha = str(table.get("sha256", "")).lower()
            if unknown or len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha) or "name" not in table:
                raise ValueError(
                    f"{path}: key {index + 1}: needs name and sha256 (64 hex digits){'; unknown ' + ', '.join(unknown) if unknown else ''}"
                )
            limits = {name: table.get(name, default) for name, default in DEFAULTS.items()}
            if not (limits["requests_per_second"] > 0 and limits["burst"] >= 1 and int(limits["max_concurrent"]) >= 1):
                raise ValueError(f"{path}: key {table['name']!r}: requests_per_second > 0, burst >= 1, max_concurrent >= 1")
            keys[sha] = Key(
                str(table["name"]), sha, float(limits["requests_per_second"]), float(limits["burst"]), int(limits["max_concurrent"]), clock
            )
        if not keys:
            raise ValueError(f"{path}: no [[key]] tables")
        return cls(keys)

    def find(self, presented: str | None) -> Key:
        if not presented:
            raise ApiError(401, "UNAUTHENTICATED", f"this gateway wants an API key in the {HEADER} header", {"WWW-Authenticate": "ApiKey"})
        wanted = digest(presented)
        for sha, key in self.keys.items():
            if hmac.compare_digest(sha, wanted):
                return key
        raise ApiError(403, "FORBIDDEN", "the API key is not one of this gateway's")

    @contextmanager
    def admit(self, presented: str | None) -> Iterator[Key]:
        """The request's key, its token taken and its slot held while the request runs; ``ApiError`` otherwise."""
        key = self.find(presented)
        if key.in_flight >= key.max_concurrent:
            raise ApiError(
                429, "TOO_MANY_REQUESTS", f"key {key.name!r} has {key.max_concurrent} requests in flight already", {"Retry-After": "1"}
            )
        wait = key.take()
        if wait:
            raise ApiError(429, "TOO_MANY_REQUESTS", f"key {key.name!r} is over its rate", {"Retry-After": str(max(1, math.ceil(wait)))})
        key.in_flight += 1
        try:
            yield key
        finally:
            key.in_flight -= 1


def new_key_table(name: str) -> tuple[str, str]:
    """A new random key, and the keys file's table for it."""
    key = secrets.token_urlsafe(32)
    table = f'[[key]]\nname = "{name}"\nsha256 = "{digest(key)}"\n' + "".join(f"{k} = {v}\n" for k, v in DEFAULTS.items())
    return key, table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.access", description="Make an API key for the gateway's keys file.")
    commands = parser.add_subparsers(dest="command", required=True)
    new = commands.add_parser("new-key", help="print a new key (give it to the client) and its table (append it to the keys file)")
    new.add_argument("name")
    args = parser.parse_args(argv)
    key, table = new_key_table(args.name)
    print(f"# the key (shown once; the file keeps only its hash): {key}", file=sys.stderr)
    print(table, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
