"""Drift: the serving fleet's evidence over one window against what it measured as a canary at promotion."""

from dataclasses import dataclass, replace

from specfleet.api.spec import DriftSpec, Guardrails
from specfleet.api.status import DriftReference, TrafficProfile, Verdict
from specfleet.judge import wording
from specfleet.judge.comparisons import p95_ceiling
from specfleet.judge.evidence import TrackEvidence, ratio, rounded
from specfleet.judge.guardrail import Look
from specfleet.judge.verdicts import LOAD_TOLERANCE, Check
from specfleet.stats import rate_ratio_bounds, wilson_bounds, z_score

MIX_TOLERANCE = 1.5
"""Prompt and output tokens per finished request within this factor (1/1.5x to 1.5x) of their values at
promotion count as the same length mix. Per-token latency depends on the lengths (each decoded token attends
over the prompt and the tokens before it; longer prompts put more prefill into the decoding steps), so a p95
taken on another mix is not comparable with the promoted one. The band is wider than the load's 1.25x
because a window's mean length is noisier than its request rate: request lengths are heavy-tailed
(log-normal, sigma about 0.8 to 1), so the mean of `minRequests` (100) requests can be 1.3-1.4x off the
traffic's at 99.9%; a factor of 1.5 is a move of the traffic itself, not sampling."""
MIX_PARTS = ("prompt", "output")


@dataclass(frozen=True)
class DriftCheck:
    """One look at the serving fleet against what it measured when promoted."""

    drifted: bool | None
    """True: surely drifted on some measure; False: every measure judged and within its limit; None: not
    enough evidence to tell (or the load is not comparable and acceptance was not judged)."""
    load_ratio: float | None
    """Per-pod load now / at promotion."""
    load_shifted: bool
    """The load ratio's bounds (Poisson, from the finished requests of the look and of the reference) lie
    wholly outside the comparable band: a traffic shift, not a rate read over too few requests."""
    reasons: tuple[str, ...]
    profile: TrafficProfile | None = None
    """The length mix now against promotion's; None without enough evidence (or no mix at promotion)."""


def _outside(value: float | None, tolerance: float) -> bool:
    return value is not None and not 1 / tolerance <= value <= tolerance


def _surely_outside(bounds: tuple[float, float], tolerance: float) -> bool:
    lower, upper = bounds
    return lower > tolerance or upper < 1 / tolerance


def length_mix(reference: DriftReference, now: TrackEvidence, guardrails: Guardrails) -> TrafficProfile | None:
    """Prompt and output tokens per finished request over the window (vLLM's token counters) against their
    values at promotion. None with fewer than `guardrails.minRequests` finished requests, or when neither
    length was measured at promotion. A part is `shifted` when its ratio is outside `MIX_TOLERANCE`."""
    if now.requests < guardrails.requests_needed:
        return None
    prompt = ratio(now.prompt_tokens, now.requests)
    output = ratio(now.generation_tokens, now.requests)
    prompt_ratio = ratio(prompt, reference.prompt_tokens_per_request)
    output_ratio = ratio(output, reference.output_tokens_per_request)
    if prompt_ratio is None and output_ratio is None:
        return None
    ratios = dict(zip(MIX_PARTS, (prompt_ratio, output_ratio), strict=True))
    return TrafficProfile(
        prompt_tokens_per_request=rounded(prompt, 1),
        output_tokens_per_request=rounded(output, 1),
        prompt_tokens_ratio=rounded(prompt_ratio, 3),
        output_tokens_ratio=rounded(output_ratio, 3),
        shifted=[part for part, value in ratios.items() if _outside(value, MIX_TOLERANCE)],
    )


def describe_mix(profile: TrafficProfile, parts: list[str] | None = None) -> str:
    """The shifted parts of the mix (or `parts`) with the numbers, e.g. `output tokens per request 384 (3.00x
    that at promotion)`."""
    values = {
        "prompt": (profile.prompt_tokens_per_request, profile.prompt_tokens_ratio),
        "output": (profile.output_tokens_per_request, profile.output_tokens_ratio),
    }
    shown = [
        f"{part} tokens per request {value:.0f} ({times:.2f}x that at promotion)"
        for part in (profile.shifted if parts is None else parts)
        if (value := values[part][0]) is not None and (times := values[part][1]) is not None
    ]
    return ", ".join(shown)


def drift(
    settings: DriftSpec,
    reference: DriftReference,
    now: TrackEvidence,
    guardrails: Guardrails,
    confidence: float,
) -> DriftCheck:
    """Compare the fleet's evidence over one window with what it measured as a canary at promotion.

    Alpha does not depend on the load, so it is judged whatever the load: drift when its upper bound is
    more than `maxAcceptanceDrop` below the promoted alpha. Latency is judged only at comparable per-pod
    load (within 25%): drift when the lower bound of its p95 is more than `maxTokenLatencyIncrease` above
    the promoted p95, and only at a comparable length mix (`length_mix`: prompt and output tokens per
    request within `MIX_TOLERANCE` of promotion's; an unmeasured mix does not stop it). Each bound is at
    `confidence` for this look alone; `DriftSpec.looks` looks in a row
    make the verdict (the state machine's hysteresis), which is what keeps noise from flapping it.
    """
    z = z_score((1 - confidence) / 2)
    look = Look(guardrails, now, now, lambda _: z, f"{confidence * 100:g}%")
    checks: list[Check] = []
    alpha = now.judgeable_alpha(guardrails.min_draft_tokens)
    if reference.acceptance_alpha is not None and alpha is not None:
        floor = reference.acceptance_alpha - settings.max_acceptance_drop
        _, upper = wilson_bounds(alpha * now.effective_drafts, now.effective_drafts, z)
        promoted = reference.acceptance_alpha
        text = f"acceptance alpha {alpha:.2f} (upper bound {upper:.2f}) vs {promoted:.2f} at promotion"
        verdict = Verdict.FAIL if upper < floor else Verdict.PASS
        checks.append(Check(verdict, f"{text}: {'below' if upper < floor else 'within'} the drop limit"))
    load = None
    if now.per_pod_load is not None and reference.requests_per_pod_per_second:
        load = now.per_pod_load / reference.requests_per_pod_per_second
    load_shifted = load is not None and _surely_outside(
        rate_ratio_bounds(load, now.requests, reference.requests, z), 1 + LOAD_TOLERANCE
    )
    mix = length_mix(reference, now, guardrails)
    latency = now.token_latency
    if reference.token_latency_p95_seconds and latency is not None and now.requests >= guardrails.requests_needed:
        ceiling = reference.token_latency_p95_seconds * (1 + settings.max_token_latency_increase)
        shifts = [f"per-pod load {load:.2f}x that at promotion"] if _outside(load, 1 + LOAD_TOLERANCE) else []
        if mix is not None and mix.shifted:
            shifts.append(describe_mix(mix))
        if shifts:
            checks.append(Check(Verdict.INCONCLUSIVE, f"{'; '.join(shifts)}: latency not comparable"))
        elif load is not None:
            check = p95_ceiling(
                look, "", label="per-token p95", data=latency, ceiling=ceiling, show=wording.ms, samples=now.requests
            )
            if check.verdict is Verdict.INCONCLUSIVE and check.estimate is not None and check.estimate <= ceiling:
                check = replace(check, verdict=Verdict.PASS)  # drift: not surely past is within; looks in a row decide
            checks.append(check)
    reasons = tuple(c.message for c in checks)
    if any(c.verdict is Verdict.FAIL for c in checks):
        return DriftCheck(drifted=True, load_ratio=load, load_shifted=load_shifted, reasons=reasons, profile=mix)
    judged = len(checks) == 2 and all(c.verdict is Verdict.PASS for c in checks)
    reasons = reasons or ("not enough evidence this window",)
    return DriftCheck(
        drifted=False if judged else None, load_ratio=load, load_shifted=load_shifted, reasons=reasons, profile=mix
    )
