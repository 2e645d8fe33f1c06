"""What a notification says: a CloudEvent that the CloudEvents SDK reads back with every required attribute, the
same id on every retry, and a chat message naming both configs and the judge's reasons."""

import json

from cloudevents.core.bindings.http import HTTPMessage, from_structured_event

from specfleet.notify.payload import CONTENT_TYPE, chat_message, data, structured
from specfleet.notify.transitions import Notification, Transition

from notifykit import ROLLED_BACK


def test_the_webhook_body_is_a_structured_cloudevent_with_the_spec_attributes() -> None:
    message = structured(ROLLED_BACK)
    assert message.headers["content-type"] == CONTENT_TYPE
    event = from_structured_event(HTTPMessage(message.headers, message.body))
    attributes = event.get_attributes()
    assert attributes["specversion"] == "1.0"
    assert attributes["type"] == "io.specfleet.rollout.RolledBack"
    assert attributes["source"] == "/apis/specfleet.io/v1alpha1/namespaces/team-a/speculativedeployments/llama-eagle3"
    assert attributes["subject"] == "llama-eagle3" and attributes["datacontenttype"] == "application/json"
    assert event.get_time() == ROLLED_BACK.time
    body = json.loads(message.body)
    assert body["data"] == data(ROLLED_BACK)
    assert body["data"]["fleet"] == {"namespace": "team-a", "name": "llama-eagle3", "uid": "8d1c-uid", "generation": 4}
    assert body["data"]["stable"] == {"revision": "6f1e2d", "summary": "eagle3 k=4"}
    assert body["data"]["canary"] == {"revision": "20c9a9", "summary": "eagle3 k=3"}
    assert body["data"]["reasons"] == list(ROLLED_BACK.reasons) and body["data"]["step"] == 1


def test_a_retry_carries_the_same_id_and_another_transition_another() -> None:
    first, again = (json.loads(structured(ROLLED_BACK).body)["id"] for _ in range(2))
    assert first == again
    promoted = Notification(**{**ROLLED_BACK.__dict__, "transition": Transition.PROMOTED})
    assert json.loads(structured(promoted).body)["id"] != first


def test_the_chat_message_names_the_fleet_both_configs_and_the_reasons() -> None:
    title, body = chat_message(ROLLED_BACK)
    assert title == "RolledBack: team-a/llama-eagle3"
    assert "stable: `6f1e2d` eagle3 k=4" in body and "canary: `20c9a9` eagle3 k=3" in body
    assert "upper bound 0.35 < floor 0.6" in body and "step 1/2" in body
