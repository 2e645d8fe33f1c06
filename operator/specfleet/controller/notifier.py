"""Delivers notifications off the reconcile path: a bounded queue, a few workers, retries with backoff.

A pass only offers what it derived (`offer` never waits: a full queue drops, counted), after its status write; the
workers find each notification's targets (the operator's, and the namespace's Secret `specfleet-notifications`,
read at most every `SECRET_TTL_SECONDS` per namespace), and send to each at once, each attempt under a timeout,
retried with exponential backoff up to `attempts`, then given up (counted). A dead or slow receiver so costs a
worker, never a reconcile: a rollback is written and applied whatever the receivers do.

Target URLs carry their tokens (a Slack webhook's path, a Teams workflow's signature): they are shown redacted in
every line this writes, and scrubbed from the log records of the libraries that send (Apprise, urllib3).
"""

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from specfleet.controller.metrics import (
    NOTIFICATION_RETRIES,
    NOTIFICATIONS_DROPPED,
    NOTIFICATIONS_FAILED,
    NOTIFICATIONS_SENT,
)
from specfleet.controller.sinks import SINKS, DeliveryError, Sink
from specfleet.notify.targets import NAMESPACE_SECRET, Target, Targets, parse_targets, secret_parts
from specfleet.notify.transitions import Fleet, Notification
from specfleet.reach import UrlPrefix

logger = logging.getLogger("specfleet.notifier")

SECRET_TTL_SECONDS = 30.0
"""How long a namespace's targets are reused before its Secret is read again."""
SENDING_THREADS = 8
"""Attempts in flight at once, over all workers and targets: their own threads, so that slow receivers never take
the threads the lease renewal and the reconciles use."""

T = TypeVar("T")


@dataclass(frozen=True)
class DeliveryPolicy:
    attempts: int = 5
    """Tries per target, the first included."""
    timeout: float = 5.0
    """Seconds one attempt may take to connect, and again to read the answer."""
    backoff: float = 1.0
    """The wait after a first failed attempt; it doubles after each, up to `backoff_cap`."""
    backoff_cap: float = 60.0

    def wait(self, failures: int) -> float:
        return min(self.backoff * 2 ** (failures - 1), self.backoff_cap)


class Scrubber:
    """Replaces the secret parts of every known target URL with `[…]` in every log record the process makes, as the
    record is made: a library's logger (Apprise's, urllib3's debug lines with the request path) is reached whatever
    its name, level or handler."""

    def __init__(self) -> None:
        self.secrets: tuple[str, ...] = ()
        self._installed = False

    def add(self, url: str) -> None:
        self.secrets = tuple(sorted({*self.secrets, *secret_parts(url)}, key=len, reverse=True))
        self._install()

    def _install(self) -> None:
        if self._installed:
            return
        self._installed = True
        make = logging.getLogRecordFactory()

        def scrubbed(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = make(*args, **kwargs)
            self.scrub(record)
            return record

        logging.setLogRecordFactory(scrubbed)

    def scrub(self, record: logging.LogRecord) -> None:
        if not self.secrets:
            return
        try:
            message = record.getMessage()
        except Exception:  # a malformed log call: logging reports it itself, later
            return
        scrubbed = message
        for secret in self.secrets:
            scrubbed = scrubbed.replace(secret, "[…]")
        if scrubbed != message:
            record.msg, record.args = scrubbed, ()


SCRUBBER = Scrubber()
"""One for the process: the record factory it wraps is global."""


NamespaceReader = Callable[[str], str | None]
"""A namespace's `targets.yaml` from its Secret `specfleet-notifications` (None: no such Secret); raises on a
Secret that cannot be read (forbidden, not text)."""


@dataclass
class Notifier:
    own: Targets = field(default_factory=lambda: Targets((), ()))
    """The operator's own targets (`specfleet run --notifications-config`)."""
    read_namespace: NamespaceReader | None = None
    """None: namespaces' Secrets are not read (`--namespace-notifications` off)."""
    allowed: Sequence[UrlPrefix] = ()
    """The prefixes a namespace's target URLs must be under (`--allow-notification-url`)."""
    policy: DeliveryPolicy = field(default_factory=DeliveryPolicy)
    warn: Callable[[Fleet, str], None] | None = None
    """Tells a namespace what of its targets is refused (a Warning event on the fleet notified); blocking."""
    sinks: Mapping[str, Sink] = field(default_factory=lambda: dict(SINKS))
    queue_size: int = 256
    workers: int = 2
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    clock: Callable[[], float] = time.monotonic
    scrubber: Scrubber = SCRUBBER
    _threads: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(SENDING_THREADS, thread_name_prefix="specfleet-notify")
    )
    _slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(SENDING_THREADS))
    _queue: "asyncio.Queue[Notification] | None" = None
    _tasks: list["asyncio.Task[None]"] = field(default_factory=list)
    _namespaces: dict[str, tuple[float, Targets]] = field(default_factory=dict)
    _said: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        for target in self.own.targets:
            self.scrubber.add(target.url)
        own = [t for t in self.own.targets if self._refused(t) is None]
        self.own = Targets(tuple(own), self.own.refusals)
        for refusal in self.own.refusals:
            logger.warning("notifications: %s", refusal)

    def _sink_refusal(self, target: Target) -> str | None:
        refused = self.sinks[target.sink].refusal(target.url)
        return None if refused is None else f"{target.source}: {refused}; {target.shown} is not sent to"

    def _refused(self, target: Target) -> str | None:
        refused = self._sink_refusal(target)
        if refused is not None:
            self._say(f"notifications: {refused}")
        return refused

    def _say(self, line: str) -> bool:
        """A configuration problem, logged once (it stays until someone fixes it); whether it is new."""
        if line in self._said:
            return False
        self._said.add(line)
        logger.warning("%s", line)
        return True

    @property
    def queue(self) -> "asyncio.Queue[Notification]":
        if self._queue is None:
            self._queue = asyncio.Queue(self.queue_size)
        return self._queue

    def start(self) -> None:
        self._tasks.extend(asyncio.create_task(self._work()) for _ in range(self.workers))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def _in_thread(self, call: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._threads, functools.partial(call, *args))

    def offer(self, notification: Notification) -> None:
        """Queue a notification for delivery; never waits (on the event loop, from a reconcile)."""
        try:
            self.queue.put_nowait(notification)
        except asyncio.QueueFull:
            NOTIFICATIONS_DROPPED.labels("queue_full").inc()
            logger.warning(
                "notifications: queue full (%d): %s of %s/%s dropped",
                self.queue_size,
                notification.transition.value,
                notification.fleet.namespace,
                notification.fleet.name,
            )

    async def _work(self) -> None:
        while True:
            notification = await self.queue.get()
            try:
                await self.deliver(notification)
            except Exception:  # a bug must not stop the worker: the next notification still goes
                logger.exception("notifications: delivering %s failed", notification.transition.value)
            finally:
                self.queue.task_done()

    async def deliver(self, notification: Notification) -> None:
        """Send one notification to every target that wants it, at once; returns when each sent or gave up."""
        targets = [t for t in await self.targets_for(notification.fleet) if t.wants(notification.transition)]
        await asyncio.gather(*(self._send(notification, target) for target in targets))

    async def targets_for(self, fleet: Fleet) -> list[Target]:
        return [*self.own.targets, *(await self._namespace_targets(fleet)).targets]

    async def _namespace_targets(self, fleet: Fleet) -> Targets:
        """The namespace's own targets, read again at most every SECRET_TTL_SECONDS. What is refused is logged
        once and told to the namespace as a Warning event on `fleet` (`warn`): its tenant cannot read our log."""
        namespace = fleet.namespace
        if self.read_namespace is None:
            return Targets((), ())
        cached = self._namespaces.get(namespace)
        if cached is not None and self.clock() - cached[0] < SECRET_TTL_SECONDS:
            return cached[1]
        source = f"{namespace}/{NAMESPACE_SECRET}"
        try:
            text = await self._in_thread(self.read_namespace, namespace)
        except Exception as error:  # fail closed: that namespace's targets are not guessed at
            NOTIFICATIONS_DROPPED.labels("secret_unreadable").inc()
            targets = Targets((), (f"Secret {source}: {error}; its targets are not sent to",))
        else:
            parsed = parse_targets(text or "", source, self.sinks.keys(), self.allowed)
            for target in parsed.targets:
                self.scrubber.add(target.url)
            refused = {t: self._sink_refusal(t) for t in parsed.targets}
            kept = tuple(t for t, why in refused.items() if why is None)
            targets = Targets(kept, (*parsed.refusals, *(why for why in refused.values() if why is not None)))
        for problem in targets.refusals:
            if self._say(f"notifications: {problem}") and self.warn is not None:
                try:
                    await self._in_thread(self.warn, fleet, problem)
                except Exception as error:  # the log said it; the event is a courtesy to the tenant
                    logger.warning(
                        "notifications: could not tell %s/%s: %s", namespace, fleet.name, type(error).__name__
                    )
        self._namespaces[namespace] = (self.clock(), targets)
        return targets

    async def _send(self, notification: Notification, target: Target) -> bool:
        """Attempts with backoff until one succeeds or `policy.attempts` failed; whether it was delivered."""
        sink, policy, transition = self.sinks[target.sink], self.policy, notification.transition.value
        fleet = f"{notification.fleet.namespace}/{notification.fleet.name}"
        for attempt in range(1, policy.attempts + 1):
            try:
                async with self._slots:  # the timeout counts from the attempt's start, not its wait for a thread
                    await asyncio.wait_for(
                        self._in_thread(sink.send, notification, target.url, policy.timeout),
                        # the sink's own timeout bounds connecting and each read; this bounds the whole attempt
                        timeout=2 * policy.timeout + 1,
                    )
            except (DeliveryError, TimeoutError) as error:
                said = str(error) or f"no answer within {2 * policy.timeout + 1:g} s"
                if attempt == policy.attempts:
                    NOTIFICATIONS_FAILED.labels(target.sink, transition).inc()
                    logger.warning(
                        "notifications: %s of %s to %s: %s; given up after %d attempts",
                        transition, fleet, target.shown, said, attempt,
                    )  # fmt: skip
                    return False
                wait = policy.wait(attempt)
                NOTIFICATION_RETRIES.labels(target.sink).inc()
                logger.info(
                    "notifications: %s of %s to %s: %s; attempt %d of %d again in %g s",
                    transition, fleet, target.shown, said, attempt + 1, policy.attempts, wait,
                )  # fmt: skip
                await self.sleep(wait)
            else:
                NOTIFICATIONS_SENT.labels(target.sink, transition).inc()
                logger.info("notifications: %s of %s sent to %s", transition, fleet, target.shown)
                return True
        return False
