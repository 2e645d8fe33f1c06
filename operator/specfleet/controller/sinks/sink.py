"""What a notification sink is: one module per service, behind this small interface, listed in `SINKS`.

As Argo Rollouts keeps a notification service behind one interface, the notifier knows only `Sink`: its name (the
`sink` a target names), whether a URL is one of its service's (`refusal`), and `send`, which blocks (it runs in a
thread, under the notifier's per-attempt timeout) and raises `DeliveryError` for anything the retry should see.
"""

from abc import ABC, abstractmethod
from typing import ClassVar

from specfleet.notify.transitions import Notification


class DeliveryError(Exception):
    """One attempt failed; the message says how (a status code, a timeout), never the target's URL."""


class Sink(ABC):
    name: ClassVar[str]
    """What a target's `sink` says to choose it."""

    def refusal(self, url: str) -> str | None:
        """Why `url` cannot be a target of this sink (None: it can); never repeats the URL."""
        return None

    @abstractmethod
    def send(self, notification: Notification, url: str, timeout: float) -> None:
        """Deliver once, within `timeout` seconds per connection and read; raise DeliveryError on failure."""
