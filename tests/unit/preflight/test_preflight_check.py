"""The preflight check: real tokenizers (made here with `tokenizers`, saved and loaded by transformers) compared
for vocabulary size, BOS/EOS/PAD and token ids; the memory share of the drafter, declared or measured from
the weight files; and the command's JSON verdict, termination log and exit code."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specfleet.preflight import check
from specfleet.preflight.__main__ import TERMINATION_LIMIT, main, termination_message
from specfleet.preflight.check import Memory, MemorySubject, Verdict, Vocabulary, memory_problems, vocabulary_problems
from specfleet_workshop.fleetpods.tiny_tokenizers import hub_snapshot, write_tokenizer

PREFLIGHT = Path(check.__file__).parent
GIB = 1024**3


def vocabulary(size: int = 100, bos: int | None = 1, eos: int | None = 2, pad: int | None = 0) -> Vocabulary:
    return Vocabulary("t", size, bos, eos, pad)


@pytest.mark.parametrize(
    ("drafter", "expected"),
    [
        (vocabulary(), []),
        (vocabulary(size=120), ["vocabulary size differs: target 100 tokens, drafter 120"]),
        (vocabulary(bos=5), ["BOS id differs: target 1, drafter 5"]),
        (vocabulary(eos=None), ["EOS id differs: target 2, drafter none"]),
        (vocabulary(pad=7), ["PAD id differs: target 0, drafter 7"]),
        (vocabulary(pad=None), []),  # a missing PAD is no mismatch: vLLM never pads with it
    ],
)
def test_each_vocabulary_mismatch_is_named_in_its_own_words(drafter: Vocabulary, expected: list[str]) -> None:
    assert vocabulary_problems(vocabulary(), drafter) == expected


def test_the_same_tokens_under_other_ids_are_a_mismatch_even_at_the_same_size() -> None:
    target = Vocabulary("t", 4, tokens={"a": 0, "b": 1, "c": 2, "d": 3})
    drafter = Vocabulary("d", 4, tokens={"a": 0, "b": 2, "c": 1, "d": 3})
    assert vocabulary_problems(target, drafter) == [
        "2 tokens have other ids in the drafter (target vs drafter: 'b' is 1 vs 2, 'c' is 2 vs 1)"
    ]


@pytest.mark.parametrize(
    ("memory", "subjects"),
    [
        (Memory("MI300X", 172.8, drafter_gib=17.0), []),
        (Memory("MI300X", 172.8, drafter_gib=17.5), [MemorySubject.DRAFTER]),
        (Memory("MI300X", 172.8, drafter_gib=30.0, draft_tensor_parallel_size=2), []),  # 15 GiB per GPU
        (Memory("MI300X", 172.8, target_gib=140.0, tensor_parallel_size=1, drafter_gib=15.0), []),
        (Memory("MI300X", 172.8, target_gib=160.0, drafter_gib=15.0), [MemorySubject.WEIGHTS]),
        (Memory("MI300X", 172.8), []),  # nothing known, nothing to refuse
    ],
)
def test_the_drafter_takes_at_most_a_tenth_of_the_budget_and_all_weights_fit(
    memory: Memory, subjects: list[MemorySubject]
) -> None:
    assert [p.subject for p in memory_problems(memory)] == subjects


def test_a_passed_verdict_says_what_was_found_equal_and_the_share_used() -> None:
    verdict = Verdict(target=vocabulary(), drafter=vocabulary(), memory=Memory("MI300X", 172.8, drafter_gib=2.5))
    assert verdict.passed
    assert verdict.summary == (
        "same vocabulary (100 tokens, bos 1, eos 2, pad 0); "
        "drafter 2.5 GiB per GPU, 1.4% of a MI300X's 172.8 GiB budget"
    )
    failed = Verdict(problems=("a", "b"))
    assert not failed.passed and failed.summary == "a; b" and failed.to_json()["passed"] is False


def test_the_termination_message_fits_the_kubelets_limit_and_keeps_the_verdict() -> None:
    long = Verdict(problems=tuple(f"problem {i} " + "x" * 200 for i in range(40)), notes=("n",))
    message = termination_message(long)
    assert len(message.encode()) <= TERMINATION_LIMIT
    document = json.loads(message)
    assert document["passed"] is False and document["summary"].startswith("problem 0")


def run(tmp_path: Path, *args: str) -> tuple[int, dict]:
    """`python -m specfleet.preflight` in this process: the exit code and the verdict in the termination log."""
    log = tmp_path / "termination-log"
    code = main([*args, "--termination-log", str(log)])
    return code, json.loads(log.read_text())


def test_a_drafter_with_the_targets_tokenizer_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target, drafter = write_tokenizer(tmp_path / "target"), write_tokenizer(tmp_path / "drafter")
    code, logged = run(tmp_path, "--target", str(target), "--drafter", str(drafter))
    printed = json.loads(capsys.readouterr().out)
    assert code == 0 and logged["passed"] and printed["passed"]
    assert printed["target"] == {"source": f"tokenizer of {target}", "size": 512, "bos": 1, "eos": 2, "pad": 0}
    assert logged["summary"].startswith("same vocabulary (512 tokens, bos 1, eos 2, pad 0)")


@pytest.mark.parametrize(
    ("drafter", "words"),
    [
        ({"vocab_size": 600}, "vocabulary size differs: target 512 tokens, drafter 600"),
        ({"bos_id": 3}, "BOS id differs: target 1, drafter 3"),
        ({"eos_id": 3}, "EOS id differs: target 2, drafter 3"),
        ({"pad_id": 5}, "PAD id differs: target 0, drafter 5"),
    ],
)
def test_a_tokenizer_mismatch_fails_with_exit_1_and_says_which(
    tmp_path: Path, drafter: dict[str, int], words: str
) -> None:
    target, other = write_tokenizer(tmp_path / "target"), write_tokenizer(tmp_path / "drafter", **drafter)
    code, logged = run(tmp_path, "--target", str(target), "--drafter", str(other))
    assert code == 1 and not logged["passed"]
    assert words in logged["problems"], logged["problems"]


def test_a_drafter_too_big_for_the_budget_fails_on_its_measured_weights(tmp_path: Path) -> None:
    target, drafter = write_tokenizer(tmp_path / "target"), write_tokenizer(tmp_path / "drafter")
    with (drafter / "model.safetensors").open("wb") as weights:
        weights.truncate(20 * GIB)  # sparse: takes no disk
    budget = ("--gpu", "MI300X", "--gpu-budget-gib", "172.8")
    code, logged = run(tmp_path, "--target", str(target), "--drafter", str(drafter), *budget)
    assert code == 1
    assert logged["problems"] == [
        "the drafter needs 20.0 GiB per GPU, more than 10% of the 172.8 GiB budget of a MI300X (vram x "
        "gpuMemoryUtilization): it would starve the KV cache"
    ]
    assert "drafter size measured from its weight files: 20.00 GiB" in logged["notes"]
    declared = run(tmp_path, "--target", str(target), "--drafter", str(drafter), *budget, "--drafter-size-gib", "2")
    assert declared[0] == 0, "a declared size is taken as the user gave it"


def test_a_drafter_head_without_a_tokenizer_is_compared_by_config(tmp_path: Path) -> None:
    target, head = write_tokenizer(tmp_path / "target"), write_tokenizer(tmp_path / "head")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (head / name).unlink()
    code, logged = run(tmp_path, "--target", str(target), "--drafter", str(head))
    assert code == 0, logged
    assert "the drafter ships no tokenizer (a head on the target's): compared both config.json files" in logged["notes"]
    config = json.loads((head / "config.json").read_text())
    (head / "config.json").write_text(json.dumps({**config, "vocab_size": 1024}))
    assert run(tmp_path, "--target", str(target), "--drafter", str(head))[0] == 1


def test_an_unreadable_model_fails_and_names_it(tmp_path: Path) -> None:
    target = write_tokenizer(tmp_path / "target")
    code, logged = run(tmp_path, "--target", str(target), "--drafter", str(tmp_path / "nothing-here"))
    assert code == 1 and logged["problems"][0].startswith("cannot load the drafter's tokenizer: ")


def test_hub_ids_are_read_from_the_hf_home_cache_offline(tmp_path: Path) -> None:
    """The pod's path: hub ids and revisions through HF_HOME, nothing downloaded (a fresh interpreter, since
    huggingface_hub reads HF_HOME when it is imported)."""
    hf_home = tmp_path / "hf"
    write_tokenizer(hub_snapshot(hf_home, "org/target", "main"))
    write_tokenizer(hub_snapshot(hf_home, "org/drafter", "v1"), eos_id=7)
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}
    argv = [sys.executable, "-m", "specfleet.preflight", "--target", "org/target", "--target-revision", "main"]
    argv += ["--drafter", "org/drafter", "--drafter-revision", "v1", "--termination-log", str(tmp_path / "log")]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    verdict = json.loads(done.stdout)
    assert done.returncode == 1, done.stderr
    assert "EOS id differs: target 2, drafter 7" in verdict["problems"]
    assert verdict["target"]["source"] == "tokenizer of org/target@main"


def test_what_runs_in_the_serving_image_imports_nothing_else_of_specfleet() -> None:
    """The vLLM image gets specfleet/__init__.py and this package without the operator's side (its .dockerignore)."""
    ignore = (PREFLIGHT.parents[2] / "images" / "vllm-rocm" / "Dockerfile.dockerignore").read_text().splitlines()
    left_out = {Path(line).name for line in ignore if line.startswith("operator/specfleet/preflight/")}
    assert left_out == {"job.py", "budget.py"}
    for path in sorted(PREFLIGHT.glob("*.py")):
        if path.name in left_out:
            continue
        tree = ast.parse(path.read_text())
        imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        ours = {name for name in imported if name.startswith("specfleet")}
        kept = all(name.startswith("specfleet.preflight") for name in ours)
        assert kept and not {f"specfleet.preflight.{Path(name).stem}" for name in left_out} & ours, (
            path.name,
            ours,
        )
