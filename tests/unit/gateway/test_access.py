"""API keys: only their hashes are stored; a missing key is 401, an unknown one 403; each key's rate (a token bucket)
and concurrency limits answer 429 with Retry-After."""

from __future__ import annotations

import pytest

from gateway import access
from gateway.errors import ApiError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def ring(tmp_path, clock, **limits) -> access.KeyRing:
    path = tmp_path / "keys.toml"
    settings = "".join(f"{name} = {value}\n" for name, value in limits.items())
    path.write_text(f'[[key]]\nname = "app"\nsha256 = "{access.digest("secret")}"\n{settings}')
    return access.KeyRing.load(path, clock)


def test_the_file_holds_hashes_and_a_new_key_comes_with_its_table(tmp_path):
    key, table = access.new_key_table("web")
    path = tmp_path / "keys.toml"
    path.write_text(table)
    assert key not in path.read_text()
    found = access.KeyRing.load(path).find(key)
    assert (found.name, found.max_concurrent) == ("web", access.DEFAULTS["max_concurrent"])


@pytest.mark.parametrize(
    "text",
    [
        "",
        '[[key]]\nname = "a"\nsha256 = "abc"\n',
        '[[key]]\nsha256 = "' + "0" * 64 + '"\n',
        '[[key]]\nname = "a"\nsha256 = "' + "0" * 64 + '"\nrate = 3\n',
    ],
)
def test_a_bad_keys_file_is_refused(tmp_path, text):
    path = tmp_path / "keys.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=r"keys\.toml"):
        access.KeyRing.load(path)


def test_missing_and_unknown_keys(tmp_path):
    keys = ring(tmp_path, Clock())
    for presented, status in ((None, 401), ("", 401), ("Secret", 403)):
        with pytest.raises(ApiError) as error:
            keys.find(presented)
        assert error.value.status == status
    assert keys.find("secret").name == "app"


def test_the_rate_limit_refills_with_time(tmp_path):
    clock = Clock()
    keys = ring(tmp_path, clock, requests_per_second=2, burst=3)
    for _ in range(3):
        with keys.admit("secret"):
            pass
    with pytest.raises(ApiError) as error, keys.admit("secret"):
        pass
    assert error.value.status == 429 and error.value.headers["Retry-After"] == "1"
    clock.now += 0.5  # one token back
    with keys.admit("secret"):
        pass


def test_the_concurrency_limit_holds_while_requests_run(tmp_path):
    keys = ring(tmp_path, Clock(), max_concurrent=2, burst=10)
    with keys.admit("secret"), keys.admit("secret"), pytest.raises(ApiError, match="2 requests in flight"), keys.admit("secret"):
        pass
    with keys.admit("secret") as key:
        assert key.in_flight == 1
    assert key.in_flight == 0
