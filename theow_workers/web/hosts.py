"""The names the console answers to, and the origins its forms may be posted from.

A Host outside the set is refused (403) on every request: a page served under
an attacker's name that resolves to the console (DNS rebinding) would share
that name's cookies and origin. The set is the loopback names (any port: no
DNS name can rebind to them), the address the console is bound to, and
``THEOW_WEB_ALLOWED_HOSTS`` (comma-separated; ``name`` for any port,
``name:port`` for that one) — a console served under its own DNS name, or
bound to 0.0.0.0 and reached by address, lists that name or address there.

A POST whose Origin is not the console's own (the Host it was sent to) is
refused (403). A POST without Origin (curl, scripts) is let through to the
CSRF check; browsers send Origin on every POST.

>>> hosts = AllowedHosts.of(["theow.example.com", "10.0.0.5:8808"], bound="0.0.0.0")
>>> [hosts.allows(h) for h in ("localhost:8808", "theow.example.com", "10.0.0.5:80", "evil.test")]
[True, True, False, False]
>>> same_origin("http://localhost:8808", "localhost:8808"), same_origin("null", "localhost:8808")
(True, False)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"", "0.0.0.0", "::"})


def split_host(host: str) -> tuple[str, str]:
    """``name[:port]`` (IPv6 in brackets) as lower-case name and port ("" when none).

    >>> split_host("[::1]:8808"), split_host("Theow.Example.com")
    (('::1', '8808'), ('theow.example.com', ''))
    """
    host = host.strip().lower()
    if host.startswith("["):
        name, _, rest = host[1:].partition("]")
        return name, rest.removeprefix(":")
    name, _, port = host.partition(":")
    return (host, "") if ":" in port else (name, port)


@dataclass(frozen=True)
class AllowedHosts:
    any_port: frozenset[str]
    exact: frozenset[tuple[str, str]]

    @classmethod
    def of(cls, configured: Iterable[str], bound: str = "") -> AllowedHosts:
        names = set(LOOPBACK)
        if bound not in WILDCARDS:
            names.add(split_host(bound)[0])
        exact = set()
        for entry in configured:
            name, port = split_host(entry)
            if port:
                exact.add((name, port))
            elif name:
                names.add(name)
        return cls(frozenset(names), frozenset(exact))

    def allows(self, host: str | None) -> bool:
        if not host:
            return False
        name, port = split_host(host)
        return name in self.any_port or (name, port) in self.exact


def same_origin(origin: str, host: str | None) -> bool:
    """True when ``origin`` names the host the request was sent to."""
    if not host or origin == "null":
        return False
    try:
        netloc = urlsplit(origin).netloc
    except ValueError:
        return False
    return bool(netloc) and split_host(netloc) == split_host(host)
