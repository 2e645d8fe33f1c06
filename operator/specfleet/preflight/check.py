"""Whether a drafter can serve beside its target: the same token ids, and room for both in GPU memory. Pure.

A drafter proposes token ids that the target verifies; if the two read ids differently (another vocabulary
size, other special tokens, the same token under another id), every draft is garbage or vLLM refuses to
start. Memory: the drafter's weights come out of the KV cache's share of each GPU, so a drafter above a
tenth of the budget starves the batch it is meant to speed up. `specfleet.validation` applies the same
memory rule to the sizes a spec declares; the preflight Job applies it to sizes measured from the files.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

DRAFTER_MEMORY_SHARE = 0.10
"""The drafter should take at most this share of each GPU's memory budget (seed 002)."""
EXAMPLES = 3
"""Tokens named when ids differ: enough to recognise the pattern, short enough for an Event."""


@dataclass(frozen=True)
class Vocabulary:
    """What a tokenizer (or, for a drafter that ships none, its model config) says about token ids."""

    source: str
    """Where it was read, e.g. `tokenizer of meta-llama/Llama-3.1-8B-Instruct@main`."""
    size: int
    """Ids in use: the base vocabulary plus added tokens (`len(tokenizer)`), or the config's `vocab_size`."""
    bos_id: int | None = None
    eos_id: int | None = None
    pad_id: int | None = None
    tokens: Mapping[str, int] | None = field(default=None, repr=False, compare=False)
    """Token -> id, when read from a tokenizer."""

    def summary(self) -> dict[str, Any]:
        return {"source": self.source, "size": self.size, "bos": self.bos_id, "eos": self.eos_id, "pad": self.pad_id}


def _shown(value: int | None) -> str:
    return "none" if value is None else str(value)


def _special(name: str, target: int | None, drafter: int | None, *, optional: bool) -> str | None:
    if target == drafter or (optional and (target is None or drafter is None)):
        return None
    return f"{name} id differs: target {_shown(target)}, drafter {_shown(drafter)}"


def vocabulary_problems(target: Vocabulary, drafter: Vocabulary) -> list[str]:
    """Every way the drafter would read the target's ids differently, one sentence each.

    BOS and EOS must be equal (a missing one on one side is a difference); PAD only when both define one,
    since vLLM never pads with it and many tokenizers leave it unset.
    """
    problems = []
    if target.size != drafter.size:
        problems.append(f"vocabulary size differs: target {target.size} tokens, drafter {drafter.size}")
    for name, ours, theirs, optional in (
        ("BOS", target.bos_id, drafter.bos_id, False),
        ("EOS", target.eos_id, drafter.eos_id, False),
        ("PAD", target.pad_id, drafter.pad_id, True),
    ):
        problem = _special(name, ours, theirs, optional=optional)
        if problem:
            problems.append(problem)
    if target.tokens is not None and drafter.tokens is not None:
        moved = sorted(t for t, i in target.tokens.items() if drafter.tokens.get(t, i) != i)
        if moved:
            examples = ", ".join(f"{t!r} is {target.tokens[t]} vs {drafter.tokens[t]}" for t in moved[:EXAMPLES])
            count = "1 token has another id" if len(moved) == 1 else f"{len(moved)} tokens have other ids"
            problems.append(f"{count} in the drafter (target vs drafter: {examples})")
    return problems


class MemorySubject(StrEnum):
    """What a memory problem is about: the drafter's share, or all the weights together."""

    DRAFTER = "drafter"
    WEIGHTS = "weights"


@dataclass(frozen=True)
class Memory:
    """The weights per GPU against one GPU's budget (its memory x gpuMemoryUtilization)."""

    gpu: str
    """The smallest accepted GPU, e.g. `MI300X`: the budget has to hold on every node the pods may land on."""
    budget_gib: float
    tensor_parallel_size: int = 1
    draft_tensor_parallel_size: int = 1
    target_gib: float | None = None
    """The whole target model's weights; None when unknown."""
    drafter_gib: float | None = None
    """The whole drafter's weights; None when unknown."""

    @property
    def drafter_per_gpu(self) -> float:
        return self.drafter_gib / self.draft_tensor_parallel_size if self.drafter_gib else 0.0


@dataclass(frozen=True)
class MemoryProblem:
    subject: MemorySubject
    message: str


def memory_problems(memory: Memory) -> list[MemoryProblem]:
    """The drafter within `DRAFTER_MEMORY_SHARE` of the per-GPU budget; target plus drafter within the budget."""
    problems = []
    budget, drafter, tp = memory.budget_gib, memory.drafter_per_gpu, memory.tensor_parallel_size
    if drafter > DRAFTER_MEMORY_SHARE * budget:
        problems.append(
            MemoryProblem(
                MemorySubject.DRAFTER,
                f"the drafter needs {drafter:.1f} GiB per GPU, more than {DRAFTER_MEMORY_SHARE:.0%} of the "
                f"{budget:.1f} GiB budget of a {memory.gpu} (vram x gpuMemoryUtilization): "
                "it would starve the KV cache",
            )
        )
    if memory.target_gib and memory.target_gib / tp + drafter > budget:
        problems.append(
            MemoryProblem(
                MemorySubject.WEIGHTS,
                f"the weights need {memory.target_gib / tp + drafter:.1f} GiB per GPU at tensorParallelSize "
                f"{tp}, more than the {budget:.1f} GiB budget of a {memory.gpu}",
            )
        )
    return problems


@dataclass(frozen=True)
class Verdict:
    """The preflight's answer: passed when nothing is wrong; notes say what could not be checked and why."""

    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    target: Vocabulary | None = None
    drafter: Vocabulary | None = None
    memory: Memory | None = None

    @property
    def passed(self) -> bool:
        return not self.problems

    @property
    def summary(self) -> str:
        """One line for status and Events: the problems, or what was found equal and how much room is used."""
        if self.problems:
            return "; ".join(self.problems)
        parts = []
        if self.target is not None:
            t = self.target
            ids = f"bos {_shown(t.bos_id)}, eos {_shown(t.eos_id)}, pad {_shown(t.pad_id)}"
            parts.append(f"same vocabulary ({t.size} tokens, {ids})")
        if self.memory is not None and self.memory.drafter_gib:
            share = self.memory.drafter_per_gpu / self.memory.budget_gib
            parts.append(
                f"drafter {self.memory.drafter_per_gpu:.1f} GiB per GPU, {share:.1%} of a {self.memory.gpu}'s "
                f"{self.memory.budget_gib:.1f} GiB budget"
            )
        return "; ".join(parts + list(self.notes)) or "passed"

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "passed": self.passed,
            "summary": self.summary,
            "problems": list(self.problems),
            "notes": list(self.notes),
        }
        if self.target is not None:
            document["target"] = self.target.summary()
        if self.drafter is not None:
            document["drafter"] = self.drafter.summary()
        if self.memory is not None:
            document["memory"] = {
                "gpu": self.memory.gpu,
                "budgetGiB": round(self.memory.budget_gib, 2),
                "targetGiB": self.memory.target_gib,
                "drafterGiB": self.memory.drafter_gib,
            }
        return document
