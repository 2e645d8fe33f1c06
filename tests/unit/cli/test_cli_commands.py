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
