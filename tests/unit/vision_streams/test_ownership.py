"""Streams shared by replicas (vision_streams.ownership): one owner each; a member's going moves only its streams."""

from __future__ import annotations

from collections import Counter

from vision_streams import ownership

STREAMS = [f"camera-{i}" for i in range(200)]


def test_every_stream_has_one_owner_and_the_load_is_shared():
    members = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    owners = {stream: ownership.owner(stream, members) for stream in STREAMS}
    assert set(owners.values()) == set(members)
    assert min(Counter(owners.values()).values()) > 200 / 3 * 0.7
    assert owners == {stream: ownership.owner(stream, list(reversed(members))) for stream in STREAMS}  # order does not matter


def test_a_member_going_moves_only_its_streams_and_they_come_back():
    members = ["a", "b", "c"]
    before = {stream: ownership.owner(stream, members) for stream in STREAMS}
    after = {stream: ownership.owner(stream, ["a", "c"]) for stream in STREAMS}
    assert all(after[s] == before[s] for s in STREAMS if before[s] != "b")
    assert all(after[s] in ("a", "c") for s in STREAMS)
    assert {stream: ownership.owner(stream, members) for stream in STREAMS} == before
    assert ownership.owner("x", []) is None


def test_static_and_dns_membership():
    assert ownership.StaticMembership().members() == ["local"]
    assert "127.0.0.1" in ownership.DnsMembership("127.0.0.1", "localhost").members()
    assert ownership.DnsMembership("10.0.0.1", "no-such-service.invalid").members() == []
