"""The notification sinks, by the name a target gives (`sink: webhook`); a new one is a module here and a line."""

from specfleet.controller.sinks.sink import DeliveryError, Sink
from specfleet.controller.sinks.slack import SLACK
from specfleet.controller.sinks.teams import TEAMS
from specfleet.controller.sinks.webhook import WEBHOOK

SINKS: dict[str, Sink] = {sink.name: sink for sink in (WEBHOOK, SLACK, TEAMS)}

__all__ = ["SINKS", "DeliveryError", "Sink"]
