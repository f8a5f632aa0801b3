"""URL input cannot be turned against the gateway's network: addresses refused in every spelling, a test DNS resolver
for names that resolve to private addresses or change their answer (rebinding), local HTTP servers on loopback
addresses of their own for redirects and limits. No traffic leaves the machine: every address connected to is
127.0.0.2 or 127.0.0.3."""

from __future__ import annotations

import asyncio
import ipaddress
from dataclasses import replace

import pytest

from gateway import fetch
from gateway.errors import ApiError
from tests.support.gateway import PhotoServer

ALLOWED = "127.0.0.2"  # the "public" photo server of these tests (allow-listed)
INTERNAL = "127.0.0.3"  # a server that must never be reached


class StaticResolver:
    """Names -> the addresses they resolve to, each query answered by the next of its list (the last one repeated)."""

    def __init__(self, answers: dict[str, list[list[str]]]) -> None:
        self.answers, self.asked = answers, []

    async def addresses(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        queue = self.answers.get(host)
        if not queue:
            raise fetch.bad_request(f"URL refused: {host} does not resolve")
        return queue.pop(0) if len(queue) > 1 else queue[0]


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.1.2.3", "loopback"),
        ("::1", "loopback"),
        ("10.0.0.5", "private"),
        ("172.16.3.4", "private"),
        ("192.168.1.1", "private"),
        ("fd12::1", "private"),
        ("169.254.169.254", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("100.100.100.200", "metadata"),
        ("169.254.10.1", "link-local"),
        ("fe80::1", "link-local"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("100.64.1.1", "shared"),
        ("240.0.0.1", "reserved"),
        ("::ffff:127.0.0.1", "loopback address (inside"),
        ("::ffff:169.254.169.254", "metadata address (inside"),
        ("::ffff:10.1.2.3", "private address (inside"),
        ("::127.0.0.1", "loopback address (inside"),
        ("64:ff9b::a9fe:a9fe", "metadata address (inside"),
        ("2002:7f00:1::", "loopback address (inside"),
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "(inside"),  # Teredo: its client is 127.0.0.1
    ],
)
def test_addresses_that_are_not_public_are_refused_in_every_form(address, reason):
    found = fetch.refusal(ipaddress.ip_address(address))
    assert found is not None and reason in found, (address, found)


@pytest.mark.parametrize("address", ["93.184.215.14", "8.8.8.8", "2606:4700::6810:84e5", "::ffff:8.8.8.8"])
def test_public_addresses_pass(address):
    assert fetch.refusal(ipaddress.ip_address(address)) is None


def test_url_input_is_off_by_default():
    assert fetch.FetchPolicy().enabled is False
    with pytest.raises(ApiError, match="URL input is off"):
        asyncio.run(fetch.fetch(fetch.FetchPolicy(), "https://example.com/a.jpg", 1000))


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://example.com/a.jpg", "scheme 'ftp'"),
        ("https://example.com:8443/a.jpg", "port 8443"),
        ("https://user:pw@example.com/a.jpg", "credentials"),
        ("https://127.0.0.1/a.jpg", "loopback"),
        ("https://[::ffff:a9fe:a9fe]/a.jpg", "metadata"),
        ("https://other.org/a.jpg", "not in the allow-list"),
        ("not a url", "scheme"),
    ],
)
def test_urls_are_checked_before_anything_is_sent(url, reason):
    policy = fetch.FetchPolicy(enabled=True, allow_hosts=("example.com", ".photos.example"))
    with pytest.raises(ApiError, match=reason):
        fetch.checked_url(policy, url)
    assert fetch.checked_url(policy, "https://cdn.photos.example/a.jpg").host == "cdn.photos.example"


@pytest.fixture(scope="module")
def servers():
    photo = b"\xff\xd8\xff" + b"photo" * 100
    with (
        PhotoServer({"a.jpg": photo, "big.jpg": b"\xff\xd8\xff" + b"x" * 5000}, ALLOWED) as good,
        PhotoServer({"a.jpg": photo}, INTERNAL) as bad,
    ):
        yield good, bad, photo


def policy_for(servers, resolver, **changes) -> fetch.FetchPolicy:
    good, bad, _ = servers
    base = fetch.FetchPolicy(
        enabled=True,
        schemes=("http",),
        ports=(good.port, bad.port),
        allow_networks=(ipaddress.ip_network(f"{ALLOWED}/32"),),
        resolver=resolver,
        timeout_s=5,
    )
    return replace(base, **changes)


def test_a_name_that_resolves_to_an_allowed_address_is_fetched(servers):
    good, _, photo = servers
    resolver = StaticResolver({"photos.test": [[ALLOWED]]})
    assert asyncio.run(fetch.fetch(policy_for(servers, resolver), f"http://photos.test:{good.port}/a.jpg", 10_000)) == photo


def test_a_name_that_resolves_to_a_private_address_is_refused_before_connecting(servers):
    _, bad, _ = servers
    before = len(bad.requests)
    resolver = StaticResolver({"internal.test": [["10.0.0.5"]], "mixed.test": [[ALLOWED, "192.168.0.9"]], "inside.test": [[INTERNAL]]})
    policy = policy_for(servers, resolver)
    for host, reason in (("internal.test", "10.0.0.5, a private address"), ("mixed.test", "192.168.0.9"), ("inside.test", "loopback")):
        with pytest.raises(ApiError, match=reason) as error:
            asyncio.run(fetch.fetch(policy, f"http://{host}:{bad.port}/a.jpg", 10_000))
        assert error.value.status == 400
    assert len(bad.requests) == before


def test_dns_rebinding_does_not_reach_the_internal_server(servers):
    """The name resolves to the allowed address when checked and to the internal one a moment later: the connection goes
    to the address that was checked; a redirect back to the same name is resolved and checked again."""
    good, bad, photo = servers
    before_good, before_bad = len(good.requests), len(bad.requests)
    resolver = StaticResolver({"rebind.test": [[ALLOWED], [INTERNAL]]})
    # Both servers listen on the same path; the ports differ, so give the allowed server's port.
    assert asyncio.run(fetch.fetch(policy_for(servers, resolver), f"http://rebind.test:{good.port}/a.jpg", 10_000)) == photo
    assert resolver.asked == ["rebind.test"] and len(good.requests) == before_good + 1 and len(bad.requests) == before_bad
    resolver = StaticResolver({"rebind.test": [[ALLOWED], [INTERNAL]]})
    url = f"http://rebind.test:{good.port}/redirect?to=http://rebind.test:{good.port}/a.jpg"
    with pytest.raises(ApiError, match=r"rebind.test resolves to 127.0.0.3, a loopback address \(redirect 1"):
        asyncio.run(fetch.fetch(policy_for(servers, resolver), url, 10_000))
    assert len(bad.requests) == before_bad


def test_every_redirect_is_checked_and_their_number_bounded(servers):
    good, bad, photo = servers
    resolver = StaticResolver({})
    policy = policy_for(servers, resolver)
    base = f"http://{ALLOWED}:{good.port}"
    with pytest.raises(ApiError, match=r"127\.0\.0\.3 is a loopback address"):
        asyncio.run(fetch.fetch(policy, f"{base}/redirect?to=http://{INTERNAL}:{bad.port}/a.jpg", 10_000))
    with pytest.raises(ApiError, match=r"169\.254\.169\.254 is a cloud metadata address"):
        asyncio.run(fetch.fetch(policy, f"{base}/redirect?to=http://169.254.169.254:{good.port}/", 10_000))
    assert asyncio.run(fetch.fetch(policy, f"{base}/redirect?to={base}/a.jpg", 10_000)) == photo
    chain = f"{base}/a.jpg"
    for _ in range(4):
        chain = f"{base}/redirect?to={chain}"
    with pytest.raises(ApiError, match="more than 3 redirects"):
        asyncio.run(fetch.fetch(policy, chain, 10_000))


def test_the_bytes_and_the_status_are_bounded(servers):
    good, _, _ = servers
    policy = policy_for(servers, StaticResolver({}))
    with pytest.raises(ApiError) as error:
        asyncio.run(fetch.fetch(policy, f"http://{ALLOWED}:{good.port}/big.jpg", 1000))
    assert error.value.status == 413
    with pytest.raises(ApiError, match="answered 404"):
        asyncio.run(fetch.fetch(policy, f"http://{ALLOWED}:{good.port}/missing.jpg", 1000))


def test_the_time_is_bounded():
    """A server that accepts the connection and never answers: the fetch ends at its timeout."""
    import socket
    import time

    with socket.socket() as listener:
        listener.bind((ALLOWED, 0))
        listener.listen()
        port = listener.getsockname()[1]
        policy = fetch.FetchPolicy(
            enabled=True, schemes=("http",), ports=(port,), allow_networks=(ipaddress.ip_network(f"{ALLOWED}/32"),), timeout_s=0.5
        )
        started = time.monotonic()
        with pytest.raises(ApiError, match=r"no answer within 0\.5 s"):
            asyncio.run(fetch.fetch(policy, f"http://{ALLOWED}:{port}/a.jpg", 1000))
        assert time.monotonic() - started < 3
