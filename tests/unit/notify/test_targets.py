"""Where notifications may go: the operator's targets anywhere, a namespace's only under the admin's allow-list,
each refusal naming its field and never a URL's secret parts; hostile texts refused, never a traceback."""

import hypothesis.strategies as st
from hypothesis import given, settings

from specfleet.notify.targets import parse_targets, secret_parts
from specfleet.notify.transitions import Transition
from specfleet.reach import parse_prefix, redacted

SINKS = ("webhook", "slack", "teams")
ALLOWED = (parse_prefix("https://hooks.slack.com/services"), parse_prefix("https://events.example.com/specfleet"))
TOKEN = "XXXXtoken0123456789"
TENANT = "team-a/specfleet-notifications"


def test_the_operators_targets_go_anywhere_and_filter_by_transition() -> None:
    text = f"""
targets:
  - {{sink: webhook, url: "http://10.0.0.7:8080/hook/{TOKEN}", transitions: [RolledBack, Aborted]}}
  - {{sink: slack, url: "https://hooks.slack.com/services/T0/B0/{TOKEN}"}}
"""
    parsed = parse_targets(text, "operator", SINKS)
    assert parsed.refusals == ()
    webhook, slack = parsed.targets
    assert webhook.wants(Transition.ROLLED_BACK) and not webhook.wants(Transition.STEP_ADVANCED)
    assert all(slack.wants(t) for t in Transition)
    assert TOKEN not in repr(parsed) and TOKEN not in webhook.shown


def test_a_namespace_target_at_an_internal_host_is_refused_by_field_and_the_others_still_serve() -> None:
    text = f"""
targets:
  - {{sink: webhook, url: "http://10.0.0.7:8080/hook/{TOKEN}"}}
  - {{sink: webhook, url: "http://user:{TOKEN}@events.example.com/specfleet"}}
  - {{sink: slack, url: "https://hooks.slack.com/services/T0/B0/{TOKEN}"}}
  - {{sink: webhook, url: "https://events.example.com/specfleetX/{TOKEN}"}}
"""
    parsed = parse_targets(text, TENANT, SINKS, ALLOWED)
    assert [t.source for t in parsed.targets] == [f"{TENANT}#2"]
    internal, userinfo, sibling = parsed.refusals
    assert internal.startswith(f"{TENANT} targets.yaml: targets[0].url 'http://10.0.0.7:8080/[…]' is not admitted")
    assert "https://hooks.slack.com/services/" in internal and "--allow-notification-url" in internal
    assert "targets[1].url" in userinfo and "userinfo" in userinfo
    assert "targets[3].url" in sibling  # a prefix admits its own path segments only
    assert all(TOKEN not in r and "user" not in r.split("(")[0] for r in parsed.refusals)


def test_with_no_allow_list_no_namespace_target_is_taken() -> None:
    parsed = parse_targets("targets: [{sink: webhook, url: 'https://events.example.com/specfleet'}]", TENANT, SINKS, ())
    assert parsed.targets == () and "allow-list is empty" in parsed.refusals[0]


def test_a_teams_workflow_query_is_kept_and_never_shown() -> None:
    url = f"https://prod-00.westus.logic.azure.com:443/workflows/abc/triggers/manual/paths/invoke?sp=%2Frun&sig={TOKEN}"
    allowed = (parse_prefix("https://prod-00.westus.logic.azure.com/workflows"),)
    parsed = parse_targets(f"targets: [{{sink: teams, url: '{url}'}}]", TENANT, SINKS, allowed)
    (target,) = parsed.targets
    assert target.url == url and TOKEN not in target.shown
    assert redacted(url) == "https://prod-00.westus.logic.azure.com:443/[…]"


def test_schema_problems_name_their_field_and_never_echo_the_input() -> None:
    text = (
        f"targets: [{{sink: pager, url: 'https://x/{TOKEN}'}}, {{sink: webhook, url: 'https://x/{TOKEN}', extra: 1}}]"
    )
    parsed = parse_targets(text, TENANT, SINKS, ALLOWED)
    assert parsed.targets == ()
    assert parsed.refusals == (f"{TENANT} targets.yaml: targets[1].extra: Extra inputs are not permitted",)
    unknown = parse_targets(f"targets: [{{sink: pager, url: 'https://x/{TOKEN}'}}]", TENANT, SINKS, ALLOWED)
    assert unknown.refusals == (f"{TENANT} targets.yaml: targets[0].sink: 'pager' is none of slack, teams, webhook",)
    assert parse_targets("targets: [", TENANT, SINKS).refusals[0].startswith(f"{TENANT} targets.yaml: not YAML")
    assert (
        "transitions[0]"
        in parse_targets(
            "targets: [{sink: webhook, url: 'https://x', transitions: [Exploded]}]", TENANT, SINKS
        ).refusals[0]
    )


def test_redaction_keeps_the_host_and_drops_every_secret_part() -> None:
    assert redacted(f"https://user:{TOKEN}@hooks.slack.com/services/T/B/{TOKEN}?a={TOKEN}#f") == (
        "https://hooks.slack.com/[…]"
    )
    assert redacted(f"slack://{TOKEN}/B/{TOKEN}") == "slack://[…]"
    assert redacted("https://events.example.com") == "https://events.example.com/"
    assert redacted("not a url") == "[…]"
    assert TOKEN in secret_parts(f"https://x.example/hook/{TOKEN}?sig={TOKEN}")


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=80),
    st.sampled_from((*SINKS, "", "pager")),
)
def test_a_hostile_target_is_refused_by_field_or_admitted_never_a_traceback_nor_its_secret_shown(
    url: str, sink: str
) -> None:
    text = f"targets: [{{sink: {sink!r}, url: {url + TOKEN!r}}}]"
    parsed = parse_targets(text, TENANT, SINKS, ALLOWED)
    assert len(parsed.targets) + len(parsed.refusals) >= 1
    for refusal in parsed.refusals:
        assert refusal.startswith(f"{TENANT} targets.yaml: ")
        assert TOKEN not in refusal
    for target in parsed.targets:
        assert any(prefix.admits(parse_prefix(target.url.partition("?")[0])) for prefix in ALLOWED)
