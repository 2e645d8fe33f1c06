"""The dev engines' HTTP servers: loopback only, and ready for a load test's bursts of connections."""

import socket
from http.server import ThreadingHTTPServer
from ipaddress import IPv4Address


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
