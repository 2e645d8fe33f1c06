"""The dev engines' HTTP servers: loopback only, and ready for a load test's bursts of connections."""

import logging
import socket
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import IPv4Address
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


def free_port() -> int:
    """A loopback port free now (for a child process told where to listen; port 0 would hide which)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
