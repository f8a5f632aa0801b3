"""Which replica runs which stream: rendezvous hashing of stream names over the replicas that are up.

Every replica reads the same streams (the ConfigMap) and runs only those it owns: the owner of a stream is the
member with the highest ``sha256(member + "/" + stream)``. All replicas compute the same owner from the same member
list, so each stream runs on one replica; when a member goes, only its streams move (each to the member ranked next
for it), and when one comes back they move back.

Members: :class:`StaticMembership` (one process: it owns everything), or :class:`DnsMembership`, the addresses
a headless Service resolves to (Kubernetes lists the ready pods of a StatefulSet there; a pod that stops or fails its
readiness probe leaves the list, and its streams are taken over at the next refresh).
"""

from __future__ import annotations

import hashlib
import socket
from dataclasses import dataclass


def owner(stream: str, members: list[str]) -> str | None:
    """The member that runs ``stream`` (None when there is no member)."""
    if not members:
        return None
    return max(members, key=lambda member: hashlib.sha256(f"{member}/{stream}".encode()).digest())


@dataclass
class StaticMembership:
    me: str = "local"

    def members(self) -> list[str]:
        return [self.me]


@dataclass
class DnsMembership:
    """The ready pods behind a headless Service, by address; ``me`` is this pod's address (the downward API's status.podIP)."""

    me: str
    service: str

    def members(self) -> list[str]:
        try:
            found = {str(info[4][0]) for info in socket.getaddrinfo(self.service, None, proto=socket.IPPROTO_TCP)}
        except socket.gaierror:
            found = set()
        # Until this pod is ready it is not listed: it then owns nothing, and starts once it is.
        return sorted(found)
