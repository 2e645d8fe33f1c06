"""Slack: an incoming webhook (`https://hooks.slack.com/services/T.../B.../...`) or Apprise's `slack://` URL."""

from apprise.plugins.slack import NotifySlack

from specfleet.controller.sinks.chat import AppriseSink


class Slack(AppriseSink):
    name = "slack"
    service = NotifySlack
    said = "Slack"


SLACK = Slack()
