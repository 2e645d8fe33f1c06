"""A generic webhook: the notification as a CloudEvent in structured mode (`application/cloudevents+json`)."""

import requests

from specfleet.controller.sinks.sink import DeliveryError, Sink
from specfleet.notify.payload import structured
from specfleet.notify.transitions import Notification


class Webhook(Sink):
    name = "webhook"

    def refusal(self, url: str) -> str | None:
        scheme = url.partition("://")[0].lower()
        return None if scheme in ("http", "https") else "a webhook URL is http:// or https://"

    def send(self, notification: Notification, url: str, timeout: float) -> None:
        message = structured(notification)
        try:
            # No redirects: an admitted host must not hand the request (and the event) on to one that is not.
            response = requests.post(
                url, data=message.body, headers=message.headers, timeout=timeout, allow_redirects=False
            )
        except requests.Timeout:
            raise DeliveryError(f"no answer within {timeout:g} s") from None
        except requests.RequestException as error:
            raise DeliveryError(f"could not be reached ({type(error).__name__})") from None
        if not 200 <= response.status_code < 300:
            raise DeliveryError(f"answered HTTP {response.status_code}")


WEBHOOK = Webhook()
