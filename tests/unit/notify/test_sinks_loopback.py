"""Each sink sending for real to a receiver on loopback (an aiohttp server): the webhook's CloudEvent, retried on a
receiver that is down or slow; Slack's and Teams' messages as Apprise posts them, over TLS (trustme's CA, trusted
through REQUESTS_CA_BUNDLE as any private CA would be). Slack's webhook host is fixed in Apprise, so the Slack test
points it at the receiver (a stand-in for hooks.slack.com); Teams' workflow URL takes a host."""

import asyncio
import json
import logging
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from apprise.plugins.slack import NotifySlack
from cloudevents.core.bindings.http import HTTPMessage, from_structured_event
from prometheus_client import REGISTRY

from specfleet.controller.notifier import DeliveryPolicy, Notifier
from specfleet.controller.sinks import SINKS
from specfleet.notify.payload import event_id
from specfleet.notify.targets import parse_targets

from notifykit import ROLLED_BACK
from receiverkit import dead_port, receiving

TOKEN = "TIiajkdnlazkcOXrIdevi7"
QUICK = DeliveryPolicy(attempts=3, timeout=2.0, backoff=0.05)


def notifier(sink: str, url: str, policy: DeliveryPolicy = QUICK) -> Notifier:
    own = parse_targets(f"targets: [{{sink: {sink}, url: '{url}'}}]", "operator", SINKS.keys())
    assert own.refusals == (), own.refusals
    return Notifier(own, policy=policy)


def failed(sink: str) -> float:
    labels = {"sink": sink, "transition": "RolledBack"}
    return REGISTRY.get_sample_value("specfleet_notifications_failed_total", labels) or 0.0


def test_the_webhook_receives_one_cloudevent_of_the_rollback(caplog: pytest.LogCaptureFixture) -> None:
    with receiving() as receiver, caplog.at_level(logging.DEBUG):
        asyncio.run(notifier("webhook", f"http://127.0.0.1:{receiver.port}/hook/{TOKEN}").deliver(ROLLED_BACK))
    (request,) = receiver.received
    assert request.path == f"/hook/{TOKEN}" and request.headers["Content-Type"] == "application/cloudevents+json"
    event = from_structured_event(HTTPMessage({"content-type": request.headers["Content-Type"]}, request.body))
    assert event.get_type() == "io.specfleet.rollout.RolledBack" and event.get_id() == event_id(ROLLED_BACK)
    assert event.get_data()["canary"] == {"revision": "20c9a9", "summary": "eagle3 k=3"}  # type: ignore[index]
    assert TOKEN not in caplog.text  # urllib3's debug line names the path it posts to: scrubbed


def test_a_webhook_that_is_down_is_tried_every_attempt_then_given_up(caplog: pytest.LogCaptureFixture) -> None:
    before = failed("webhook")
    with caplog.at_level(logging.INFO, logger="specfleet.notifier"):
        asyncio.run(notifier("webhook", f"http://127.0.0.1:{dead_port()}/hook/{TOKEN}").deliver(ROLLED_BACK))
    assert failed("webhook") == before + 1
    assert (
        caplog.text.count("could not be reached (ConnectionError)") == 3 and "given up after 3 attempts" in caplog.text
    )


def test_a_slow_webhook_is_cut_at_the_timeout_and_retried_with_the_same_event_id() -> None:
    policy = DeliveryPolicy(attempts=2, timeout=0.3, backoff=0.05)
    before = failed("webhook")
    with receiving(delay=3.0) as receiver:
        asyncio.run(notifier("webhook", f"http://127.0.0.1:{receiver.port}/hook", policy).deliver(ROLLED_BACK))
        received = receiver.wait_for(2, timeout=5)
    assert len(received) == 2 and len({json.loads(r.body)["id"] for r in received}) == 1
    assert failed("webhook") == before + 1


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, Path]:
    """A server context for 127.0.0.1 and the CA file a client trusts it with."""
    ca = trustme.CA()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    bundle = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    return context, bundle


@pytest.fixture
def trusted(tls: tuple[ssl.SSLContext, Path], monkeypatch: pytest.MonkeyPatch) -> Iterator[ssl.SSLContext]:
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tls[1]))
    yield tls[0]


def test_slack_gets_the_message_apprise_posts_to_an_incoming_webhook(
    trusted: ssl.SSLContext, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with receiving(tls=trusted) as receiver, caplog.at_level(logging.DEBUG):
        monkeypatch.setattr(NotifySlack, "webhook_url", f"https://127.0.0.1:{receiver.port}/services")
        url = f"https://hooks.slack.com/services/T1JJ3T3L2/A1BRTD4JD/{TOKEN}"
        asyncio.run(notifier("slack", url).deliver(ROLLED_BACK))
    (request,) = receiver.received
    assert request.path == f"/services/T1JJ3T3L2/A1BRTD4JD/{TOKEN}"
    posted = json.loads(request.body)
    text = json.dumps(posted)
    assert "RolledBack: team-a/llama-eagle3" in text and "eagle3 k=3" in text and "upper bound 0.35" in text
    assert TOKEN not in caplog.text


def test_teams_gets_an_adaptive_card_at_its_workflow(trusted: ssl.SSLContext, caplog: pytest.LogCaptureFixture) -> None:
    with receiving(tls=trusted) as receiver, caplog.at_level(logging.DEBUG):
        url = f"workflow://127.0.0.1:{receiver.port}/a1b2c3workflow/{TOKEN}"
        asyncio.run(notifier("teams", url).deliver(ROLLED_BACK))
    (request,) = receiver.received
    assert request.path == "/workflows/a1b2c3workflow/triggers/manual/paths/invoke" and request.query["sig"] == TOKEN
    posted = json.loads(request.body)
    (attachment,) = posted["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    text = json.dumps(attachment["content"])
    assert "RolledBack: team-a/llama-eagle3" in text and "eagle3 k=4" in text
    assert TOKEN not in caplog.text


def test_a_url_of_another_service_is_refused_by_the_chat_sink() -> None:
    assert SINKS["teams"].refusal(f"https://hooks.slack.com/services/T1JJ3T3L2/A1BRTD4JD/{TOKEN}") is not None
    assert SINKS["slack"].refusal(f"https://hooks.slack.com/services/T1JJ3T3L2/A1BRTD4JD/{TOKEN}") is None
    assert SINKS["webhook"].refusal("file:///etc/passwd") is not None


@pytest.mark.parametrize("sink", ["webhook", "teams"])
def test_a_receiver_that_redirects_does_not_hand_the_event_to_another_host(
    sink: str, trusted: ssl.SSLContext, caplog: pytest.LogCaptureFixture
) -> None:
    before = failed(sink)
    with receiving(tls=trusted) as elsewhere:
        with receiving(tls=trusted, redirect_to=f"https://127.0.0.1:{elsewhere.port}/inside") as admitted:
            url = {
                "webhook": f"https://127.0.0.1:{admitted.port}/hook/{TOKEN}",
                "teams": f"workflow://127.0.0.1:{admitted.port}/a1b2c3workflow/{TOKEN}",
            }[sink]
            with caplog.at_level(logging.DEBUG):
                asyncio.run(
                    notifier(sink, url, DeliveryPolicy(attempts=1, timeout=2.0, backoff=0.05)).deliver(ROLLED_BACK)
                )
        assert len(admitted.received) == 1 and elsewhere.received == []
    assert failed(sink) == before + 1 and TOKEN not in caplog.text
