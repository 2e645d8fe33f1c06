"""The Argo CD health check and resource actions (gitops/argocd), run by a real Lua 5.1 interpreter (Argo CD's
gopher-lua speaks 5.1) on the fleets recorded from the dev cluster in each phase: the health each phase shows,
and each action's object against what `kubectl specfleet <command>` writes."""

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml
from lupa import lua51

from specfleet.api.vocabulary import PROMOTE_FULL, Command
from specfleet.cli.rollouts import command_annotation, paused_patch

from gitopskit import ARGOCD, ARGOCD_HEALTH, KIND_DIR, of_a_newer_spec, recorded
from repokit import ROOT

NOW = datetime(2026, 12, 4, 12, 30, 5, tzinfo=UTC)
ACTIONS = {
    "promote": (Command.PROMOTE, "step"),
    "promote-full": (Command.PROMOTE, PROMOTE_FULL),
    "abort": (Command.ABORT, "user"),
    "retry": (Command.RETRY, "user"),
}
"""The actions that write a command annotation, and the command and value the CLI writes for each."""


def run(script: str, obj: dict[str, Any]) -> Any:
    """The script's result with `obj` as Argo CD passes it (a global table), the clock stopped at NOW."""
    lua = lua51.LuaRuntime(unpack_returned_tuples=True)
    lua.execute(f"local real = os.date; os.date = function(f, t) return real(f, t or {int(NOW.timestamp())}) end")
    lua.globals().obj = to_lua(lua, obj)
    return from_lua(lua.execute(script))


def to_lua(lua: Any, value: Any) -> Any:
    if isinstance(value, dict):
        return lua.table_from({k: to_lua(lua, v) for k, v in value.items()})
    if isinstance(value, list):
        return lua.table_from([to_lua(lua, v) for v in value])
    return value


def from_lua(value: Any) -> Any:
    if lua51.lua_type(value) != "table":
        return value
    items = dict(value.items())
    if items and all(isinstance(k, int) for k in items) and sorted(items) == list(range(1, len(items) + 1)):
        return [from_lua(items[k]) for k in sorted(items)]
    return {k: from_lua(v) for k, v in items.items()}


def as_lua_returns(value: Any) -> Any:
    """`value` as it comes back from Lua, where an empty list and an empty mapping are one empty table."""
    if isinstance(value, dict):
        return {k: as_lua_returns(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_lua_returns(v) for v in value] if value else {}
    return value


def health(obj: dict[str, Any]) -> dict[str, str]:
    result: dict[str, str] = run((KIND_DIR / "health.lua").read_text(), obj)
    return result


@pytest.mark.parametrize("phase", sorted(ARGOCD_HEALTH))
def test_each_recorded_phase_shows_its_health_with_the_operators_reason(phase: str) -> None:
    shown = health(recorded(phase))
    assert shown["status"] == ARGOCD_HEALTH[phase], shown
    assert shown["message"]


def test_a_status_of_an_older_spec_or_none_is_progressing() -> None:
    for phase in ARGOCD_HEALTH:
        assert health(of_a_newer_spec(phase))["status"] == "Progressing", phase
    without_status = {k: v for k, v in recorded("healthy").items() if k != "status"}
    assert health(without_status)["status"] == "Progressing"


@pytest.mark.parametrize("phase", sorted(ARGOCD_HEALTH))
def test_discovery_offers_what_the_cli_would_act_on(phase: str) -> None:
    obj = recorded(phase)
    offered = run((KIND_DIR / "actions" / "discovery.lua").read_text(), obj)
    enabled = {name for name, action in offered.items() if not action["disabled"]}
    cli_acts = {
        name for name, (command, value) in ACTIONS.items() if command_annotation(command, value, obj["status"], NOW)
    }
    paused = bool(obj["spec"].get("paused"))
    assert enabled == cli_acts | {"resume" if paused else "pause"}


@pytest.mark.parametrize("phase", sorted(ARGOCD_HEALTH))
@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_each_command_action_writes_the_annotation_the_cli_writes(phase: str, action: str) -> None:
    obj = recorded(phase)
    command, value = ACTIONS[action]
    script = (KIND_DIR / "actions" / action / "action.lua").read_text()
    written = command_annotation(command, value, obj["status"], NOW)
    if written is None:
        with pytest.raises(lua51.LuaError, match="nothing written"):
            run(script, obj)
        return
    expected = copy.deepcopy(obj)
    expected["metadata"].setdefault("annotations", {})[written[0]] = written[1]
    assert run(script, obj) == as_lua_returns(expected)


@pytest.mark.parametrize("action", ["pause", "resume"])
def test_pause_and_resume_set_spec_paused_as_the_cli_does(action: str) -> None:
    obj = recorded("paused-at-gate")
    expected = copy.deepcopy(obj)
    expected["spec"].update(paused_patch(action == "pause")["spec"])
    assert run((KIND_DIR / "actions" / action / "action.lua").read_text(), obj) == as_lua_returns(expected)


def test_the_argocd_cm_snippet_carries_exactly_these_scripts() -> None:
    data = yaml.safe_load((ARGOCD / "argocd-cm.yaml").read_text())["data"]
    assert (
        data["resource.customizations.health.specfleet.io_SpeculativeDeployment"]
        == (KIND_DIR / "health.lua").read_text()
    )
    actions = yaml.safe_load(data["resource.customizations.actions.specfleet.io_SpeculativeDeployment"])
    assert actions["discovery.lua"] == (KIND_DIR / "actions" / "discovery.lua").read_text()
    scripts = {d["name"]: d["action.lua"] for d in actions["definitions"]}
    on_disk = {p.parent.name: p.read_text() for p in (KIND_DIR / "actions").glob("*/action.lua")}
    assert scripts == on_disk and set(scripts) == {*ACTIONS, "pause", "resume"}


def test_docs_show_the_argocd_cm_patch_as_it_is() -> None:
    assert (ARGOCD / "argocd-cm.yaml").read_text().rstrip() in (ROOT / "docs" / "gitops.md").read_text()
