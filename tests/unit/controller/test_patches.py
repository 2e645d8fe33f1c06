"""Write avoidance: drift detection and minimal merge patches."""

from specfleet.patches import contains, merge_patch, stamped


def test_server_defaults_do_not_count_as_drift() -> None:
    desired = {"spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "vllm", "image": "a"}]}}}}
    observed = {
        "spec": {
            "replicas": 2,
            "progressDeadlineSeconds": 600,
            "template": {"spec": {"containers": [{"name": "vllm", "image": "a", "imagePullPolicy": "IfNotPresent"}]}},
        }
    }
    assert contains(observed, desired)


def test_a_changed_value_or_list_length_is_drift() -> None:
    desired = {"spec": {"replicas": 2, "args": ["a", "b"]}}
    assert not contains({"spec": {"replicas": 3, "args": ["a", "b"]}}, desired)
    assert not contains({"spec": {"replicas": 2, "args": ["a", "b", "c"]}}, desired)
    assert not contains({"spec": {"replicas": 2}}, desired)


def test_merge_patch_is_empty_when_nothing_changed() -> None:
    status = {"phase": "Healthy", "readyReplicas": {"stable": 2}, "history": [{"revision": "a"}]}
    assert merge_patch(status, dict(status)) == {}


def test_merge_patch_nulls_removed_keys_at_every_depth() -> None:
    old = {"phase": "Progressing", "canaryRevision": "b", "lastAnalysis": {"canary": {"acceptanceRate": 0.7}}}
    new = {"phase": "Healthy", "lastAnalysis": {"canary": {}}}
    assert merge_patch(old, new) == {
        "phase": "Healthy",
        "canaryRevision": None,
        "lastAnalysis": {"canary": {"acceptanceRate": None}},
    }


def test_merge_patch_replaces_lists_whole() -> None:
    assert merge_patch({"history": [1, 2]}, {"history": [2, 3]}) == {"history": [2, 3]}


def test_a_dropped_key_changes_the_stamp_so_it_is_applied_again() -> None:
    with_track = {"metadata": {"name": "s"}, "spec": {"selector": {"name": "x", "track": "stable"}}}
    without = {"metadata": {"name": "s"}, "spec": {"selector": {"name": "x"}}}
    observed = stamped(with_track)
    assert contains(observed, stamped(with_track))
    assert contains(observed, without)  # a plain subset check would call this "no drift"
    assert not contains(observed, stamped(without))
