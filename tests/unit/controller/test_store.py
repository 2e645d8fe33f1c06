"""The watch store keeps what the operator reads of each object, indexed by the fleet it belongs to."""

from specfleet.api.vocabulary import LABEL_NAME
from specfleet.controller.store import Store


def test_a_child_is_kept_under_its_fleet_without_its_managed_fields() -> None:
    pod = {
        "metadata": {
            "name": "llama-stable-0",
            "namespace": "team",
            "labels": {LABEL_NAME: "llama"},
            "managedFields": [{"manager": "kube-scheduler", "fieldsV1": {"f:status": {}}}],
        },
        "status": {"phase": "Running"},
    }
    store = Store()
    assert store.put_child("Pod", pod, deleted=False) == ("team", "llama")
    kept = store.children("Pod", ("team", "llama"))["llama-stable-0"]
    assert "managedFields" not in kept["metadata"] and kept["metadata"]["labels"] == {LABEL_NAME: "llama"}
    assert kept["status"] == {"phase": "Running"} and "managedFields" in pod["metadata"]  # the event's is untouched
    store.put_child("Pod", pod, deleted=True)
    assert store.children("Pod", ("team", "llama")) == {}
