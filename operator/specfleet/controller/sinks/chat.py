"""What the chat sinks share: Apprise (a well-kept library for most chat services) sends the message."""

from typing import ClassVar

import apprise
from apprise.plugins.base import NotifyBase

from specfleet.controller.sinks.sink import DeliveryError, Sink
from specfleet.notify.payload import chat_message
from specfleet.notify.transitions import Notification, Transition

WARNINGS = frozenset({Transition.ROLLED_BACK, Transition.ABORTED, Transition.DRIFT, Transition.GATE_WAITING})


class AppriseSink(Sink):
    """A chat service Apprise knows: its native webhook URL (`https://hooks.slack.com/services/...`) or Apprise's
    own (`slack://...`), which must name this sink's service and no other."""

    service: ClassVar[type[NotifyBase]]
    """Apprise's plugin class for the service."""
    said: ClassVar[str]
    """The URLs it takes, for a refusal."""

    def _plugin(self, url: str) -> NotifyBase | None:
        plugin = apprise.Apprise.instantiate(url, suppress_exceptions=True)
        return plugin if isinstance(plugin, self.service) else None

    def refusal(self, url: str) -> str | None:
        return None if self._plugin(url) is not None else f"not a {self.said} URL Apprise knows"

    def send(self, notification: Notification, url: str, timeout: float) -> None:
        plugin = self._plugin(url)
        if plugin is None:
            raise DeliveryError(f"not a {self.said} URL Apprise knows")
        plugin.socket_connect_timeout = timeout
        plugin.socket_read_timeout = timeout
        # No redirects: an admitted host must not hand the message (and the URL's secret) on to one that is not.
        plugin.redirects = False
        title, body = chat_message(notification)
        kind = apprise.NotifyType.WARNING if notification.transition in WARNINGS else apprise.NotifyType.INFO
        if not plugin.notify(body=body, title=title, notify_type=kind, body_format=apprise.NotifyFormat.MARKDOWN):
            raise DeliveryError(f"{self.said} did not take it (Apprise's warning says why)")
