"""Load-aware depth: gather load points of the served drafter, and keep a proposed batch-size schedule.

Points come from two places: an experiment's measured candidates (several k at one load) and, with
`spec.autoTune`, a look at the stable track every analysis window while the fleet is Healthy (its k at
whatever batch the traffic gives). From both the step-time model is fitted and a schedule proposed
(`autotune.schedule`); it is shown in status and an event, and only a change of it is news.
"""

from collections.abc import Sequence
from datetime import datetime

from specfleet.api.durations import parse_duration
from specfleet.api.spec import SpeculativeDeploymentSpec, SpeculativeMethod
from specfleet.api.status import (
    AutoTuneStatus,
    LoadPointStatus,
    Measurements,
    Phase,
    ScheduleProposal,
    Speedup,
    TunedConfig,
)
from specfleet.autotune.candidates import depth
from specfleet.autotune.schedule import LoadPoint, Proposal, depth_for_batch, engine_takes_schedule, propose_schedule
from specfleet.judge import speedup
from specfleet.render.manifests import revision
from specfleet.render.vllm_versions import VllmVersion
from specfleet.rollout.drift import judge_drift, reverted_revision
from specfleet.rollout.state import Pass
from specfleet.rollout.types import FleetLook

MAX_POINTS = 32
"""Load points kept (the oldest go first): enough for several batch levels of several depths."""
DEFAULT_MAX_BATCH = 256
"""Largest batch a schedule covers when `engine.maxNumSeqs` is unset (vLLM's usual `--max-num-seqs`)."""
PARALLEL_METHODS = frozenset({SpeculativeMethod.DFLASH, SpeculativeMethod.DSPARK})


def drafter_of(spec: SpeculativeDeploymentSpec) -> str:
    """Which drafter a spec serves: load points of one drafter say nothing about another's cost."""
    s = spec.speculative
    return " ".join(part for part in (s.method.value, s.model, s.revision) if part)


def with_points(
    p: Pass, served: SpeculativeDeploymentSpec, measured: Sequence[tuple[int, Measurements]], when: datetime
) -> Pass:
    """Add the (k, measurements) of the drafter the fleet serves (`served`), then propose again."""
    status = p.status.auto_tune or AutoTuneStatus()
    drafter = drafter_of(served)
    if status.drafter != drafter:
        status = AutoTuneStatus(drafter=drafter)
    points, per_position = list(status.points), status.acceptance_per_position
    mix = status.prefill_tokens_per_output_token
    for k, m in measured:
        if m.step_latency_mean_seconds and m.batch_size_mean and m.requests:
            points.append(
                LoadPointStatus(
                    k=k,
                    batch=m.batch_size_mean,
                    step_seconds=m.step_latency_mean_seconds,
                    samples=m.requests,
                    prefill_tokens=m.prefill_tokens_per_step or 0.0,
                    time=when,
                )
            )
        if len(m.acceptance_per_position) >= len(per_position):
            per_position = m.acceptance_per_position
        if m.prefill_tokens_per_output_token is not None:
            mix = m.prefill_tokens_per_output_token
    status = status.model_copy(
        update={
            "points": points[-MAX_POINTS:],
            "acceptance_per_position": per_position,
            "prefill_tokens_per_output_token": mix,
        }
    )
    return _propose(p.with_status(auto_tune=status), served)


def _propose(p: Pass, served: SpeculativeDeploymentSpec) -> Pass:
    status = p.status.auto_tune
    assert status is not None
    points = [LoadPoint(pt.k, pt.batch, pt.step_seconds, pt.samples, pt.prefill_tokens) for pt in status.points]
    if not points:
        return p
    current = depth(served)
    measured = [pt.k for pt in points]
    ks = range(min(measured), max(measured) + 1)  # interpolated between depths measured, never extrapolated
    proposal = propose_schedule(
        points,
        status.acceptance_per_position,
        ks,
        served.engine.max_num_seqs or DEFAULT_MAX_BATCH,
        current_k=current,
        current_schedule=served.speculative.num_speculative_tokens_per_batch_size or (),
        parallel_drafter=served.speculative.method in PARALLEL_METHODS or bool(served.speculative.parallel_drafting),
        prefill_tokens_per_output_token=status.prefill_tokens_per_output_token or 0.0,
    )
    new = _as_status(proposal, p.obs.now)
    old = status.proposal
    p = p.with_status(auto_tune=status.model_copy(update={"proposal": new}))
    if new.schedule and (old is None or old.schedule != new.schedule):
        rows = ", ".join(f"{r.start}-{r.end}: k={r.num_tokens}" for r in new.schedule)
        p = p.with_event("ScheduleProposed", f"batch-size schedule of the depth proposed: {rows}; {new.reason}")
    return p


def _as_status(proposal: Proposal, now: datetime) -> ScheduleProposal:
    predictions = [
        f"batch {b.start}-{b.end}: "
        + ", ".join(f"k={k} {seconds * 1000:.2f} ms" for k, seconds in b.seconds_per_token)
        + (" (beyond the batches measured)" if b.beyond_measured else "")
        for b in proposal.buckets
    ]
    return ScheduleProposal(
        schedule=list(proposal.schedule) if proposal.schedule else None,
        disable_above=proposal.disable_above,
        reason=proposal.reason[:1024],
        predictions=[text[:1024] for text in predictions[:32]],
        time=now,
    )


def tuned_revision(p: Pass) -> str:
    """The revision the fleet should serve: the spec's; with `onDrift: Rollback` after a drift, the reference
    config; with `autoTune.apply`, the spec's with the applied schedule. Each is canaried and promoted as
    any revision."""
    desired = p.obs.desired_revision
    assert desired is not None
    reverted = reverted_revision(p, desired)
    if reverted is not None:
        return reverted
    tuned = p.status.auto_tune.tuned if p.status.auto_tune else None
    applying = p.spec.auto_tune is not None and p.spec.auto_tune.apply
    return tuned.revision if applying and tuned is not None and tuned.base == desired else desired


def _apply(p: Pass, served: SpeculativeDeploymentSpec) -> Pass:
    """With `autoTune.apply`, a proposed schedule becomes the revision to serve (canaried next pass)."""
    status, desired = p.status.auto_tune, p.obs.desired_revision
    proposal = status.proposal if status else None
    if p.spec.auto_tune is None or not p.spec.auto_tune.apply or status is None or desired is None:
        return p
    if proposal is None or not proposal.schedule:
        return p
    if not engine_takes_schedule(VllmVersion.parse(served.engine.vllm_version)):
        return p  # the proposal's reason and disableAbove say what an older engine cannot do
    depth_now = depth(served)
    speculative = served.speculative.model_copy(
        update={
            "num_speculative_tokens_per_batch_size": proposal.schedule,
            "num_speculative_tokens": max(depth_now, *(row.num_tokens for row in proposal.schedule)),
        }
    )
    spec = served.model_copy(update={"speculative": speculative})
    tuned = revision(spec)
    if tuned in (p.status.stable_revision, p.status.rejected_revision):
        return p
    applied = TunedConfig(base=desired, revision=tuned, serving=spec.serving(), time=p.obs.now)
    p = p.with_status(auto_tune=status.model_copy(update={"tuned": applied}))
    return p.with_event("ScheduleApplied", f"revision {tuned} serves the proposed schedule; canaried next").waking_at(
        p.obs.now
    )


def _speedup(p: Pass, look: FleetLook) -> Speedup | None:
    """Stable against the holdback over the look's window, into status.holdback (None without one)."""
    status = p.status.holdback
    if look.evidence is None or look.holdback is None or status is None or status.revision is None:
        return None
    rollout = p.spec.rollout
    return speedup(look.evidence, look.holdback, rollout.guardrails, rollout.analysis.confidence, look.time)


def look_at_fleet(p: Pass) -> Pass:
    """While Healthy with `spec.autoTune`, `rollout.drift` or `rollout.holdback` and a Prometheus: measure the
    stable track (and the holdback) every analysis window, and take in a fresh look (speed-up, load points,
    drift)."""
    watched = any(x is not None for x in (p.spec.auto_tune, p.spec.rollout.drift, p.spec.rollout.holdback))
    if not watched or not p.obs.prometheus or p.status.phase is not Phase.HEALTHY:
        return p
    stable = p.status.stable_revision
    look = p.obs.fleet_look
    served = p.served_spec(stable)
    if look is not None and look.revision == stable:
        p = p.with_status(
            auto_tune=(p.status.auto_tune or AutoTuneStatus()).model_copy(update={"last_look": look.time})
        )
        if look.evidence is not None:
            measured = _speedup(p, look)
            if measured is not None and p.status.holdback is not None:
                p = p.with_status(holdback=p.status.holdback.model_copy(update={"speedup": measured}))
            p = judge_drift(p, look.evidence, measured)
        if look.stable is not None and p.spec.auto_tune is not None:
            k = depth(served)
            if look.stable.batch_size_mean and served.speculative.num_speculative_tokens_per_batch_size:
                rows = served.speculative.num_speculative_tokens_per_batch_size
                k = depth_for_batch(k, rows, max(1, round(look.stable.batch_size_mean)))
            p = _apply(with_points(p, served, [(k, look.stable)], look.time), served)
    last = p.status.auto_tune.last_look if p.status.auto_tune else None
    due = last + parse_duration(p.spec.rollout.analysis.window) if last else p.obs.now
    return p.but(fleet_look_due=p.obs.now >= due).waking_at(max(due, p.obs.now))
