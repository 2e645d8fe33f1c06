"""What a notification says: a CloudEvent (structured JSON, for a generic webhook) and a chat message (Slack, Teams).

The CloudEvent's `id` is a hash of the notification's key, so a receiver can drop a retry it already has; its
`source` is the fleet's API path and its `subject` the fleet's name, as Kubernetes event sources name objects.
"""

import hashlib
from typing import Any

from cloudevents.core.bindings.http import HTTPMessage, to_structured_event
from cloudevents.core.v1.event import CloudEvent

from specfleet.api.vocabulary import GROUP, PLURAL, VERSION
from specfleet.notify.transitions import Config, Notification

TYPE_PREFIX = "io.specfleet.rollout."
"""A CloudEvent's `type` is this and the transition (`io.specfleet.rollout.RolledBack`)."""
CONTENT_TYPE = "application/cloudevents+json"


def event_id(notification: Notification) -> str:
    return hashlib.sha256(notification.key.encode()).hexdigest()[:32]


def data(notification: Notification) -> dict[str, Any]:
    """The event's data: the transition, the fleet, both configs and the judge's reasons."""
    fleet = notification.fleet
    return {
        "transition": notification.transition.value,
        "message": notification.message,
        "fleet": {
            "namespace": fleet.namespace,
            "name": fleet.name,
            "uid": fleet.uid,
            "generation": fleet.generation,
        },
        "phase": notification.phase.value,
        "step": None if notification.step is None else notification.step + 1,
        "steps": notification.steps,
        "canaryWeight": notification.weight,
        "stable": _config(notification.stable),
        "canary": _config(notification.canary),
        "reasons": list(notification.reasons),
    }


def _config(config: Config | None) -> dict[str, str] | None:
    return None if config is None else {"revision": config.revision, "summary": config.summary}


def cloud_event(notification: Notification) -> CloudEvent:
    fleet = notification.fleet
    return CloudEvent(
        attributes={
            "specversion": "1.0",
            "id": event_id(notification),
            "source": f"/apis/{GROUP}/{VERSION}/namespaces/{fleet.namespace}/{PLURAL}/{fleet.name}",
            "type": f"{TYPE_PREFIX}{notification.transition.value}",
            "subject": fleet.name,
            "time": notification.time,
            "datacontenttype": "application/json",
        },
        data=data(notification),
    )


def structured(notification: Notification) -> HTTPMessage:
    """The HTTP request of a CloudEvent in structured mode: one JSON object, `application/cloudevents+json`."""
    return to_structured_event(cloud_event(notification))


def chat_message(notification: Notification) -> tuple[str, str]:
    """A title and a Markdown body for a chat service."""
    fleet, n = notification.fleet, notification
    title = f"{n.transition.value}: {fleet.namespace}/{fleet.name}"
    lines = [n.message, ""]
    if n.stable is not None:
        lines.append(f"- stable: `{n.stable.revision}` {n.stable.summary}".rstrip())
    if n.canary is not None:
        lines.append(f"- canary: `{n.canary.revision}` {n.canary.summary}".rstrip())
    if n.step is not None:
        lines.append(f"- step {n.step + 1}/{n.steps}, canary weight {n.weight}%, phase {n.phase.value}")
    else:
        lines.append(f"- phase {n.phase.value}")
    lines.extend(f"- {reason}" for reason in n.reasons)
    return title, "\n".join(lines)
