"""A notification receiver on loopback: a real aiohttp server in a thread of its own, recording what it is sent.

It answers every POST with `status` after holding it `delay` seconds (a slow receiver), or with a 307 to
`redirect_to` (a receiver handing the request on), over TLS when given a server context (trustme's; for the chat
services, whose URLs are https). `dead_port` is a port nothing listens on.
"""

import asyncio
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass(frozen=True)
class Received:
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    port: int = 0
    status: int = 200
    delay: float = 0.0
    redirect_to: str | None = None
    received: list[Received] = field(default_factory=list)
    arrived: threading.Condition = field(default_factory=threading.Condition)

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        with self.arrived:
            self.received.append(Received(request.path, dict(request.query), dict(request.headers), body))
            self.arrived.notify_all()
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.redirect_to is not None:
            return web.Response(status=307, headers={"Location": self.redirect_to})
        return web.Response(status=self.status, text="ok")

    def wait_for(self, count: int, timeout: float) -> list[Received]:
        """The first `count` requests, waiting at most `timeout` seconds for them (fewer: what there is)."""
        with self.arrived:
            self.arrived.wait_for(lambda: len(self.received) >= count, timeout)
            return list(self.received)


@contextmanager
def receiving(
    status: int = 200, delay: float = 0.0, tls: ssl.SSLContext | None = None, redirect_to: str | None = None
) -> Iterator[Receiver]:
    """A Receiver serving on 127.0.0.1 until the block ends."""
    receiver = Receiver(status=status, delay=delay, redirect_to=redirect_to)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, Any] = {}

    async def serve() -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", receiver._handle)
        runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
        await site.start()
        receiver.port = runner.addresses[0][1]
        holder["runner"] = runner
        started.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(serve(), loop).result(timeout=10)
    started.wait(10)
    try:
        yield receiver
    finally:
        asyncio.run_coroutine_threadsafe(holder["runner"].cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)


def dead_port() -> int:
    """A loopback port that was free a moment ago and that nothing listens on: connections are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
