"""The short version of benchmarks/pass_cost.py: the reconciler decides once a pass, and again only with an
answer that can change the decision (an analysis, a fleet look, a GPU room too small, a watch that found a
failure). Counts, never times."""

import pass_cost


def test_a_pass_decides_again_only_after_an_analysis_or_a_fleet_look() -> None:
    cost = pass_cost.measure(rollouts=1)
    analyses, looks = cost.asked.get("analysis", 0), cost.asked.get("fleet look", 0)
    assert analyses >= 2  # each of the two steps was judged before the canary was promoted
    assert looks >= 1  # and the Healthy fleet was looked at
    assert cost.asked.get("room that fits", 0) >= 1  # a step's pods were checked against the nodes' room
    assert cost.asked.get("room too small or unknown", 0) == 0
    assert cost.asked.get("watch", 0) >= analyses  # the live canary's scrapes were watched between analyses
    assert cost.calls == cost.passes + analyses + looks  # a room that fits, a watch that found nothing: not again


def test_a_pass_checks_every_rule_of_the_spec_once() -> None:
    cost = pass_cost.measure(rollouts=1)
    assert cost.checks["every rule (spec_problems)"] == cost.passes
