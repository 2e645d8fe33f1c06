"""Everything wrong with a SpeculativeDeployment, before it costs a pod start on GPUs.

Three layers, all pure: the schema and cross-field rules (the same ones the API server enforces
through the CRD), what the target vLLM version would refuse, and judgement the schema cannot hold
(memory budgets, risky depths, clashes between fields).
"""

from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import ValidationError

from specfleet.api.problems import Problem, Severity
from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.spec import (
    ARGV_VALUE_PATTERN,
    DEEP_SPECULATION_WARNING,
    METHODS_WITH_DRAFT_MODEL,
    SpeculativeDeploymentSpec,
)
from specfleet.api.vocabulary import API_VERSION, KIND
from specfleet.preflight.budget import gpu_budget
from specfleet.preflight.check import MemorySubject, memory_problems
from specfleet.render.argv import ITL_BUCKETS_FLAG, engine_problems
from specfleet.render.buckets import BucketsError, check_histogram_buckets
from specfleet.render.vllm_versions import CLI_FLAGS, VllmVersion, has_flag

_FRIENDLY = {
    "extra_forbidden": "unknown field",
    "missing": "required field is missing",
}
_FRIENDLY_PATTERNS = {
    ARGV_VALUE_PATTERN: "must be a single line and must not start with '-' (it would be read as a flag)",
}


def _field_path(loc: tuple[int | str, ...], suffix: str = "") -> str:
    """pydantic's error location as a YAML path: `spec.rollout.steps[1].weight`."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif "[" in part or part in {"str", "int", "float", "bool"}:
            continue  # pydantic's names for union members and validators, not fields
        else:
            path += f".{part}" if path else part
    return path + suffix


def _schema_problems(error: ValidationError) -> list[Problem]:
    problems = []
    for detail in error.errors():
        context = detail.get("ctx") or {}
        field = _field_path(detail["loc"], context.get("field_path", ""))
        if detail["type"] == "string_pattern_mismatch" and context.get("pattern") in _FRIENDLY_PATTERNS:
            message = _FRIENDLY_PATTERNS[context["pattern"]]
        else:
            message = _FRIENDLY.get(detail["type"], detail["msg"])
        problems.append(Problem(field or "(document)", message))
    return problems


_MEMORY_FIELDS = {MemorySubject.DRAFTER: "spec.speculative.sizeGiB", MemorySubject.WEIGHTS: "spec.model.sizeGiB"}


def _gpu_budget_problems(spec: SpeculativeDeploymentSpec) -> list[Problem]:
    """Drafter within 10% of the per-GPU budget; target plus drafter within the budget at all (the rule the
    preflight Job applies again to sizes measured from the files)."""
    memory = gpu_budget(spec)
    if memory is None:
        return []
    return [Problem(_MEMORY_FIELDS[p.subject], p.message) for p in memory_problems(memory)]


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{path}[{index}]")


def _judgement_problems(spec: SpeculativeDeploymentSpec) -> list[Problem]:
    problems = []
    depth = spec.speculative.num_speculative_tokens
    if depth is not None and depth > DEEP_SPECULATION_WARNING:
        problems.append(
            Problem(
                "spec.speculative.numSpeculativeTokens",
                f"k={depth} is deep: beyond {DEEP_SPECULATION_WARNING} the extra drafts are rarely accepted and "
                "each costs drafter time; start at 4 or 5",
                Severity.WARNING,
            )
        )
    if spec.speculative.method in METHODS_WITH_DRAFT_MODEL and spec.speculative.revision is None:
        problems.append(
            Problem(
                "spec.speculative.revision",
                "the drafter is not pinned to a revision: a new upload changes acceptance under a running fleet",
                Severity.WARNING,
            )
        )
    draft_tp = spec.speculative.draft_tensor_parallel_size
    if spec.speculative.method == "draft_model" and draft_tp not in (None, spec.engine.tensor_parallel_size):
        problems.append(
            Problem(
                "spec.speculative.draftTensorParallelSize",
                "method draft_model needs the drafter on the target's tensorParallelSize (vLLM refuses "
                "anything else when the model runner starts)",
            )
        )
    for path, text in _strings(spec.speculative.extra or {}, "spec.speculative.extra"):
        if "\n" in text or "\r" in text or text.startswith("--"):
            problems.append(Problem(path, "must be a single line and must not start with '--'"))
    env_names = [e.name for e in spec.engine.env]
    managed = {"HF_HOME"} | ({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"} if spec.storage.hf_token_secret else set())
    for index, name in enumerate(env_names):
        if name in managed:
            problems.append(Problem(f"spec.engine.env[{index}].name", f"{name} is set by specfleet"))
        elif env_names.index(name) != index:
            problems.append(Problem(f"spec.engine.env[{index}].name", f"{name} is set twice"))
    return problems + _gpu_budget_problems(spec)


def _extra_args_problems(spec: SpeculativeDeploymentSpec) -> list[Problem]:
    """A `--custom-histogram-buckets` in extraArgs that the version lacks or would refuse at start-up."""
    args = spec.engine.extra_args
    problems = []
    for index, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag != ITL_BUCKETS_FLAG:
            continue
        field = f"spec.engine.extraArgs[{index}]"
        version = VllmVersion.parse(spec.engine.vllm_version)
        if not has_flag(ITL_BUCKETS_FLAG, version):
            since = CLI_FLAGS[ITL_BUCKETS_FLAG].since
            problems.append(
                Problem(field, f"{ITL_BUCKETS_FLAG} needs vLLM >= {since}; engine.vllmVersion is {version}")
            )
            continue
        text = value if eq else (args[index + 1] if index + 1 < len(args) else "")
        try:
            check_histogram_buckets(text)
        except BucketsError as error:
            problems.append(Problem(field, f"vLLM {version} refuses it: {error}"))
    return problems


def _candidate_problems(spec: SpeculativeDeploymentSpec) -> list[Problem]:
    """Each candidate of an experiment must be a config the fleet could serve, named by its place."""
    problems: list[Problem] = []
    for index in range(len(spec.candidates)):
        where = f"spec.autoTune.candidates[{index}]"
        try:
            candidate = spec.candidate_spec(index)
        except ValidationError as error:
            for problem in _schema_problems(error):
                field = problem.field.removeprefix("(document)")
                problems.append(Problem(where + (field if field[:1] in ("", ".") else "." + field), problem.message))
            continue
        for problem in engine_problems(candidate) + _judgement_problems(candidate):
            if problem.field.startswith("spec.speculative"):
                problems.append(
                    Problem(where + problem.field.removeprefix("spec.speculative"), problem.message, problem.severity)
                )
    return problems


def spec_problems(spec: SpeculativeDeploymentSpec) -> list[Problem]:
    """Problems of a spec that already passed the schema: version support and judgement."""
    return engine_problems(spec) + _extra_args_problems(spec) + _judgement_problems(spec) + _candidate_problems(spec)


def validate_document(document: Any) -> list[Problem]:
    """All problems of one YAML document meant to be a SpeculativeDeployment."""
    if not isinstance(document, Mapping):
        return [Problem("(document)", "expected a mapping (a Kubernetes object)")]
    if document.get("apiVersion") != API_VERSION or document.get("kind") != KIND:
        return [
            Problem(
                "apiVersion",
                f"expected apiVersion {API_VERSION} and kind {KIND}, got "
                f"{document.get('apiVersion')!r} / {document.get('kind')!r}",
            )
        ]
    try:
        sdep = SpeculativeDeployment.from_mapping(document)
    except ValidationError as error:
        return _schema_problems(error)
    return spec_problems(sdep.spec)


def errors(problems: list[Problem]) -> list[Problem]:
    return [p for p in problems if p.severity is Severity.ERROR]
