"""The notifier's delivery policy with stand-in sinks (the loopback tests send for real): retries with exponential
backoff then giving up, counted; a slow attempt cut at its timeout; a full queue drops instead of waiting; a
namespace's Secret unreadable fails closed for its targets only; no log line holds a target's token."""

import asyncio
import logging
import threading
from dataclasses import dataclass, field

import pytest
from prometheus_client import REGISTRY

from specfleet.controller.notifier import DeliveryPolicy, Notifier
from specfleet.controller.sinks import DeliveryError, Sink
from specfleet.notify.targets import parse_targets
from specfleet.notify.transitions import Notification, Transition
from specfleet.reach import parse_prefix

from notifykit import ROLLED_BACK

TOKEN = "T0KENsecret0123456789"


@dataclass
class StandInSink(Sink):
    """Fails the first `failures` attempts (a down receiver), or takes `seconds` per attempt (a slow one)."""

    name = "webhook"
    failures: int = 0
    seconds: float = 0.0
    attempts: list[str] = field(default_factory=list)

    def send(self, notification: Notification, url: str, timeout: float) -> None:
        self.attempts.append(url)
        if self.seconds:
            threading.Event().wait(self.seconds)
        if len(self.attempts) <= self.failures:
            raise DeliveryError(f"could not be reached (ConnectionRefusedError at {url})")


def counter(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def notifier(sink: Sink, policy: DeliveryPolicy, **more: object) -> tuple[Notifier, list[float]]:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    own = parse_targets(f"targets: [{{sink: webhook, url: 'https://hooks.example/{TOKEN}'}}]", "operator", ["webhook"])
    return Notifier(own, policy=policy, sinks={"webhook": sink}, sleep=sleep, **more), waits  # type: ignore[arg-type]


def test_a_receiver_down_is_retried_with_doubling_waits_then_given_up_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = StandInSink(failures=99)
    note, waits = notifier(sink, DeliveryPolicy(attempts=5, backoff=1.0, backoff_cap=5.0))
    failed = counter("specfleet_notifications_failed_total", sink="webhook", transition="RolledBack")
    with caplog.at_level(logging.DEBUG):
        asyncio.run(note.deliver(ROLLED_BACK))
    assert len(sink.attempts) == 5 and waits == [1.0, 2.0, 4.0, 5.0]
    assert counter("specfleet_notifications_failed_total", sink="webhook", transition="RolledBack") == failed + 1
    assert "given up after 5 attempts" in caplog.text and "https://hooks.example/[…]" in caplog.text
    assert TOKEN not in caplog.text


def test_a_receiver_back_after_two_failures_gets_it_once() -> None:
    sink = StandInSink(failures=2)
    note, waits = notifier(sink, DeliveryPolicy(attempts=5, backoff=0.5))
    sent = counter("specfleet_notifications_sent_total", sink="webhook", transition="RolledBack")
    asyncio.run(note.deliver(ROLLED_BACK))
    assert len(sink.attempts) == 3 and waits == [0.5, 1.0]
    assert counter("specfleet_notifications_sent_total", sink="webhook", transition="RolledBack") == sent + 1


def test_an_attempt_slower_than_its_timeout_is_cut_and_retried() -> None:
    sink = StandInSink(seconds=1.5)
    note, waits = notifier(sink, DeliveryPolicy(attempts=2, timeout=0.1, backoff=0.1))
    asyncio.run(note.deliver(ROLLED_BACK))
    assert len(sink.attempts) == 2 and waits == [0.1]  # each attempt cut at 2 x 0.1 + 1 s, not 1.5 s


def test_a_full_queue_drops_and_counts_instead_of_waiting() -> None:
    note, _ = notifier(StandInSink(), DeliveryPolicy(), queue_size=2)
    dropped = counter("specfleet_notifications_dropped_total", reason="queue_full")

    async def offer_three() -> int:
        for _ in range(3):
            note.offer(ROLLED_BACK)
        return note.queue.qsize()

    assert asyncio.run(offer_three()) == 2
    assert counter("specfleet_notifications_dropped_total", reason="queue_full") == dropped + 1


def test_an_unreadable_namespace_secret_fails_closed_for_its_targets_only(caplog: pytest.LogCaptureFixture) -> None:
    def forbidden(namespace: str) -> str | None:
        raise PermissionError(f"Secret {namespace}/specfleet-notifications: forbidden")

    sink = StandInSink()
    note, _ = notifier(sink, DeliveryPolicy(), read_namespace=forbidden)
    with caplog.at_level(logging.WARNING):
        asyncio.run(note.deliver(ROLLED_BACK))
        asyncio.run(note.deliver(ROLLED_BACK))
    assert sink.attempts == [f"https://hooks.example/{TOKEN}"] * 2  # the operator's own target still served
    assert caplog.text.count("its targets are not sent to") == 1  # said once, not per notification


def test_a_namespace_target_off_the_allow_list_is_never_sent_to_and_an_admitted_one_is() -> None:
    inside = "http://kube-apiserver.default.svc/api/" + TOKEN
    outside = "https://events.example.com/specfleet/" + TOKEN
    text = f"targets: [{{sink: webhook, url: '{inside}'}}, {{sink: webhook, url: '{outside}'}}]"
    sink, told = StandInSink(), []
    note, _ = notifier(
        sink,
        DeliveryPolicy(),
        read_namespace=lambda namespace: text,
        allowed=(parse_prefix("https://events.example.com/specfleet"),),
        warn=lambda fleet, problem: told.append((fleet.name, problem)),
    )
    asyncio.run(note.deliver(ROLLED_BACK))
    note.clock = lambda: 1e9  # the Secret is read again, its refusal found again: told once
    asyncio.run(note.deliver(ROLLED_BACK))
    assert sink.attempts == [f"https://hooks.example/{TOKEN}", outside] * 2
    ((fleet, problem),) = told
    assert (
        fleet == "llama-eagle3" and "targets[0].url 'http://kube-apiserver.default.svc/[…]' is not admitted" in problem
    )
    assert TOKEN not in problem


def test_a_target_filtering_transitions_gets_only_those() -> None:
    sink = StandInSink()
    note, _ = notifier(sink, DeliveryPolicy())
    note.own = parse_targets(
        "targets: [{sink: webhook, url: 'https://a.example/', transitions: [Promoted]}]", "operator", ["webhook"]
    )
    asyncio.run(note.deliver(ROLLED_BACK))
    promoted = Notification(**{**ROLLED_BACK.__dict__, "transition": Transition.PROMOTED})
    asyncio.run(note.deliver(promoted))
    assert sink.attempts == ["https://a.example/"]


def test_a_librarys_log_line_holding_a_target_url_is_scrubbed(caplog: pytest.LogCaptureFixture) -> None:
    notifier(StandInSink(), DeliveryPolicy())
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("urllib3.connectionpool").debug('"POST /%s HTTP/1.1" 500', TOKEN)
        logging.getLogger("apprise").warning("Failed to send to https://hooks.example/%s", TOKEN)
    assert TOKEN not in caplog.text and caplog.text.count("[…]") == 2


def test_the_plain_words_of_a_target_url_are_left_in_other_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    own = parse_targets(
        f"targets: [{{sink: webhook, url: 'https://events.example.com/specfleet/hooks/{TOKEN}'}}]",
        "operator",
        ["webhook"],
    )
    Notifier(own, sinks={"webhook": StandInSink()})
    with caplog.at_level(logging.INFO):
        logging.getLogger("specfleet.shards").info("label specfleet.io/shard names no shard; see /specfleet/hooks")
        logging.getLogger("urllib3.connectionpool").info('"POST /specfleet/hooks/%s HTTP/1.1" 200', TOKEN)
    shards, posted = (r.getMessage() for r in caplog.records)
    assert shards == "label specfleet.io/shard names no shard; see /specfleet/hooks"
    assert posted == '"POST […] HTTP/1.1" 200'
