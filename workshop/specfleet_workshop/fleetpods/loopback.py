"""The dev engines' HTTP servers: loopback only, and ready for a load test's bursts of connections."""

import logging
import random
import socket
from collections.abc import Collection
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class ListenError(ValueError):
    """The listen address is not a loopback address."""


def parse_listen(text: str) -> tuple[str, int]:
    """`127.0.0.1:18000` -> (host, port); only IPv4 loopback is accepted (`localhost` means 127.0.0.1).

    Port 0 lets the OS choose; the server's `url` tells which it chose.
    """
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ListenError(f"{text!r} is not HOST:PORT")
    host = "127.0.0.1" if host == "localhost" else host
    try:
        loopback = IPv4Address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ListenError(f"{host!r} is not an IPv4 loopback address; the dev engines only listen on loopback")
    return host, int(port)


QUIET_PORTS_START = 20000
"""`free_port` picks from here up to the start of the kernel's ephemeral range (32768 by default): bind(0)
and outgoing connections draw their ports from that range, so a port picked there could be taken by any
listener on port 0 or any client between the pick and the child's bind (a `vllm serve` binds ~30 s after
it was told its port, and a test suite starts hundreds of loopback servers and scrapes meanwhile)."""
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
PICKS = 64
"""Random ports tried before falling back to one the kernel picks."""


def _ephemeral_start() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default; elsewhere the fallback below still finds a port


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port(exclude: Collection[int] = ()) -> int:
    """A loopback port free now, for a child process told where to listen (port 0 would hide which).

    Picked at random below the ephemeral range (`QUIET_PORTS_START`), where nothing lands by chance; only
    another caller's pick could, one chance in ~12,000. Falls back to a kernel-picked port when that range
    is full or absent.
    """
    rng = random.SystemRandom()
    end = min(_ephemeral_start(), 65536)
    if end - QUIET_PORTS_START >= 1024:
        for _ in range(PICKS):
            port = rng.randrange(QUIET_PORTS_START, end)
            if port not in exclude and _bindable(port):
                return port
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in exclude:
            return port


def free_ports(count: int) -> list[int]:
    """`count` distinct ports, each as `free_port` picks it."""
    ports: list[int] = []
    while len(ports) < count:
        ports.append(free_port(exclude=ports))
    return ports


class LoopbackServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    """Listen backlog: a load test opens a connection per completion, tens at once (the default 5 drops SYNs,
    and the client's TCP retransmits them a second later)."""

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


class LoopbackHandler(BaseHTTPRequestHandler):
    """What every dev engine's handler does alike: access lines at debug level, whole answers with a length."""

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def _send(self, status: HTTPStatus | int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
