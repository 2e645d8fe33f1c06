"""`python -m specfleet.preflight`: the preflight Job's command. Prints the verdict as JSON, writes it to the
termination log (what the kubelet reports as the container's termination message), exits 0 on pass, 1 on fail.
"""

import argparse
import json
import sys
from pathlib import Path

from specfleet.preflight.check import Memory, Verdict, Vocabulary, memory_problems, vocabulary_problems
from specfleet.preflight.loading import config_vocabulary, tokenizer_vocabulary, weights_gib

TERMINATION_LOG = "/dev/termination-log"
TERMINATION_LIMIT = 4096
"""The kubelet keeps at most this many bytes of a termination message."""


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m specfleet.preflight",
        description="Check that a drafter shares the target's vocabulary (size, BOS/EOS/PAD ids, token ids) "
        "and fits beside it in GPU memory. Models are local directories or hub ids (read through HF_HOME).",
    )
    parser.add_argument("--target", required=True, help="target model: hub id or local directory")
    parser.add_argument("--target-revision", help="hub revision of the target")
    parser.add_argument("--drafter", required=True, help="drafter model: hub id or local directory")
    parser.add_argument("--drafter-revision", help="hub revision of the drafter")
    parser.add_argument("--target-size-gib", type=float, help="declared size of the target's weights")
    parser.add_argument("--drafter-size-gib", type=float, help="declared size of the drafter's weights")
    parser.add_argument("--gpu", default="GPU", help="name of the smallest accepted GPU, for messages")
    parser.add_argument("--gpu-budget-gib", type=float, help="per-GPU budget (vram x gpuMemoryUtilization)")
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--draft-tensor-parallel-size", type=int, default=1)
    parser.add_argument("--termination-log", default=TERMINATION_LOG, type=Path, help="where to write the verdict")
    return parser


def _describe(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:300]


def _vocabularies(args: argparse.Namespace) -> tuple[list[str], list[str], Vocabulary | None, Vocabulary | None]:
    """Both tokenizers compared; a drafter without a tokenizer (a head on the target's) by both configs."""
    try:
        target = tokenizer_vocabulary(args.target, args.target_revision)
    except Exception as error:
        return [f"cannot load the target's tokenizer: {_describe(error)}"], [], None, None
    try:
        drafter = tokenizer_vocabulary(args.drafter, args.drafter_revision)
    except Exception as error:
        try:
            target_config = config_vocabulary(args.target, args.target_revision)
            drafter_config = config_vocabulary(args.drafter, args.drafter_revision)
        except Exception:
            return [f"cannot load the drafter's tokenizer: {_describe(error)}"], [], target, None
        note = "the drafter ships no tokenizer (a head on the target's): compared both config.json files"
        return vocabulary_problems(target_config, drafter_config), [note], target_config, drafter_config
    return vocabulary_problems(target, drafter), [], target, drafter


def _size(declared: float | None, model: str, revision: str | None, who: str, notes: list[str]) -> float | None:
    if declared is not None:
        return declared
    measured = weights_gib(model, revision)
    notes.append(
        f"{who} size measured from its weight files: {measured:.2f} GiB"
        if measured is not None
        else f"{who} size unknown (no sizeGiB, no weight files found): not counted"
    )
    return measured


def run(args: argparse.Namespace) -> Verdict:
    problems, notes, target, drafter = _vocabularies(args)
    memory = None
    if args.gpu_budget_gib is None:
        notes.append("no known GPU product: memory not checked")
    else:
        memory = Memory(
            gpu=args.gpu,
            budget_gib=args.gpu_budget_gib,
            tensor_parallel_size=args.tensor_parallel_size,
            draft_tensor_parallel_size=args.draft_tensor_parallel_size,
            target_gib=_size(args.target_size_gib, args.target, args.target_revision, "target", notes),
            drafter_gib=_size(args.drafter_size_gib, args.drafter, args.drafter_revision, "drafter", notes),
        )
        problems += [p.message for p in memory_problems(memory)]
    return Verdict(tuple(problems), tuple(notes), target, drafter, memory)


def termination_message(verdict: Verdict) -> str:
    """The verdict as compact JSON within the kubelet's limit: details go first, then the summary is cut."""
    document = verdict.to_json()
    for key in ("target", "drafter", "memory", "notes", "problems"):
        text = json.dumps(document, separators=(",", ":"))
        if len(text.encode()) <= TERMINATION_LIMIT:
            return text
        document.pop(key, None)
    document["summary"] = document["summary"][:1000]
    return json.dumps(document, separators=(",", ":"))


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    verdict = run(args)
    print(json.dumps(verdict.to_json(), indent=2))
    try:
        args.termination_log.write_text(termination_message(verdict))
    except OSError as error:  # not in a pod (no /dev/termination-log): stdout has it all
        print(f"cannot write {args.termination_log}: {error.strerror}", file=sys.stderr)
    return 0 if verdict.passed else 1


if __name__ == "__main__":
    sys.exit(main())
