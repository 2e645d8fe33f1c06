"""Microsoft Teams: a Teams workflow's webhook (Power Automate / Logic Apps `.../workflows/.../invoke?...`, which
replaced Office 365 connectors) or Apprise's `workflow://` URL; the message arrives as an Adaptive Card."""

from apprise.plugins.workflows import NotifyWorkflows

from specfleet.controller.sinks.chat import AppriseSink


class Teams(AppriseSink):
    name = "teams"
    service = NotifyWorkflows
    said = "Microsoft Teams workflow"


TEAMS = Teams()
