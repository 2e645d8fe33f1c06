"""`specfleet promote|abort|retry` refuse, and write nothing, when there is nothing to act on; otherwise they
bind the command to the canary (or rejected revision) they were given for, and write only over the
version they read."""

import pytest
from typer.testing import CliRunner

from specfleet.api.vocabulary import command_target
from specfleet.cli import rollouts
from specfleet.cli.main import app

from clikit import FakeApi

runner = CliRunner()


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> FakeApi:
    fake = FakeApi(*request.param)
    monkeypatch.setattr(rollouts, "connect", lambda *a: rollouts.Cluster(fake, "ns"))  # type: ignore[arg-type]
    return fake


HEALTHY = {"phase": "Healthy", "stableRevision": "aaa"}
CANARY = {"phase": "Paused", "stableRevision": "aaa", "canaryRevision": "bbb", "currentStep": 0}
PROMOTING = {"phase": "Progressing", "stableRevision": "bbb", "canaryRevision": "bbb"}
REJECTED = {"phase": "RolledBack", "stableRevision": "aaa", "rejectedRevision": "bbb"}


@pytest.mark.parametrize(
    ("api", "command"),
    [((HEALTHY,), "promote"), ((HEALTHY,), "abort"), ((PROMOTING,), "promote"), ((HEALTHY,), "retry")],
    indirect=["api"],
)
def test_a_command_with_nothing_to_act_on_says_so_and_writes_nothing(api: FakeApi, command: str) -> None:
    result = runner.invoke(app, [command, "llama"])
    assert result.exit_code == 1
    assert "no canary" in result.stderr or "nothing to retry" in result.stderr
    assert api.patches == []


@pytest.mark.parametrize(
    ("api", "command", "bound"), [((CANARY, 1), "promote", "bbb"), ((REJECTED,), "retry", "bbb")], indirect=["api"]
)
def test_a_command_is_bound_to_what_it_was_given_for(api: FakeApi, command: str, bound: str) -> None:
    result = runner.invoke(app, [command, "llama"])
    assert result.exit_code == 0, result.output
    (patch,) = api.patches
    assert patch["metadata"]["resourceVersion"] == api.obj["metadata"]["resourceVersion"]
    (value,) = patch["metadata"]["annotations"].values()
    assert command_target(value) == bound


EAGLE = {"method": "eagle3", "model": "org/eagle3-head", "numSpeculativeTokens": 4}
FIRST = {"model": {"name": "org/target"}, "speculative": {"method": "ngram", "promptLookupMax": 4}}
PROMOTED_EAGLE = {
    "phase": "Healthy",
    "stableRevision": "bbb",
    "history": [
        {"revision": "aaa", "outcome": "Created", "serving": FIRST},
        {"revision": "bbb", "outcome": "Promoted", "serving": {**FIRST, "speculative": EAGLE}},
    ],
}


@pytest.mark.parametrize("api", [(PROMOTED_EAGLE,)], indirect=True)
def test_undo_returns_to_the_revision_the_fleet_was_created_with(api: FakeApi) -> None:
    api.obj["spec"] = {
        **FIRST,
        "speculative": EAGLE,
        "template": {"metadata": {"labels": {"team": "a"}}},
        "replicas": 4,
    }
    result = runner.invoke(app, ["undo", "llama"])
    assert result.exit_code == 0, result.output
    (patch,) = api.patches
    # a merge patch: the drafter's model and depth go (null), the template the first revision lacked goes
    assert patch["spec"]["speculative"] == {
        "method": "ngram", "model": None, "numSpeculativeTokens": None, "promptLookupMax": 4,
    }  # fmt: skip
    assert patch["spec"]["template"] is None and "replicas" not in patch["spec"]


@pytest.mark.parametrize("api", [({"phase": "Healthy", "stableRevision": "aaa", "history": []},)], indirect=True)
def test_undo_with_no_earlier_revision_says_so_and_writes_nothing(api: FakeApi) -> None:
    result = runner.invoke(app, ["undo", "llama"])
    assert result.exit_code == 1 and "served as stable" in result.stderr and api.patches == []


@pytest.mark.parametrize("api", [(CANARY,)], indirect=True)
def test_pause_and_resume_set_spec_paused(api: FakeApi) -> None:
    assert runner.invoke(app, ["pause", "llama"]).exit_code == 0
    assert runner.invoke(app, ["resume", "llama"]).exit_code == 0
    assert [p["spec"]["paused"] for p in api.patches] == [True, False]
