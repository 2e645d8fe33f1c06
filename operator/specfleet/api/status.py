"""`SpeculativeDeployment.status`: all rollout state, so a restarted operator loses nothing."""

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import Field, JsonValue, WithJsonSchema

from specfleet.api.base import ApiModel
from specfleet.api.spec import BatchSizeDepth

HISTORY_MAX = 50
ShortText = Annotated[str, Field(max_length=1024)]
ServingSnapshot = Annotated[
    dict[str, JsonValue], WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True})
]


class Phase(StrEnum):
    """Where the fleet is, in the words Argo Rollouts users already know."""

    PENDING = "Pending"
    PROGRESSING = "Progressing"
    PAUSED = "Paused"
    HEALTHY = "Healthy"
    DEGRADED = "Degraded"
    ABORTED = "Aborted"
    ROLLED_BACK = "RolledBack"


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(ApiModel):
    """A Kubernetes-convention condition (`type`, `status`, `reason`, `message`)."""

    type: Annotated[str, Field(max_length=316)]
    status: ConditionStatus
    reason: Annotated[str, Field(max_length=1024)] = ""
    """CamelCase, machine-readable cause."""
    message: Annotated[str, Field(max_length=32768)] = ""
    last_transition_time: datetime | None = None
    observed_generation: int | None = None


class Verdict(StrEnum):
    """The four outcomes of an analysis; each has its own policy."""

    PASS = "Pass"
    FAIL = "Fail"
    INCONCLUSIVE = "Inconclusive"
    ERROR = "Error"


class Measurements(ApiModel):
    """What Prometheus said about one track over the analysis's evidence range. Missing values stay unset."""

    acceptance_alpha: float | None = None
    """Per-token acceptance alpha: drafts whose first token was accepted / drafts. Does not depend on k."""
    acceptance_rate: float | None = None
    """Accepted / drafted tokens, vLLM's dashboard ratio: E[accepted] / k, so it falls as k grows."""
    mean_accepted_length: float | None = None
    """Tokens per target pass, the bonus token included (at most k+1)."""
    acceptance_per_position: Annotated[list[float], Field(max_length=64)] = []
    """Share of drafts whose token at position i was accepted."""
    token_latency_mean_seconds: float | None = None
    """Mean per-token latency over finished requests: what an experiment ranks candidates by (a deeper k
    spreads requests' latencies more, so the median is biased by k and the mean is not)."""
    token_latency_p50_seconds: float | None = None
    """Median per-token latency: each finished request's decode time / (output tokens - 1)."""
    token_latency_p95_seconds: float | None = None
    """p95 per-token latency over requests: what the latency guardrail judges."""
    step_latency_p95_seconds: float | None = None
    """p95 engine-step latency (vLLM's inter-token latency, one observation per request per step)."""
    step_latency_mean_seconds: float | None = None
    """Mean engine-step latency: with the batch size, what the load-aware depth is fitted to."""
    batch_size_mean: float | None = None
    """Requests running per pod, averaged over the range (`vllm:num_requests_running`): the batch size."""
    ttft_p95_seconds: float | None = None
    error_rate: float | None = None
    """Requests that ended in error / finished requests (client aborts excluded)."""
    generation_tokens_per_second: float | None = None
    requests_per_pod_per_second: float | None = None
    """Finished requests per second per pod: the per-pod load the tracks were compared at."""
    generation_tokens_per_pod_per_second: float | None = None
    """Output tokens per second per pod."""
    served_fraction: float | None = None
    """Finished requests / offered requests (finished + growth of the waiting queue): below 1 when the
    track cannot keep up with its load. What `maxThroughputDrop` judges."""
    queue_time_p95_seconds: float | None = None
    """p95 time finished requests waited before they were scheduled (`vllm:request_queue_time_seconds`)."""
    kv_cache_usage_mean: float | None = None
    """KV-cache usage (0-1) averaged over the range and the track's pods."""
    kv_cache_usage_max: float | None = None
    """Highest KV-cache usage (0-1) scraped on any of the track's pods over the range."""
    preemptions_per_second: float | None = None
    """Requests preempted per second over the track (KV cache exhausted); unset when not exposed."""
    draft_tokens: float | None = None
    """Tokens drafted in the evidence range (the sample size behind the acceptance measures)."""
    requests: float | None = None
    """Requests finished in the evidence range (the sample size behind latency and errors)."""
    prompt_tokens_per_request: float | None = None
    """Prompt tokens per finished request (`vllm:prompt_tokens_total` / finished requests): the prompt mix."""
    output_tokens_per_request: float | None = None
    """Output tokens per finished request (`vllm:generation_tokens_total` / finished requests): the output mix."""


class GuardrailCheck(ApiModel):
    """One guardrail at one analysis: its estimate, its confidence bounds, the limit, and what it still needs."""

    guardrail: Annotated[str, Field(max_length=64)]
    """The guardrail's field in `rollout.guardrails`, e.g. `maxTokenLatencyP95Regression`."""
    verdict: Verdict
    estimate: float | None = None
    """In the limit's unit: a relative change (0.07 = 7% worse than stable), a share, or seconds."""
    lower: float | None = None
    upper: float | None = None
    """The confidence sequence's bounds on the estimate (valid at every look at once)."""
    limit: float | None = None
    needs: ShortText | None = None
    """For an Inconclusive check: about how much more evidence would decide it, at the current rate."""


class Analysis(ApiModel):
    """The last judgement of a canary, with the evidence."""

    time: datetime
    revision: Annotated[str, Field(max_length=63)]
    step: int
    verdict: Verdict
    reasons: Annotated[list[ShortText], Field(max_length=32)] = []
    """Why, with the numbers and the confidence bound that decided each guardrail (or what was missing)."""
    look: int = 1
    """Which analysis of this canary revision it was (the trailing-window check spends its error by look)."""
    evidence_seconds: int | None = None
    """Length of the range the evidence was read over: from the step's start (its canary Ready, or the last
    counted failure), cut one scrape after the youngest pod was first scraped."""
    checks: Annotated[list[GuardrailCheck], Field(max_length=16)] = []
    """Every guardrail judged at this analysis, Pass or not."""
    canary: Measurements = Measurements()
    stable: Measurements = Measurements()


class Outcome(StrEnum):
    PROMOTED = "Promoted"
    ROLLED_BACK = "RolledBack"
    ABORTED = "Aborted"
    SUPERSEDED = "Superseded"
    KEPT_STABLE = "KeptStable"
    """An experiment found no candidate that beats stable: nothing was promoted."""


class HistoryEntry(ApiModel):
    """One revision that was canaried, and how it ended."""

    revision: Annotated[str, Field(max_length=63)]
    outcome: Outcome
    time: datetime
    reason: ShortText = ""
    summary: ShortText = ""
    """The speculative config in a few words, e.g. `eagle3 k=5 yuhuili/EAGLE3-LLaMA3.1-Instruct-8B`."""
    acceptance_alpha: float | None = None
    acceptance_rate: float | None = None
    token_latency_p95_seconds: float | None = None
    """p95 per-token latency of the last analysis of this revision."""
    serving: ServingSnapshot | None = None
    """The serving part of the spec (model, speculative, engine, accelerator) of this revision, for undo."""


class CandidateState(StrEnum):
    PENDING = "Pending"
    MEASURING = "Measuring"
    MEASURED = "Measured"
    FAILED = "Failed"
    """A guardrail failed, its pods never got Ready, or its preflight failed: it cannot win."""
    SAME_AS_STABLE = "SameAsStable"
    """It is what stable serves: nothing to measure, it cannot beat stable."""
    CHOSEN = "Chosen"
    LOST = "Lost"


class CandidateResult(ApiModel):
    """One candidate of an experiment and what was measured of it, next to stable in the same window."""

    index: int
    """Its place in `spec.autoTune.candidates`."""
    revision: Annotated[str, Field(max_length=63)]
    summary: ShortText = ""
    num_speculative_tokens: int | None = None
    """k (0 without speculation), the last tie-break."""
    state: CandidateState = CandidateState.PENDING
    token_latency_ratio: float | None = None
    """Its mean per-token latency / stable's over the same window: what the experiment ranks by."""
    throughput_ratio: float | None = None
    """Its output tokens/s per pod / stable's over the same window: the first tie-break."""
    canary: Measurements | None = None
    stable: Measurements | None = None
    reason: ShortText = ""
    started_at: datetime | None = None
    """Side by side: when its slice was asked for (its pods must be Ready within `rollout.progressDeadline`)."""
    ready_at: datetime | None = None
    """Side by side: when every pod of its slice was Ready; its evidence starts here."""
    looks: int = 0
    """Side by side: analyses of its slice so far (the judge's look number)."""
    looked_at: datetime | None = None
    """Side by side: its last analysis."""


class ExperimentStatus(ApiModel):
    """An experiment over `spec.autoTune.candidates`: every candidate's measurements, and the choice."""

    revision: Annotated[str, Field(max_length=63)]
    """The revision of the spec (with its candidates) the experiment is for."""
    mode: ShortText = ""
    """How the candidates are measured: side by side, or one after another on the canary track (and why)."""
    side_by_side: bool = False
    """Every candidate on its own slice (`<name>-candidate-<i>`) beside stable at once, over the same windows."""
    candidates: Annotated[list[CandidateResult], Field(max_length=8)] = []
    chosen: int | None = None
    """Index of the winning candidate, canaried (and then served) under `revision`."""
    started_at: datetime | None = None
    ended_at: datetime | None = None
    """When the choice was made (or every candidate was found wanting)."""


class LoadPointStatus(ApiModel):
    """One measured mean step time of the served drafter at a depth and a batch size, over one window."""

    k: int
    batch: float
    """Requests running per pod, averaged over the window."""
    step_seconds: float
    samples: float
    """Finished requests behind the measurement (its weight in the fit)."""
    time: datetime


class ScheduleProposal(ApiModel):
    """A batch-size schedule of the depth derived from the load points, or why there is none."""

    schedule: Annotated[list[BatchSizeDepth], Field(max_length=32)] | None = None
    """Rows for `speculative.numSpeculativeTokensPerBatchSize`; unset: no change is proposed."""
    disable_above: int | None = None
    """For engines without the schedule: the largest batch that still pays for speculation."""
    reason: ShortText = ""
    predictions: Annotated[list[ShortText], Field(max_length=32)] = []
    """Per batch range, the predicted per-token latency of each depth: why each range gets its depth."""
    time: datetime | None = None


class TunedConfig(ApiModel):
    """The served config with the proposed schedule applied (`spec.autoTune.apply`): canaried as a revision."""

    base: Annotated[str, Field(max_length=63)]
    """The revision of the spec it tunes: a change of the spec leaves it behind."""
    revision: Annotated[str, Field(max_length=63)]
    serving: ServingSnapshot
    time: datetime | None = None


class AutoTuneStatus(ApiModel):
    """What the fleet measured of its drafter at several loads, and the load-aware depth it suggests."""

    drafter: ShortText = ""
    """The drafter the points are of (method, model, revision): another drafter starts the points anew."""
    acceptance_per_position: Annotated[list[float], Field(max_length=64)] = []
    """The longest per-position acceptance measured of that drafter: its tokens per step at any k."""
    points: Annotated[list[LoadPointStatus], Field(max_length=32)] = []
    last_look: datetime | None = None
    """The last time the fleet was measured while Healthy."""
    proposal: ScheduleProposal | None = None
    tuned: TunedConfig | None = None
    """The schedule applied (with `spec.autoTune.apply`): served under its own revision once promoted."""


class DriftReference(ApiModel):
    """What the serving revision measured as a canary when it was promoted: the drift baseline."""

    revision: Annotated[str, Field(max_length=63)]
    time: datetime
    acceptance_alpha: float | None = None
    token_latency_p95_seconds: float | None = None
    requests_per_pod_per_second: float | None = None
    prompt_tokens_per_request: float | None = None
    """Prompt tokens per finished request in that analysis: the length mix latency is compared at. Unset
    when the analysis had fewer than `guardrails.minRequests` requests."""
    output_tokens_per_request: float | None = None
    """Output tokens per finished request in that analysis (unset likewise)."""


class TrafficProfile(ApiModel):
    """The length mix of the last look that could estimate it, against the mix at promotion."""

    prompt_tokens_per_request: float | None = None
    """Prompt tokens per finished request over the window (`vllm:prompt_tokens_total` / finished requests)."""
    output_tokens_per_request: float | None = None
    """Output tokens per finished request over the window (`vllm:generation_tokens_total` / finished)."""
    prompt_tokens_ratio: float | None = None
    """Prompt tokens per finished request now / at promotion."""
    output_tokens_ratio: float | None = None
    """Output tokens per finished request now / at promotion."""
    shifted: Annotated[list[Annotated[str, Field(max_length=16)]], Field(max_length=2)] = []
    """What is outside the comparable band (`prompt`, `output`): per-token latency is then not compared."""


class DriftStatus(ApiModel):
    """Drift of the serving revision from what it measured at promotion (with `rollout.drift`)."""

    reference: DriftReference | None = None
    drifted_looks: int = 0
    """Consecutive looks that found drift."""
    steady_looks: int = 0
    """Consecutive looks that found none."""
    message: ShortText = ""
    """The last look's comparison, with the numbers."""
    load_ratio: float | None = None
    """The last look's per-pod load / the load at promotion: far from 1 is a traffic shift."""
    profile: TrafficProfile | None = None
    """The prompt/output length mix against promotion's: far from 1 is a traffic shift too."""
    previous: ServingSnapshot | None = None
    """What stable served before this revision was promoted: the config `onDrift: Rollback` returns to."""
    revert: TunedConfig | None = None
    """With `onDrift: Rollback`: the reference config the fleet is rolled back to (canaried)."""


class PreflightStatus(ApiModel):
    """The last preflight check of a new drafter (a Job in the serving image), which gates its canary."""

    revision: Annotated[str, Field(max_length=63)]
    state: ShortText
    """Running, Passed or Failed."""
    message: ShortText = ""
    time: datetime | None = None


class TrackReplicas(ApiModel):
    stable: int = 0
    canary: int = 0
    holdback: int = 0


class Speedup(ApiModel):
    """Stable against the holdback over one window: the benefit of the serving config over the reference."""

    time: datetime
    estimate: float | None = None
    """Holdback mean per-token latency / stable's: 1.3 = stable's tokens come 30% faster (None: unmeasured)."""
    lower: float | None = None
    """Lower confidence bound (at `analysis.confidence`, this window alone)."""
    upper: float | None = None
    stable_token_latency_mean_seconds: float | None = None
    holdback_token_latency_mean_seconds: float | None = None
    throughput_ratio: float | None = None
    """Stable's output tokens/s per pod / the holdback's (about 1 while both keep up with the same load)."""
    load_ratio: float | None = None
    """Stable's per-pod request rate / the holdback's: the split is fair when near 1."""
    message: ShortText = ""


class HoldbackStatus(ApiModel):
    """The control group (with `rollout.holdback`): what it serves and the speed-up measured against it."""

    revision: Annotated[str, Field(max_length=63)] | None = None
    summary: ShortText = ""
    """The reference config in a few words."""
    serving: ServingSnapshot | None = None
    """With `reference: PreviousStable`: what stable served before its last promotion."""
    message: ShortText = ""
    """Why no holdback runs, or how its traffic is split."""
    speedup: Speedup | None = None
    """The last window's measurement (while Healthy)."""


class SpeculativeDeploymentStatus(ApiModel):
    """Observed state and the rollout's progress."""

    phase: Phase = Phase.PENDING
    observed_generation: int | None = None
    conditions: Annotated[list[Condition], Field(max_length=16)] = []
    stable_revision: Annotated[str, Field(max_length=63)] | None = None
    canary_revision: Annotated[str, Field(max_length=63)] | None = None
    current_step: int | None = None
    """Index into spec.rollout.steps of the step in progress."""
    canary_weight: Annotated[int, Field(ge=0, le=100)] = 0
    """Canary share of traffic, percent."""
    step_started_at: datetime | None = None
    """When the current step began; its canary replicas must be Ready within the progress deadline from here."""
    step_ready_at: datetime | None = None
    """When the current step's canary replicas were all Ready: its pause and analyses count from here."""
    canary_started_at: datetime | None = None
    failed_analyses: int = 0
    """Failed analyses of the current canary revision."""
    analyses: int = 0
    """Analyses of the current canary revision so far (the next one is look `analyses + 1`)."""
    evidence_since: datetime | None = None
    """Earliest moment the next analysis may read evidence from: when the current step's canary replicas
    were all Ready, or the last counted failure (so each failure counts new evidence only)."""
    unjudged_since: datetime | None = None
    """Start of the current run of inconclusive or errored analyses."""
    no_data_seconds: int = 0
    """Time the current canary spent in Inconclusive verdicts (with a baseline) since its last Pass or Fail:
    `analysis.onNoData` acts when it reaches `onNoData.after`. Time in Error verdicts is not counted here."""
    provider_error_seconds: int = 0
    """Time the current canary spent in Error verdicts since its last Pass or Fail: `analysis.onProviderError`
    acts when it reaches `onProviderError.after`."""
    canary_restarts_accepted: Annotated[int, Field(ge=0)] | None = None
    """Canary container restarts a human accepted by promoting a canary paused for crashing (autoRollback
    off): only restarts beyond them count against `guardrails.maxCanaryRestarts` and OOM kills."""
    step_ready_seconds: int = 0
    """Time the current step's canary replicas were all Ready before they last lost readiness: the progress
    deadline is pushed back by it, so it bounds the step's total not-Ready time (a flapping canary ends)."""
    retiring_revision: Annotated[str, Field(max_length=63)] | None = None
    """A canary that left the rollout (aborted, rolled back, promoted, reverted) whose Deployment is kept
    until its traffic has drained: taken off traffic first (once stable has a Ready pod), deleted later."""
    traffic_off_at: datetime | None = None
    """When the retiring canary lost its traffic; its Deployment is deleted a drain delay later."""
    replicas: int = 0
    """Ready replicas over all tracks (the scale subresource reads it)."""
    ready_replicas: TrackReplicas = TrackReplicas()
    selector: Annotated[str, Field(max_length=1024)] = ""
    """Label selector of all the fleet's pods, for the scale subresource."""
    last_analysis: Analysis | None = None
    history: Annotated[list[HistoryEntry], Field(max_length=HISTORY_MAX)] = []
    stable_serving: ServingSnapshot | None = None
    """The serving part of the spec (model, speculative, engine, accelerator) at the stable revision, so the
    stable track can be rendered again while the spec already describes the canary."""
    rejected_revision: Annotated[str, Field(max_length=63)] | None = None
    """A revision that was rolled back or aborted: not canaried again until the spec changes or a retry."""
    experiment: ExperimentStatus | None = None
    """The last experiment over `spec.autoTune.candidates` (kept after it ends, for its table)."""
    preflight: PreflightStatus | None = None
    """The last preflight check of a canary's new drafter."""
    drift: DriftStatus | None = None
    """Drift of the serving revision since its promotion (with `rollout.drift`)."""
    holdback: HoldbackStatus | None = None
    """The control group and the measured speed-up over it (with `rollout.holdback`)."""
    auto_tune: AutoTuneStatus | None = None
    """Load points and the proposed batch-size schedule of the depth (with `spec.autoTune`)."""
    acknowledged_commands: Annotated[dict[str, Annotated[str, Field(max_length=256)]], Field(max_length=8)] = {}
    """Command annotations already acted on (name -> value), so a restart never acts on one twice."""
