"""Everything wrong with a SpeculativeDeployment, before it costs a pod start on GPUs.

Three layers, all pure: the schema and cross-field rules (the same ones the API server enforces
through the CRD), what the target vLLM version would refuse, and judgement the schema cannot hold
(memory budgets, risky depths, clashes between fields).
"""

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import ValidationError

from specfleet.api.problems import Problem, Severity
from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.spec import (
    ARGV_VALUE_PATTERN,
    DEEP_SPECULATION_WARNING,
    METHODS_WITH_DRAFT_MODEL,
    SpeculativeDeploymentSpec,
)
from specfleet.api.vocabulary import API_VERSION, GROUP, KIND
from specfleet.hardware import BY_PRODUCT_NAME, PRODUCT_NAME_LABEL, PRODUCTS, GpuProduct
from specfleet.preflight.budget import gpu_budget
from specfleet.preflight.check import MemorySubject, memory_problems
from specfleet.render.argv import ITL_BUCKETS_FLAG, engine_problems
from specfleet.render.buckets import BucketsError, check_histogram_buckets
from specfleet.render.policy import DEFAULT_POLICY, TemplatePolicy, template_problems
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
        elif part == "[key]":  # a map's key was refused: name it as the API server does, `requests[bad key]`
            parent, _, key = path.rpartition(".")
            path = f"{parent}[{key}]"
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


_KNOWN_PRODUCTS = ", ".join(f"{p.product_name} ({p.short_name})" for p in PRODUCTS)


def _meant_product(name: str) -> GpuProduct | None:
    """The known product a wrong name most likely means: `MI325X` or `AMD_Instinct_MI325X_OAM` for MI325X."""
    upper = name.upper()
    return next((p for p in PRODUCTS if p.short_name in upper or p.short_name.removesuffix("X") in upper), None)


def _product_problems(spec: SpeculativeDeploymentSpec) -> list[Problem]:
    """A product name the node labeller never writes matches no node (the pods stay Pending), and has no
    memory budget to check: a warning, since a newer GPU than this table knows may carry it."""
    problems = []
    for index, name in enumerate(spec.accelerator.product_names):
        if name in BY_PRODUCT_NAME:
            continue
        meant = _meant_product(name)
        hint = f"did you mean {meant.product_name}? " if meant else ""
        problems.append(
            Problem(
                f"spec.accelerator.productNames[{index}]",
                f"{name} is not the {PRODUCT_NAME_LABEL} of any known AMD Instinct GPU: a node may never carry it "
                f"(the pods would stay Pending) and its memory budget is not checked; {hint}known: {_KNOWN_PRODUCTS}",
                Severity.WARNING,
            )
        )
    return problems


def _gpu_budget_problems(spec: SpeculativeDeploymentSpec) -> list[Problem]:
    """Drafter within 10% of the per-GPU budget; target plus drafter within the budget at all (the rule the
    preflight Job applies again to sizes measured from the files). What cannot be checked is a note: a
    budget needs a known GPU and the sizes."""
    memory = gpu_budget(spec)
    if memory is None:
        reason = (
            f"no product is named, so the pods may land on any GPU (name the ones they may use, of {_KNOWN_PRODUCTS}, "
            "to check sizeGiB against the smallest one's budget)"
            if not spec.accelerator.product_names
            else "none of the named products is a known AMD Instinct GPU"
        )
        return [
            Problem("spec.accelerator.productNames", f"the GPU memory budget is not checked: {reason}", Severity.NOTE)
        ]
    budget = f"the {memory.budget_gib:.1f} GiB budget of a {memory.gpu}"
    problems = [Problem(_MEMORY_FIELDS[p.subject], p.message) for p in memory_problems(memory)]
    if memory.target_gib is None:
        unchecked = f"not declared: the weights are not checked against {budget}"
        problems.append(Problem("spec.model.sizeGiB", unchecked, Severity.NOTE))
    if memory.drafter_gib is None and spec.speculative.method in METHODS_WITH_DRAFT_MODEL:
        unchecked = f"not declared: the drafter {spec.speculative.model} is not checked against {budget}"
        problems.append(Problem("spec.speculative.sizeGiB", unchecked, Severity.NOTE))
    return problems


def _holdback_problems(spec: SpeculativeDeploymentSpec) -> list[Problem]:
    """A holdback that cannot run: a warning, not a refusal, since `replicas` is also what `kubectl scale`, an
    HPA or KEDA write (the scale subresource); the operator then says in status.holdback why none runs."""
    holdback = spec.rollout.holdback
    if holdback is None or spec.holdback_replicas > 0:
        return []
    return [
        Problem(
            "spec.rollout.holdback.replicas",
            f"{holdback.replicas} is not below replicas {spec.replicas} (stable keeps at least one): no holdback "
            "runs while replicas stays this low",
            Severity.WARNING,
        )
    ]


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
    return problems + _product_problems(spec) + _gpu_budget_problems(spec)


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
    """Each candidate of an experiment must be a config the fleet could serve, named by its place. A note the
    spec itself gets already (a budget that cannot be checked) is not repeated per candidate."""
    problems: list[Problem] = []
    if not spec.candidates:
        return problems
    own_notes = {p.message for p in _judgement_problems(spec) if p.severity is Severity.NOTE}
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
            if problem.field.startswith("spec.speculative") and problem.message not in own_notes:
                problems.append(
                    Problem(where + problem.field.removeprefix("spec.speculative"), problem.message, problem.severity)
                )
    return problems


def _template_problems(spec: SpeculativeDeploymentSpec, policy: TemplatePolicy) -> list[Problem]:
    template = spec.template.model_dump(mode="json", by_alias=True, exclude_none=True) if spec.template else None
    return template_problems(template, policy)


def spec_problems(spec: SpeculativeDeploymentSpec, policy: TemplatePolicy = DEFAULT_POLICY) -> list[Problem]:
    """Problems of a spec that already passed the schema: version support, what the operator's template policy
    refuses in `spec.template`, and judgement."""
    return (
        engine_problems(spec)
        + _template_problems(spec, policy)
        + _extra_args_problems(spec)
        + _judgement_problems(spec)
        + _candidate_problems(spec)
        + _holdback_problems(spec)
    )


def validate_document(document: Any, policy: TemplatePolicy = DEFAULT_POLICY) -> list[Problem]:
    """All problems of one YAML document meant to be a SpeculativeDeployment, under the operator's template
    policy `policy`."""
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
    return spec_problems(sdep.spec, policy)


def errors(problems: list[Problem]) -> list[Problem]:
    return [p for p in problems if p.severity is Severity.ERROR]


def is_another_kind(document: Any) -> bool:
    """A Kubernetes object not meant to be a SpeculativeDeployment (a Secret or a Namespace beside the fleet in
    one file): skipped, not refused. An object of specfleet.io's group under another kind is a typo: checked."""
    if not isinstance(document, Mapping):
        return False
    kind, api_version = document.get("kind"), document.get("apiVersion")
    ours = isinstance(api_version, str) and api_version.split("/")[0] == GROUP
    return isinstance(kind, str) and kind != KIND and not ours


def _name(document: Any) -> str | None:
    metadata = document.get("metadata") if isinstance(document, Mapping) else None
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) else None


@dataclass(frozen=True)
class DocumentReport:
    """What `specfleet validate` found in one document of a file."""

    source: str
    """The file it came from (`-` for standard input)."""
    position: int | None
    """Its place in the file, from 1; None when the file could not be parsed at all."""
    name: str | None
    problems: tuple[Problem, ...]

    @property
    def valid(self) -> bool:
        return not errors(list(self.problems))

    @property
    def label(self) -> str:
        """How a line of output names it: its name, else its place (nothing for a file that did not parse)."""
        return self.name or ("" if self.position is None else f"document {self.position}")

    def as_json(self) -> dict[str, Any]:
        def of(severity: Severity) -> list[dict[str, str]]:
            return [{"field": p.field, "message": p.message} for p in self.problems if p.severity is severity]

        return {
            "file": self.source,
            "document": self.position,
            "name": self.name,
            "valid": self.valid,
            "errors": of(Severity.ERROR),
            "warnings": of(Severity.WARNING),
            "notes": of(Severity.NOTE),
        }


@dataclass(frozen=True)
class SkippedDocument:
    """A document of another kind, passed over."""

    source: str
    position: int
    kind: str
    name: str | None

    def as_json(self) -> dict[str, Any]:
        return {"file": self.source, "document": self.position, "kind": self.kind, "name": self.name}


@dataclass(frozen=True)
class FileReport:
    """One file: its SpeculativeDeployments checked, its other objects skipped."""

    source: str
    documents: tuple[DocumentReport, ...]
    skipped: tuple[SkippedDocument, ...] = ()


def _parse_error(error: Exception) -> str:
    """One line: where the parser stopped and why (PyYAML's own text spans several, with a caret)."""
    mark = getattr(error, "problem_mark", None)
    if isinstance(error, yaml.MarkedYAMLError) and mark is not None:
        return f"{error.problem} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(error).split())


def validate_text(source: str, text: str, policy: TemplatePolicy = DEFAULT_POLICY) -> FileReport:
    """Every SpeculativeDeployment in one file's text: YAML documents, or one JSON object in a `.json` file.
    A file that does not parse is one invalid report saying why."""
    is_json = source.endswith(".json")
    try:
        loaded = [json.loads(text)] if is_json else list(yaml.safe_load_all(text))
    except (yaml.YAMLError, ValueError) as error:
        problem = Problem("(file)", f"not valid {'JSON' if is_json else 'YAML'}: {_parse_error(error)}")
        return FileReport(source, (DocumentReport(source, None, None, (problem,)),))
    documents, skipped = [], []
    for position, document in enumerate(loaded, start=1):
        if document is None:
            continue  # an empty document between two `---`
        if is_another_kind(document):
            skipped.append(SkippedDocument(source, position, document["kind"], _name(document)))
        else:
            problems = tuple(validate_document(document, policy))
            documents.append(DocumentReport(source, position, _name(document), problems))
    return FileReport(source, tuple(documents), tuple(skipped))


def reports_json(files: Sequence[FileReport]) -> dict[str, Any]:
    """`specfleet validate -o json`: valid only when there is at least one SpeculativeDeployment and none is invalid."""
    documents = [d for f in files for d in f.documents]
    return {
        "valid": bool(documents) and all(d.valid for d in documents),
        "documents": [d.as_json() for d in documents],
        "skipped": [s.as_json() for f in files for s in f.skipped],
    }
