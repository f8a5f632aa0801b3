"""Photos by URL, fetched so that the URL cannot be turned against the network the gateway runs in (server-side request
forgery). Off unless ``FetchPolicy.enabled``.

Every URL, the first and each redirect's, is checked before anything is sent: its scheme and port must be configured
ones, its host an allowed one (where an allow-list is given), and every address its host resolves to a public one. A
loopback, private, link-local (cloud metadata lives there: 169.254.169.254), multicast, shared (100.64.0.0/10),
reserved or unspecified address is refused, in IPv4 and IPv6 alike, and so is an IPv6 address carrying one of those
IPv4 addresses (IPv4-mapped, IPv4-compatible, 6to4, Teredo, NAT64). ``allow_networks`` lets chosen networks through
(an internal image store). The connection goes to the address that was checked (aiohttp connects to what the resolver
gives it), so a name that resolves to another address a moment later (DNS rebinding) does not get through. Redirects
are followed by hand, at most ``max_redirects``; the whole fetch has ``timeout_s`` and ``max_bytes``; proxies from the
environment are ignored and the body is taken as it comes (``Accept-Encoding: identity``: no decompression bomb).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urljoin

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from .errors import ApiError, bad_request

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
REDIRECTS = (301, 302, 303, 307, 308)
DEFAULT_PORTS = {"http": 80, "https": 443}
# Cloud providers' instance-metadata addresses outside the ranges refused anyway (the v4 ones are link-local or shared).
METADATA = {ipaddress.ip_address("fd00:ec2::254"), ipaddress.ip_address("100.100.100.200"), ipaddress.ip_address("169.254.169.254")}
SHARED = ipaddress.ip_network("100.64.0.0/10")
NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))


def embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries: mapped, compatible, 6to4, Teredo (server and client), NAT64."""
    found = [a for a in (address.ipv4_mapped, address.sixtofour) if a is not None]
    if address.teredo is not None:
        found += list(address.teredo)
    if int(address) >> 32 == 0 and int(address) > 1:  # ::a.b.c.d, IPv4-compatible (deprecated)
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    if any(address in network for network in NAT64):
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


def refusal(address: Address) -> str | None:
    """Why ``address`` is not fetched from (None: it is a public address)."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = embedded_ipv4(address)
        for carried in inner:
            reason = refusal(carried)
            if reason is not None:
                return f"{reason} (inside the IPv6 address {address})"
        if inner and address.sixtofour is None and address.teredo is None:
            return None  # an IPv4 address in IPv6 clothing (mapped, compatible, NAT64): its IPv4 address decides
    if address in METADATA:
        return "a cloud metadata address"
    for reason, test in (
        ("a loopback address", address.is_loopback),
        ("an unspecified address", address.is_unspecified),
        ("a link-local address", address.is_link_local),
        ("a multicast address", address.is_multicast),
        ("a reserved address", address.is_reserved),
        ("a private address", address.is_private),
        ("a shared (carrier-grade NAT) address", isinstance(address, ipaddress.IPv4Address) and address in SHARED),
        ("not a public address", not address.is_global),
    ):
        if test:
            return reason
    return None


class Resolver(Protocol):
    """Host name -> its addresses (the system's, or a test's)."""

    async def addresses(self, host: str, port: int) -> list[str]: ...


class SystemResolver:
    async def addresses(self, host: str, port: int) -> list[str]:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        except socket.gaierror as error:
            raise bad_request(f"URL refused: {host} does not resolve ({error.strerror})") from None
        return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True)
class FetchPolicy:
    enabled: bool = False
    schemes: tuple[str, ...] = ("https", "http")
    ports: tuple[int, ...] = (443, 80)
    allow_hosts: tuple[str, ...] = ()  # when given, only these hosts ("example.com", or ".example.com" for its subdomains)
    allow_networks: tuple[Network, ...] = ()  # addresses fetched from although they are not public
    max_redirects: int = 3
    max_bytes: int = 20 * 1024 * 1024
    timeout_s: float = 10.0
    resolver: Resolver = field(default_factory=SystemResolver, compare=False)

    def address_refusal(self, address: Address) -> str | None:
        if any(address in network for network in self.allow_networks):
            return None
        return refusal(address)

    def host_allowed(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return not self.allow_hosts or any(
            host == allowed.lower().lstrip(".") or (allowed.startswith(".") and host.endswith(allowed.lower()))
            for allowed in self.allow_hosts
        )


def checked_url(policy: FetchPolicy, url: str) -> URL:
    """``url`` parsed, its scheme, port and host checked (an IP literal's address too); ``ApiError`` 400 naming why not."""
    try:
        parsed = URL(url)
    except (ValueError, TypeError):
        raise bad_request(f"URL refused: {url!r} is not a URL") from None
    if parsed.scheme not in policy.schemes:
        raise bad_request(f"URL refused: scheme {parsed.scheme or '(none)'!r} is not one of {', '.join(policy.schemes)}")
    if not parsed.host:
        raise bad_request(f"URL refused: {url!r} has no host")
    if parsed.user or parsed.password:
        raise bad_request("URL refused: credentials in a URL are not sent")
    port = parsed.port or DEFAULT_PORTS.get(parsed.scheme, 0)
    if port not in policy.ports:
        raise bad_request(f"URL refused: port {port} is not one of {', '.join(map(str, policy.ports))}")
    host = parsed.host.strip("[]")
    try:
        literal: Address | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        reason = policy.address_refusal(literal)
        if reason is not None:
            raise bad_request(f"URL refused: {literal} is {reason}")
    if not policy.host_allowed(host):
        raise bad_request(f"URL refused: host {host} is not in the allow-list")
    return parsed


class CheckedResolver(AbstractResolver):
    """aiohttp's resolver: the policy's resolver, every address checked; aiohttp connects to the addresses given here."""

    def __init__(self, policy: FetchPolicy) -> None:
        self.policy = policy

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        addresses = await self.policy.resolver.addresses(host, port)
        if not addresses:
            raise bad_request(f"URL refused: {host} resolves to no address")
        results: list[ResolveResult] = []
        for text in addresses:
            address = ipaddress.ip_address(text)
            reason = self.policy.address_refusal(address)
            if reason is not None:
                raise bad_request(f"URL refused: {host} resolves to {address}, {reason}")
            results.append(
                ResolveResult(
                    hostname=host,
                    host=str(address),
                    port=port,
                    family=socket.AF_INET6 if address.version == 6 else socket.AF_INET,
                    proto=socket.IPPROTO_TCP,
                    flags=socket.AI_NUMERICHOST,
                )
            )
        return results

    async def close(self) -> None:
        return None


async def fetch(policy: FetchPolicy, url: str, max_bytes: int) -> bytes:
    """The body at ``url`` (following redirects, each checked), at most ``min(max_bytes, policy.max_bytes)`` bytes."""
    if not policy.enabled:
        raise bad_request("URL input is off on this gateway (it is enabled with --fetch-urls)", code="URL_INPUT_DISABLED")
    limit = min(max_bytes, policy.max_bytes)
    connector = aiohttp.TCPConnector(resolver=CheckedResolver(policy), use_dns_cache=False, force_close=True)
    timeout = aiohttp.ClientTimeout(total=policy.timeout_s)
    try:
        async with aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False, auto_decompress=False) as session:
            return await asyncio.wait_for(_follow(session, policy, url, limit), policy.timeout_s)
    except ApiError:
        raise
    except TimeoutError:
        raise ApiError(400, "URL_FETCH_FAILED", f"URL fetch failed: no answer within {policy.timeout_s:g} s") from None
    except aiohttp.ClientError as error:
        cause = error.__cause__ if isinstance(error.__cause__, ApiError) else None
        if cause is not None:
            raise cause from None
        raise ApiError(400, "URL_FETCH_FAILED", f"URL fetch failed: {' '.join(str(error).split()) or type(error).__name__}") from None


async def _follow(session: aiohttp.ClientSession, policy: FetchPolicy, url: str, limit: int) -> bytes:
    current = url
    for hop in range(policy.max_redirects + 1):
        try:
            location = await _get(session, policy, current, limit)
        except (ApiError, aiohttp.ClientError) as failure:
            error = failure if isinstance(failure, ApiError) else failure.__cause__ if isinstance(failure.__cause__, ApiError) else None
            if error is None:
                raise
            if hop:
                error.message = f"{error.message} (redirect {hop}, to {current})"
            raise error from None
        if isinstance(location, bytes):
            return location
        current = location
    raise bad_request(f"URL refused: more than {policy.max_redirects} redirects")


async def _get(session: aiohttp.ClientSession, policy: FetchPolicy, url: str, limit: int) -> bytes | str:
    """One hop: the body, or the next URL of a redirect (absolute)."""
    target = checked_url(policy, url)
    async with session.get(target, allow_redirects=False, headers={"Accept-Encoding": "identity", "Accept": "image/*"}) as response:
        if response.status in REDIRECTS:
            location = response.headers.get("Location")
            if not location:
                raise ApiError(400, "URL_FETCH_FAILED", f"URL fetch failed: a {response.status} redirect without a Location")
            return urljoin(str(target), location)
        if response.status != 200:
            raise ApiError(400, "URL_FETCH_FAILED", f"URL fetch failed: {target.host} answered {response.status}")
        if response.content_length is not None and response.content_length > limit:
            raise ApiError(413, "PAYLOAD_TOO_LARGE", f"the photo at the URL is larger than this pipeline takes ({limit} bytes)")
        return await _read(response, limit)


async def _read(response: aiohttp.ClientResponse, limit: int) -> bytes:
    chunks: list[bytes] = []
    total = 0
    async for chunk in response.content.iter_chunked(64 * 1024):
        total += len(chunk)
        if total > limit:
            raise ApiError(413, "PAYLOAD_TOO_LARGE", f"the photo at the URL is larger than this pipeline takes ({limit} bytes)")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_networks(values: Sequence[str]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(value, strict=False) for value in values)
