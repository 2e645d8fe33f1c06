"""A simulated pair can be wrong on purpose: `divergence` makes its greedy answers differ from the plain model's
for a share of prompts, the same prompts (and positions) for every pod and run of the same config."""

import json
import urllib.request
from typing import Any

import pytest

from specfleet.judge.equivalence import compare
from specfleet_workshop.sim import Simulator, load_scenario
from specfleet_workshop.sim.answers import answer_token_ids, diverges
from specfleet_workshop.sim.scenario import ScenarioError

from simkit import BAD, GOOD, MI325X_NODE, vllm_pod

PROMPTS = [f"prompt {i}" for i in range(4000)]


def test_without_divergence_every_answer_is_the_plain_models() -> None:
    for prompt in PROMPTS[:50]:
        assert answer_token_ids(prompt, 0, 32) == answer_token_ids(prompt, 0, 32, divergence=0.0)
    assert answer_token_ids("a", 0, 32) != answer_token_ids("b", 0, 32)


def test_a_diverging_pair_is_wrong_on_about_its_share_of_prompts() -> None:
    wrong = [p for p in PROMPTS if not compare(answer_token_ids(p, 7, 32, 0.1), answer_token_ids(p, 7, 32)).identical]
    assert 0.085 < len(wrong) / len(PROMPTS) < 0.115
    assert all(diverges(p, 7, 0.1) for p in wrong)


def test_a_diverged_answer_agrees_up_to_its_first_difference_then_differs_everywhere() -> None:
    prompt = next(p for p in PROMPTS if diverges(p, 0, 0.5))
    plain, wrong = answer_token_ids(prompt, 0, 64), answer_token_ids(prompt, 0, 64, 0.5)
    found = compare(wrong, plain)
    assert found.first_divergence is not None
    assert wrong[: found.first_divergence] == plain[: found.first_divergence]
    assert all(a != b for a, b in zip(wrong[found.first_divergence :], plain[found.first_divergence :], strict=True))


def test_identical_configs_agree_and_the_seed_picks_other_prompts() -> None:
    assert [answer_token_ids(p, 3, 16, 0.2) for p in PROMPTS[:200]] == [
        answer_token_ids(p, 3, 16, 0.2) for p in PROMPTS[:200]
    ]
    assert {p for p in PROMPTS if diverges(p, 1, 0.2)} != {p for p in PROMPTS if diverges(p, 2, 0.2)}


def test_divergence_is_a_share() -> None:
    with pytest.raises(ScenarioError, match=r"pairs\[0\].divergence"):
        load_scenario('pairs: [{target: "*", divergence: 1.5}]')


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_pods_return_token_ids_when_asked_and_only_the_lossy_pair_diverges() -> None:
    scenario = """
defaults: {load: 0, acceptance_spread: 0}
pairs:
  - {target: "*", drafter: "acme/*", acceptance: 0.3, divergence: 1.0}
"""
    with Simulator(load_scenario(scenario), listen=("127.0.0.1", 0), seed=2) as sim:
        sim.upsert_pod(vllm_pod("good-0", GOOD), MI325X_NODE)
        sim.upsert_pod(vllm_pod("lossy-0", BAD), MI325X_NODE)
        body = {"prompt": "Why is the sky blue?", "max_tokens": 12, "temperature": 0, "seed": 0, "ignore_eos": True}
        plain = post(f"{sim.url}/pods/team/good-0/v1/completions", body)["choices"][0]
        assert "token_ids" not in plain
        good = post(f"{sim.url}/pods/team/good-0/v1/completions", {**body, "return_token_ids": True})["choices"][0]
        lossy = post(f"{sim.url}/pods/team/lossy-0/v1/completions", {**body, "return_token_ids": True})["choices"][0]
        assert good["token_ids"] == answer_token_ids(good_key(body), 0, 12)
        assert len(lossy["token_ids"]) == 12 and not compare(lossy["token_ids"], good["token_ids"]).identical


def good_key(body: dict[str, Any]) -> str:
    from specfleet_workshop.sim.completions import parse_request

    return parse_request(json.dumps(body).encode()).prompt_key
