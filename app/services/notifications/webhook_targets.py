"""Where a webhook may be sent: the URL's form and the addresses its host resolves to.

A tenant's endpoint must not reach into the service's own network (SSRF): every address
the host resolves to must be a global one (no private, loopback, link-local, shared,
multicast, reserved or unspecified address, nor an IPv6 form that reaches one: IPv4-mapped,
6to4, Teredo, NAT64) unless the operator sets ``SODM_WEBHOOK_ALLOW_PRIVATE``. The check runs
when the endpoint is registered and again before every delivery, whose connection then goes
to the address that was checked (a DNS answer that changes in between, DNS rebinding,
cannot redirect it).
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_URL_LENGTH = 2048


class TargetRefused(ValueError):
    """The URL is malformed, does not resolve, or reaches an address that is not allowed;
    ``reason`` says which in a few words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Target:
    """A checked endpoint: the URL's parts and the address to connect to."""

    scheme: str
    host: str  # as written in the URL (the Host header and the TLS server name)
    port: int
    path: str  # path and query, at least "/"
    address: str  # the checked IP address the connection goes to


def parse(url: str) -> tuple[str, str, int, str]:
    """``(scheme, host, port, path)`` of an http(s) URL without credentials or fragment."""
    if len(url) > MAX_URL_LENGTH:
        raise TargetRefused(f"the URL is longer than {MAX_URL_LENGTH} characters")
    if any(ord(c) < 33 or ord(c) == 127 for c in url):
        raise TargetRefused("the URL contains spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise TargetRefused(f"not a valid URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise TargetRefused("the URL must start with http:// or https://")
    if not parts.hostname:
        raise TargetRefused("the URL has no host")
    if parts.username is not None or parts.password is not None:
        raise TargetRefused("the URL must not carry credentials (sign with the secret)")
    if parts.fragment:
        raise TargetRefused("the URL must not have a fragment")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return scheme, parts.hostname, port or (443 if scheme == "https" else 80), path


# IPv6 prefixes that carry an IPv4 address in their last 32 bits and reach it through a
# translator or a tunnel: NAT64 (RFC 6052, well-known and local-use) and IPv4-translated
# (SIIT, RFC 2765); 6to4 (2002::/16, bits 16-48) and Teredo (2001::/32) have their own
# accessors in ``ipaddress``
_EMBEDDING = (("NAT64", ipaddress.ip_network("64:ff9b::/96")),
              ("NAT64", ipaddress.ip_network("64:ff9b:1::/48")),
              ("IPv4-translated", ipaddress.ip_network("::ffff:0:0:0/96")))


def embedded_ipv4(ip: ipaddress.IPv6Address) -> list[tuple[str, ipaddress.IPv4Address]]:
    """The IPv4 addresses an IPv6 transition form reaches, with the form's name: mapped,
    6to4, Teredo (server and client), NAT64, IPv4-translated (empty for a plain one)."""
    out: list[tuple[str, ipaddress.IPv4Address]] = []
    if ip.ipv4_mapped is not None:
        out.append(("IPv4-mapped", ip.ipv4_mapped))
    if ip.sixtofour is not None:
        out.append(("6to4", ip.sixtofour))
    if ip.teredo is not None:
        out.extend(("Teredo", v4) for v4 in ip.teredo)
    for words, net in _EMBEDDING:
        if ip in net:
            out.append((words, ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)))
    return out


def _plain_refusal(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    for attr, words in (("is_loopback", "loopback"), ("is_link_local", "link-local"),
                        ("is_unspecified", "unspecified"), ("is_multicast", "multicast"),
                        ("is_reserved", "reserved"), ("is_private", "private")):
        if getattr(ip, attr):
            return words
    if isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local:
        return "site-local"
    if not ip.is_global:
        return "not globally routable"
    return None


def address_refusal(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why this address is not a public one (None when it is). An IPv6 transition form
    (IPv4-mapped, 6to4, Teredo, NAT64) is judged by the IPv4 address it reaches too, so
    ``2002:7f00:1::`` is as loopback as ``127.0.0.1`` whatever this Python's tables say of
    the IPv6 prefix."""
    if isinstance(ip, ipaddress.IPv6Address):
        for form, v4 in embedded_ipv4(ip):
            why = _plain_refusal(v4)
            if why is not None:
                return f"{why} (through {form} {v4})"
        if ip.ipv4_mapped is not None:
            return None  # a mapped public address is that address
    return _plain_refusal(ip)


def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (an IP literal resolves to itself)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise TargetRefused(f"the host {host!r} does not resolve ({exc})") from None
    out: list[str] = []
    for *_, sockaddr in infos:
        addr = str(sockaddr[0]).split("%", 1)[0]
        if addr not in out:
            out.append(addr)
    if not out:
        raise TargetRefused(f"the host {host!r} has no address")
    return out


def check(url: str, *, allow_private: bool) -> Target:
    """The checked target of ``url``: every resolved address must be allowed (one refused
    address refuses the URL: a round-robin name must not smuggle an internal one in)."""
    scheme, host, port, path = parse(url)
    addresses = resolve(host, port)
    if not allow_private:
        for addr in addresses:
            why = address_refusal(ipaddress.ip_address(addr))
            if why is not None:
                raise TargetRefused(f"the host {host!r} resolves to {addr}, a {why} address "
                                    "(SODM_WEBHOOK_ALLOW_PRIVATE allows it)")
    return Target(scheme, host, port, path, addresses[0])
