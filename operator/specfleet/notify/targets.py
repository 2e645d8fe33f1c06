"""Where notifications go: the targets of the operator's own configuration and of a namespace's Secret.

Both are the same YAML (`targets.yaml`):

    targets:
      - sink: webhook                  # webhook (CloudEvents JSON), slack, teams
        url: https://events.example.com/specfleet
        transitions: [RolledBack, Aborted]   # default: every transition

The operator's come from its admin (`specfleet run --notifications-config`, the chart's Secret) and go anywhere.
A namespace's come from the Secret `specfleet-notifications` its tenant owns there, and each URL must be under a
prefix of the admin's allow-list (`reach.target_refusal`): the operator sends from inside the cluster, so a
tenant's URL could otherwise make it post to an internal host. A target refused is named by its field, never
shown with its secret parts; the others still serve.
"""

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import parse_qsl, urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specfleet.notify.transitions import Transition
from specfleet.reach import UrlPrefix, redacted, target_refusal

NAMESPACE_SECRET = "specfleet-notifications"
"""The Secret a namespace's tenant puts its targets in; the operator reads this name only (RBAC resourceNames)."""
TARGETS_KEY = "targets.yaml"
MAX_TARGETS = 16


class TargetSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    sink: Annotated[str, Field(max_length=32)]
    url: Annotated[str, Field(min_length=1, max_length=2048, repr=False)]
    transitions: list[Transition] = list(Transition)


class TargetsSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    targets: Annotated[list[TargetSpec], Field(max_length=MAX_TARGETS)] = []


@dataclass(frozen=True)
class Target:
    """One place a notification goes, and where it was configured (for log lines and refusals)."""

    sink: str
    url: str
    transitions: frozenset[Transition]
    source: str
    """`operator` or `<namespace>/specfleet-notifications`, with its index: `team-a/specfleet-notifications#0`."""

    def __repr__(self) -> str:  # the URL holds the target's token
        return f"Target({self.sink}, {redacted(self.url)}, from {self.source})"

    @property
    def shown(self) -> str:
        return f"{self.sink} {redacted(self.url)} ({self.source})"

    def wants(self, transition: Transition) -> bool:
        return transition in self.transitions


@dataclass(frozen=True)
class Targets:
    targets: tuple[Target, ...]
    refusals: tuple[str, ...]
    """Why a target (or the whole text) was not taken, naming its field; no secret part of a URL."""


def parse_targets(
    text: str, source: str, sinks: Collection[str], allowed: Sequence[UrlPrefix] | None = None
) -> Targets:
    """The targets of one configuration text. `allowed`: the admin's allow-list a namespace's URLs must be under;
    None for the operator's own configuration, which is the admin's."""
    where = f"{source} {TARGETS_KEY}"
    try:
        loaded = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        return Targets((), (f"{where}: not YAML{line}",))
    try:
        parsed = TargetsSpec.model_validate(loaded if loaded is not None else {})
    except ValidationError as error:  # each error by its field; never the input (it may be a URL with its token)
        said = [f"{where}: {_field(e['loc'])}: {e['msg']}" for e in error.errors(include_input=False)]
        return Targets((), tuple(said))
    targets, refusals = [], []
    for index, spec in enumerate(parsed.targets):
        field = f"{where}: targets[{index}]"
        if spec.sink not in sinks:
            refusals.append(f"{field}.sink: {spec.sink!r} is none of {', '.join(sorted(sinks))}")
            continue
        refused = target_refusal(f"{field}.url", spec.url, allowed) if allowed is not None else None
        if refused is not None:
            refusals.append(refused)
            continue
        targets.append(Target(spec.sink, spec.url, frozenset(spec.transitions), f"{source}#{index}"))
    return Targets(tuple(targets), tuple(refusals))


def _field(location: tuple[int | str, ...]) -> str:
    out = ""
    for part in location:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top)"


def secret_parts(url: str) -> tuple[str, ...]:
    """What of `url` must never reach a log line, as strings to scrub from every log record: the whole URL, its
    userinfo, its token-like path segments and query values, and its path and query whole when they hold one (as
    an HTTP client's debug line shows them). Plain words (`/services`, `/specfleet`) are left: scrubbing them would
    mangle every other line of the log."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return (url,)
    found = {url, parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""}
    tokens = {segment for segment in parts.path.split("/") if _token_like(segment)}
    tokens |= {value for _, value in parse_qsl(parts.query) if _token_like(value)}
    if tokens:
        found |= tokens | {parts.path, f"{parts.path}?{parts.query}" if parts.query else ""}
    if parts.scheme not in ("http", "https"):  # a chat service's own scheme keeps tokens in the host too
        found.add(parts.netloc)
    return tuple(sorted((s for s in found if s), key=len, reverse=True))


def _token_like(part: str) -> bool:
    """Long, or letters mixed with digits: an id or a signature, not a word."""
    mixed = any(c.isdigit() for c in part) and any(c.isalpha() for c in part)
    return len(part) >= 16 or (len(part) >= 8 and mixed)
