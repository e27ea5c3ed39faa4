"""Outbound URL guard: what the gateway fetches for a caller may not reach inside the network.

A URL that a caller gives (``/ocr`` ``url``, a PaddleX-native ``file`` URL, later webhook
callbacks) may not reach loopback, private, link-local (the cloud metadata address included),
multicast, reserved or unspecified addresses, however the address is spelled: ``localhost``,
``127.1``, ``2130706433``, ``0x7f.0.0.1``, ``0177.0.0.1``, ``[::1]``, ``[::ffff:127.0.0.1]``,
6to4 and NAT64 forms. URLs with credentials (``http://allowed@forbidden/``) are refused
outright. ``input.url_allow`` opens specific destinations: host names, addresses or networks,
each optionally with a port (``files.corp``, ``10.2.0.0/16``, ``127.0.0.1:8080``,
``[fd00::/8]:443``).

Two layers: :meth:`UrlGuard.parse` checks a URL's syntax and, for a literal address, the
address (before any connection); :class:`GuardedTransport`'s network backend resolves every
host name once when it opens a connection, checks every address it resolved to and connects to
the checked address itself, so DNS rebinding cannot swap in another address, and every
redirect hop is checked again.

Usage::

    guard = UrlGuard(["files.corp", "127.0.0.1:8080"])
    guard.refusal("169.254.169.254", ip_address("169.254.169.254"), 80)  # "link-local ..."
    target = guard.parse("http://0177.0.0.1/x")        # raises UrlRefused (loopback)
    client = guarded_client(lambda: guard)             # every connection is checked
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[list[str]]]
"""``resolver(host, port)`` -> the addresses ``host`` resolves to (strings)."""

_LABEL = r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?"
_NAME_RE = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")
_IPV4_PART_RE = re.compile(r"^(0x[0-9a-f]*|0[0-7]*|[1-9][0-9]*)$")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")
_METADATA = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
FORBIDDEN_HELP = (
    "the gateway fetches no loopback, private, link-local, multicast, reserved or unspecified "
    "address (input.url_allow opens specific destinations)"
)


class UrlRefused(Exception):
    """A URL the gateway will not fetch; ``status`` is 403 for a forbidden destination and
    400 for a URL that is not a usable http(s) URL."""

    def __init__(self, reason: str, status: int = 403) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


def literal_address(host: str) -> IPAddress | None:
    """The address a literal host denotes, in every spelling ``inet_aton`` accepts
    (``127.1``, ``2130706433``, ``0x7f.0.0.1``, ``0177.0.0.1``) and IPv6; None for a name."""
    host = host.strip("[]")
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            return None
    parts = host.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values: list[int] = []
    for part in (p.lower() for p in parts):
        if not _IPV4_PART_RE.match(part):
            return None
        if part.startswith("0x"):
            values.append(int(part[2:] or "0", 16))
        elif part.startswith("0"):
            values.append(int(part, 8))
        else:
            values.append(int(part, 10))
    # a.b.c.d, a.b.c (c: 16 bits), a.b (b: 24 bits), a (32 bits)
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (5 - len(values)):
        return None
    number = last
    for index, value in enumerate(head):
        number |= value << (24 - 8 * index)
    return ipaddress.IPv4Address(number)


def embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address inside an IPv4-mapped, NAT64 or 6to4 IPv6 address."""
    if isinstance(ip, ipaddress.IPv4Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _SIX_TO_FOUR:
        return ip.sixtofour
    return None


def address_class(ip: IPAddress) -> str | None:
    """Why ``ip`` is off limits ("loopback", "private", ...), or None when it is global."""
    inner = embedded_ipv4(ip)
    if inner is not None:
        why = address_class(inner)
        return f"{why} (embedded in {ip})" if why else None
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip in _METADATA:
        return "link-local (the cloud metadata address)"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if ip.is_private:
        return "private"
    if ip.is_reserved:
        return "reserved"
    if not ip.is_global:
        return "reserved (not globally routable)"
    return None


def _unwrap(ip: IPAddress) -> IPAddress:
    return (ip.ipv4_mapped or ip) if isinstance(ip, ipaddress.IPv6Address) else ip


@dataclass(frozen=True)
class AllowEntry:
    """One ``input.url_allow`` entry: a host name or a network, optionally with a port."""

    text: str
    host: str | None = None
    network: IPNetwork | None = None
    port: int | None = None

    def matches(self, host: str, ip: IPAddress, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.network is not None:
            address = _unwrap(ip)
            return address.version == self.network.version and address in self.network
        return self.host == host


def normalize_host(host: str) -> str:
    """Lower case, percent-decoded, without brackets or a trailing dot; literal IPv4
    addresses in canonical dotted form."""
    host = urllib.parse.unquote(host).strip().lower().strip("[]").rstrip(".")
    literal = literal_address(host)
    return str(literal) if literal is not None else host


def parse_allow_entry(text: str) -> AllowEntry:
    """``files.corp``, ``files.corp:8443``, ``10.2.0.0/16``, ``127.0.0.1:8080``, ``fd00::/8``,
    ``[fd00::1]:443``; raises ValueError saying what is wrong."""
    raw = text.strip()
    if not raw:
        raise ValueError("empty entry")
    port: int | None = None
    if raw.startswith("["):
        inside, sep, rest = raw[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"{text!r}: expected [IPv6 address or network] with an optional :port")
        host, port_text = inside, rest[1:] if rest else None
    elif raw.count(":") > 1:
        host, port_text = raw, None  # a bare IPv6 address or network, no port
    else:
        host, _, port_text = raw.partition(":")
        port_text = port_text if ":" in raw else None
    if port_text is not None:
        if not (port_text.isascii() and port_text.isdigit()) or not 1 <= int(port_text) <= 65535:
            raise ValueError(f"{text!r}: port must be 1..65535")
        port = int(port_text)
    if "/" in host:
        try:
            return AllowEntry(raw, network=ipaddress.ip_network(host, strict=False), port=port)
        except ValueError as exc:
            raise ValueError(f"{text!r}: not a network: {exc}") from None
    literal = literal_address(host)
    if literal is not None:
        return AllowEntry(raw, network=ipaddress.ip_network(literal), port=port)
    name = normalize_host(host)
    if not _NAME_RE.match(name):
        raise ValueError(f"{text!r}: not a host name, address or network")
    return AllowEntry(raw, host=name, port=port)


async def system_resolver(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to via the system resolver (getaddrinfo)."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True)
class Target:
    """A checked URL: its normalized form (what is fetched), host and effective port."""

    url: str
    host: str
    port: int


class UrlGuard:
    """The allow-list and the checks; ``resolver`` is replaceable (tests, no network I/O)."""

    def __init__(
        self, allow: Iterable[str | AllowEntry] = (), resolver: Resolver | None = None
    ) -> None:
        self.allow: tuple[AllowEntry, ...] = tuple(
            entry if isinstance(entry, AllowEntry) else parse_allow_entry(entry) for entry in allow
        )
        self.resolver: Resolver = resolver or system_resolver

    def refusal(self, host: str, ip: IPAddress, port: int) -> str | None:
        """Why connecting to ``ip``:``port`` for ``host`` is refused, or None."""
        if any(entry.matches(host, ip, port) for entry in self.allow):
            return None
        why = address_class(ip)
        if why is None:
            return None
        shown = host if host == str(ip) else f"{host} ({ip})"
        return f"{shown} is a {why} address; {FORBIDDEN_HELP}"

    def parse(self, url: str) -> Target:
        """Check a URL's form (http/https, a host, no credentials, a valid port) and, for a
        literal address, the address; returns the normalized target. No I/O."""
        shown = url if len(url) <= 200 else url[:200] + "..."
        try:
            parts = urllib.parse.urlsplit(url.strip())
            port = parts.port
        except ValueError as exc:
            raise UrlRefused(f"not a valid URL: {shown!r} ({exc})", 400) from None
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            raise UrlRefused(f"only http:// and https:// URLs, got {shown!r}", 400)
        if "@" in parts.netloc:
            raise UrlRefused(f"URLs with credentials (user@host) are not fetched: {shown!r}")
        if not parts.hostname:
            raise UrlRefused(f"the URL has no host: {shown!r}", 400)
        host = normalize_host(parts.hostname)
        effective_port = port or (443 if scheme == "https" else 80)
        literal = literal_address(host)
        if literal is not None:
            why = self.refusal(host, literal, effective_port)
            if why is not None:
                raise UrlRefused(why)
        elif not _NAME_RE.match(host):
            raise UrlRefused(f"not a valid host name in {shown!r}", 400)
        netloc = f"[{host}]" if ":" in host else host
        if port is not None:
            netloc += f":{port}"
        normalized = urllib.parse.urlunsplit((scheme, netloc, parts.path, parts.query, ""))
        try:
            httpx.URL(normalized)
        except httpx.InvalidURL as exc:
            raise UrlRefused(f"not a valid URL: {shown!r} ({exc})", 400) from None
        return Target(normalized, host, effective_port)

    async def resolve(self, host: str, port: int) -> list[str]:
        """Resolve ``host`` once and check every address; the checked addresses, or
        :class:`UrlRefused` if any of them is off limits."""
        host = normalize_host(host)
        literal = literal_address(host)
        if literal is not None:
            addresses: Sequence[str] = [str(literal)]
        elif host == "localhost" or host.endswith(".localhost"):
            addresses = ["127.0.0.1"]  # RFC 6761: never asked of DNS
        else:
            try:
                addresses = await self.resolver(host, port)
            except OSError as exc:
                raise UrlRefused(f"cannot resolve {host!r}: {exc}", 400) from None
            if not addresses:
                raise UrlRefused(f"cannot resolve {host!r}: no address", 400)
        for address in addresses:
            why = self.refusal(host, ipaddress.ip_address(address.split("%")[0]), port)
            if why is not None:
                raise UrlRefused(why)
        return list(addresses)


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """An httpcore network backend that connects only to addresses the guard checked."""

    def __init__(self, guard: Callable[[], UrlGuard]) -> None:
        self._guard = guard
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        async with asyncio.timeout(timeout):
            addresses = await self._guard().resolve(host, port)
        error: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    address,
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                error = exc
        assert error is not None
        raise error

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise UrlRefused("unix sockets are not fetched")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport over :class:`GuardedBackend`, without keep-alive (each request
    connects, so each is checked against the guard of its time)."""

    def __init__(self, guard: Callable[[], UrlGuard], max_connections: int = 100) -> None:
        super().__init__(trust_env=False)
        # httpx 0.28 has no argument for the network backend: replace its pool with one that
        # has the same defaults and the guarded backend
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=max_connections,
            max_keepalive_connections=0,
            network_backend=GuardedBackend(guard),
        )


def guarded_client(guard: Callable[[], UrlGuard], max_connections: int = 100) -> httpx.AsyncClient:
    """An httpx client whose every connection goes through ``guard()`` (redirects are not
    followed: the caller checks each hop with :meth:`UrlGuard.parse`)."""
    return httpx.AsyncClient(
        transport=GuardedTransport(guard, max_connections),
        trust_env=False,
        follow_redirects=False,
    )
