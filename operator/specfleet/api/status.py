"""`SpeculativeDeployment.status`: all rollout state, so a restarted operator loses nothing."""

from datetime import datetime
from enum import StrEnum
from typing import Annotated, TypedDict

from pydantic import Field, JsonValue, WithJsonSchema

from specfleet.api.base import ApiModel
from specfleet.api.custom_guardrails import MAX_CUSTOM_GUARDRAILS
from specfleet.api.spec import BatchSizeDepth

HISTORY_MAX = 50
NOTIFIED_MAX = 8
"""Transitions `status.notified` remembers: more than a rollout makes before it settles at a gate or ends."""
ShortText = Annotated[str, Field(max_length=1024)]
ServingSnapshot = Annotated[
    dict[str, JsonValue], WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True})
]


MAX_CHECKS = 16 + MAX_CUSTOM_GUARDRAILS
"""Checks one analysis can hold: the built-in guardrails (fewer than 16) and every custom one."""
MAX_REASONS = 2 * MAX_CHECKS
"""Reasons one analysis keeps (a check may give two: its own, and what it still needs); more are cut."""


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
    """The condition's name, e.g. `Available` (what `kubectl wait --for=condition=<type>` names)."""
    status: ConditionStatus
    """`True`, `False` or `Unknown`."""
    reason: Annotated[str, Field(max_length=1024)] = ""
    """CamelCase, machine-readable cause."""
    message: Annotated[str, Field(max_length=32768)] = ""
    """The cause in words, with the numbers behind it."""
    last_transition_time: datetime | None = None
    """When `status` last changed."""
    observed_generation: int | None = None
    """The `metadata.generation` of the spec the condition was set for."""


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
    prefill_tokens_per_step: float | None = None
    """Prompt tokens prefilled per engine step per pod: prompt tokens less prefix-cache hits / inter-token-
    latency observations x the batch (vLLM observes the step latency once per decoding request per step).
    The load-aware depth counts them with the tokens a step verifies."""
    prefill_tokens_per_output_token: float | None = None
    """Prompt tokens prefilled (less prefix-cache hits) / output tokens: the traffic's mix as the engine's
    passes see it."""
    ttft_p95_seconds: float | None = None
    """p95 time to first token over finished requests, in seconds."""
    error_rate: float | None = None
    """Requests that ended in error / finished requests (client aborts excluded)."""
    generation_tokens_per_second: float | None = None
    """Output tokens per second over all the track's pods."""
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
    """`Pass` when the bound shows the canary within the limit, `Fail` when it is surely past it, `Inconclusive`
    in between or with too little evidence, `Error` when Prometheus could not answer."""
    estimate: float | None = None
    """In the limit's unit: a relative change (0.07 = 7% worse than stable), a share, or seconds."""
    lower: float | None = None
    """Lower confidence bound on the estimate (a confidence sequence: valid at every look at once)."""
    upper: float | None = None
    """Upper confidence bound on the estimate (likewise)."""
    limit: float | None = None
    """The guardrail's limit from `rollout.guardrails`, in the estimate's unit; unset for a guardrail without
    one set."""
    needs: ShortText | None = None
    """For an Inconclusive check: about how much more evidence would decide it, at the current rate."""


class OutputPairs(ApiModel):
    """Greedy prompt pairs compared for one canary revision (`guardrails.outputEquivalence`), kept across
    analyses and operator restarts. Counts and positions only: never a prompt, nor an answer."""

    prompts: int
    """Prompts in the set sent in turn."""
    prompts_hash: Annotated[str, Field(max_length=64)]
    """Digest of the prompt set: a changed set starts the count over."""
    next_prompt: int = 0
    """Index of the next prompt to send."""
    pairs: int = 0
    """Prompt pairs compared (both tracks answered)."""
    identical: int = 0
    """Pairs whose token ids were identical."""
    first_divergences: Annotated[list[int], Field(max_length=20)] = []
    """0-based token positions where the first differing pairs diverged (the earliest 20 found)."""
    failed_requests: int = 0
    """Requests that got no usable answer (timeout, error status, no token ids): not pairs, never judged."""
    since: datetime | None = None
    """When the first pair was compared: the rate at which pairs arrive."""
    last_error: ShortText | None = None
    """Why the last analysis compared fewer pairs than it tried (no Ready pod, a pod unreachable, ...)."""


class Analysis(ApiModel):
    """The last judgement of a canary, with the evidence."""

    time: datetime
    """When the analysis was made."""
    revision: Annotated[str, Field(max_length=63)]
    """The canary revision it judged."""
    step: int
    """The step it was made in: an index into `spec.rollout.steps`, 0 for the first."""
    verdict: Verdict
    """`Pass` (every guardrail shown within its limit), `Fail` (one surely past it), `Inconclusive` (too little
    or unusable evidence to decide) or `Error` (Prometheus unreachable, or its auth Secret missing)."""
    reasons: Annotated[list[ShortText], Field(max_length=MAX_REASONS)] = []
    """Why, with the numbers and the confidence bound that decided each guardrail (or what was missing)."""
    look: int = 1
    """Which analysis of this canary revision it was (the trailing-window check spends its error by look)."""
    evidence_seconds: int | None = None
    """Length of the range the evidence was read over: from the step's start (its canary Ready, or the last
    counted failure), each pod's series counted from its first sample in it; for a failure a watch found at a
    new scrape, the trailing range that failed."""
    checks: Annotated[list[GuardrailCheck], Field(max_length=MAX_CHECKS)] = []
    """Every guardrail judged at this analysis, Pass or not."""
    canary: Measurements = Measurements()
    """What Prometheus said about the canary track over the evidence range."""
    stable: Measurements = Measurements()
    """What Prometheus said about the stable track over the same range: the baseline."""
    output_pairs: OutputPairs | None = None
    """The greedy prompt pairs compared so far for this canary revision (`guardrails.outputEquivalence`)."""


class Outcome(StrEnum):
    PROMOTED = "Promoted"
    ROLLED_BACK = "RolledBack"
    ABORTED = "Aborted"
    SUPERSEDED = "Superseded"
    KEPT_STABLE = "KeptStable"
    """An experiment found no candidate that beats stable: nothing was promoted."""
    CREATED = "Created"
    """The revision the fleet was created with: stable from the start, never canaried (`undo` can return to it)."""


class HistoryEntry(ApiModel):
    """One revision that served or was canaried, and how it ended (or `Created`: the fleet started on it)."""

    revision: Annotated[str, Field(max_length=63)]
    """The revision that was canaried."""
    outcome: Outcome
    """`Promoted`; `RolledBack` (a guardrail failed, or it crashed); `Aborted` (by a user, a failed preflight or
    the progress deadline); `Superseded` (the spec moved on before it ended); `KeptStable` (an experiment
    found no candidate that beats stable, so nothing was promoted)."""
    time: datetime
    """When it ended."""
    reason: ShortText = ""
    """Why it ended so, in words."""
    summary: ShortText = ""
    """The speculative config in a few words, e.g. `eagle3 k=5 yuhuili/EAGLE3-LLaMA3.1-Instruct-8B`."""
    acceptance_alpha: float | None = None
    """Per-token acceptance alpha at its last analysis."""
    acceptance_rate: float | None = None
    """Accepted / drafted tokens at its last analysis."""
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
    """The revision the candidate's config renders to."""
    summary: ShortText = ""
    """Its speculative config in a few words, e.g. `eagle3 k=3`."""
    num_speculative_tokens: int | None = None
    """k (0 without speculation), the last tie-break."""
    state: CandidateState = CandidateState.PENDING
    """`Pending` (not measured yet), `Measuring`, `Measured`, `Failed` (a guardrail failed, its pods never got
    Ready, or its preflight failed: it cannot win), `SameAsStable` (it is what stable serves: nothing to
    measure), `Chosen` (the winner, canaried through every step) or `Lost`."""
    token_latency_ratio: float | None = None
    """Its mean per-token latency / stable's over the same window: what the experiment ranks by."""
    throughput_ratio: float | None = None
    """Its output tokens/s per pod / stable's over the same window: the first tie-break."""
    canary: Measurements | None = None
    """What was measured of the candidate."""
    stable: Measurements | None = None
    """What was measured of stable over the same window."""
    reason: ShortText = ""
    """Why it is in its state: what failed, or how it compared with stable."""
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
    """Every candidate, in the order of `spec.autoTune.candidates`, with what was measured of it."""
    chosen: int | None = None
    """Index of the winning candidate, canaried (and then served) under `revision`."""
    started_at: datetime | None = None
    """When the experiment started."""
    ended_at: datetime | None = None
    """When the choice was made (or every candidate was found wanting)."""


class LoadPointStatus(ApiModel):
    """One measured mean step time of the served drafter at a depth and a batch size, over one window."""

    k: int
    """The depth (tokens drafted per step) the fleet served."""
    batch: float
    """Requests running per pod, averaged over the window."""
    step_seconds: float
    """Mean engine-step time at that depth and batch size, in seconds."""
    samples: float
    """Finished requests behind the measurement (its weight in the fit)."""
    prefill_tokens: float = 0.0
    """Prompt tokens prefilled per step at that load: computed in the same passes as the drafts."""
    time: datetime
    """When it was measured."""


class ScheduleProposal(ApiModel):
    """A batch-size schedule of the depth derived from the load points, or why there is none."""

    schedule: Annotated[list[BatchSizeDepth], Field(max_length=32)] | None = None
    """Rows for `speculative.numSpeculativeTokensPerBatchSize`; unset: no change is proposed."""
    disable_above: int | None = None
    """For engines without the schedule: the largest batch that still pays for speculation."""
    reason: ShortText = ""
    """Why this schedule, or why there is none (e.g. too few load points yet)."""
    predictions: Annotated[list[ShortText], Field(max_length=32)] = []
    """Per batch range, the predicted per-token latency of each depth: why each range gets its depth."""
    time: datetime | None = None
    """When it was proposed."""


class TunedConfig(ApiModel):
    """The served config with the proposed schedule applied (`spec.autoTune.apply`): canaried as a revision."""

    base: Annotated[str, Field(max_length=63)]
    """The revision of the spec it tunes: a change of the spec leaves it behind."""
    revision: Annotated[str, Field(max_length=63)]
    """The revision this config renders to."""
    serving: ServingSnapshot
    """The serving part of the spec (model, speculative, engine, accelerator) its pods run."""
    time: datetime | None = None
    """When it was made."""


class AutoTuneStatus(ApiModel):
    """What the fleet measured of its drafter at several loads, and the load-aware depth it suggests."""

    drafter: ShortText = ""
    """The drafter the points are of (method, model, revision): another drafter starts the points anew."""
    acceptance_per_position: Annotated[list[float], Field(max_length=64)] = []
    """The longest per-position acceptance measured of that drafter: its tokens per step at any k."""
    prefill_tokens_per_output_token: float | None = None
    """The traffic's mix at the last measurement: prompt tokens prefilled (less prefix-cache hits) / output
    tokens. With the tokens per step, it says how many prompt tokens a step at a given batch prefills (a
    request enters as one finishes)."""
    points: Annotated[list[LoadPointStatus], Field(max_length=32)] = []
    """The latest mean step times measured at the depths and batch sizes the fleet served: what the
    schedule is fitted to."""
    last_look: datetime | None = None
    """The last time the fleet was measured while Healthy."""
    proposal: ScheduleProposal | None = None
    """The batch-size schedule of the depth the load points suggest, or why there is none."""
    tuned: TunedConfig | None = None
    """The schedule applied (with `spec.autoTune.apply`): served under its own revision once promoted."""


class DriftReference(ApiModel):
    """What the serving revision measured as a canary when it was promoted: the drift baseline."""

    revision: Annotated[str, Field(max_length=63)]
    """The revision promoted."""
    time: datetime
    """When it was promoted."""
    acceptance_alpha: float | None = None
    """Per-token acceptance alpha at its canary's last analysis."""
    token_latency_p95_seconds: float | None = None
    """p95 per-token latency at its canary's last analysis, in seconds."""
    requests_per_pod_per_second: float | None = None
    """Finished requests per second per pod at that analysis: the load latency is compared at."""
    requests: float | None = None
    """Finished requests that analysis counted: how sure its load is (unset in references of older operators,
    which then count as exact)."""
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
    """What the serving revision measured as a canary: the baseline each look is compared with."""
    drifted_looks: int = 0
    """Consecutive looks that found drift."""
    steady_looks: int = 0
    """Consecutive looks that found none."""
    message: ShortText = ""
    """The last look's comparison, with the numbers."""
    load_ratio: float | None = None
    """The last look's per-pod load / the load at promotion."""
    load_shifted: bool = False
    """The last look's per-pod load was surely outside the comparable band (1.25x) around promotion's: a traffic
    shift (a `TrafficShifted` event when it became so)."""
    profile: TrafficProfile | None = None
    """The prompt/output length mix against promotion's: far from 1 is a traffic shift too."""
    previous: ServingSnapshot | None = None
    """What stable served before this revision was promoted: the config `onDrift: Rollback` returns to."""
    revert: TunedConfig | None = None
    """With `onDrift: Rollback`: the reference config the fleet is rolled back to (canaried)."""


class PreflightStatus(ApiModel):
    """The last preflight check of a new drafter (a Job in the serving image), which gates its canary."""

    revision: Annotated[str, Field(max_length=63)]
    """The canary revision whose drafter was checked."""
    state: ShortText
    """Running, Passed or Failed."""
    message: ShortText = ""
    """What the check found: the tokenizers' mismatch or the memory shortfall that failed it."""
    time: datetime | None = None
    """When its state or message last changed."""


class TrackReplicas(ApiModel):
    """Ready pods per track."""

    stable: int = 0
    """Ready pods of the stable track (`<name>-stable`)."""
    canary: int = 0
    """Ready pods of the canary track (`<name>-canary`), and of an experiment's candidates measured side by
    side."""
    holdback: int = 0
    """Ready pods of the holdback (`<name>-holdback`, with `rollout.holdback`)."""


class Speedup(ApiModel):
    """Stable against the holdback over one window: the benefit of the serving config over the reference."""

    time: datetime
    """When it was measured."""
    estimate: float | None = None
    """Holdback mean per-token latency / stable's: 1.3 = stable's tokens come 30% faster (unset: unmeasured)."""
    lower: float | None = None
    """Lower confidence bound (at `analysis.confidence`, this window alone)."""
    upper: float | None = None
    """Upper confidence bound (likewise)."""
    stable_token_latency_mean_seconds: float | None = None
    """Stable's mean per-token latency over the window, in seconds."""
    holdback_token_latency_mean_seconds: float | None = None
    """The holdback's mean per-token latency over the window, in seconds."""
    throughput_ratio: float | None = None
    """Stable's output tokens/s per pod / the holdback's (about 1 while both keep up with the same load)."""
    load_ratio: float | None = None
    """Stable's per-pod request rate / the holdback's: the split is fair when near 1."""
    load_lower: float | None = None
    """Lower bound of `loadRatio` (the tracks' finished requests as Poisson counts, at the same confidence)."""
    load_upper: float | None = None
    """Upper bound of `loadRatio`: the speed-up counts as paying only where both bounds show comparable load."""
    message: ShortText = ""
    """The measurement in words, or why there is none (e.g. too few requests finished)."""


class HoldbackStatus(ApiModel):
    """The control group (with `rollout.holdback`): what it serves and the speed-up measured against it."""

    revision: Annotated[str, Field(max_length=63)] | None = None
    """The revision the holdback's pods (`<name>-holdback`) serve; unset while no holdback runs."""
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
    """`Pending` (no replica Ready yet), `Progressing` (a canary is stepped or promoted, or replicas start),
    `Paused` (waiting for `kubectl specfleet promote` or `abort`: a step without a pause duration, a failure with
    `autoRollback` off, a `Pause` fallback, or no baseline to compare with), `Healthy` (every replica serves the
    stable revision), `Degraded` (the spec cannot be rendered, or a promotion overran its progress deadline),
    `Aborted` or `RolledBack` (the last canary was stopped: stable serves until the spec changes or
    `kubectl specfleet retry`)."""
    observed_generation: int | None = None
    """The `metadata.generation` this status was decided from: behind the object's, the operator has not acted
    on the last change of the spec yet."""
    conditions: Annotated[list[Condition], Field(max_length=16)] = []
    """`Available` (Ready pods cover `replicas`, stable has one), `Progressing` (its reason says what the rollout
    waits for), `RolledOut` (True once the spec's revision serves, False when it was rolled back or aborted or
    the spec is invalid, Unknown meanwhile: for `kubectl wait`), `Ready` (True only once the current generation
    is rolled out with no live canary), `Reconciling` (True while a canary, a promotion or starting replicas move
    the fleet) and `Stalled` (True when rolled back, aborted, the spec invalid, no room for the canary's pods, a
    promotion past its deadline or a canary paused by its failure), the last two in the kstatus convention GitOps
    tools read (never both True), `SpecValid`, `Guarded` (canaries are judged from Prometheus), `Synced` and, with
    `rollout.drift`, `SpeculationPaying`."""
    stable_revision: Annotated[str, Field(max_length=63)] | None = None
    """The revision the stable track (`<name>-stable`) serves: a hash of what its pods run (image, `vllm serve`
    command line, environment, GPU placement)."""
    canary_revision: Annotated[str, Field(max_length=63)] | None = None
    """The revision canaried on `<name>-canary`; equal to `stableRevision` while it is being promoted; unset
    without a canary."""
    config: ShortText = ""
    """The speculative config in a few words, as `kubectl get` shows it: the method and the depth k (with a
    batch-size schedule, the depth of each range from the smallest batch up, e.g. `eagle3 k=4/2/0`). While a
    canary is live, stable's then the canary's (`draft_model k=5 -> eagle3 k=4`); while an experiment measures
    its candidates side by side, how many."""
    current_step: int | None = None
    """Index into spec.rollout.steps of the step in progress."""
    step_progress: Annotated[str, Field(max_length=16)] = ""
    """The canary's step and the number of steps, e.g. `2/3`, as `kubectl get` shows it; empty while no canary
    is stepped (none live, or it is being promoted)."""
    canary_weight: Annotated[int, Field(ge=0, le=100)] = 0
    """Canary share of traffic, percent."""
    step_started_at: datetime | None = None
    """When the current step began; its canary replicas must be Ready within the progress deadline from here."""
    step_ready_at: datetime | None = None
    """When the current step's canary replicas were all Ready (again, after pods were replaced): its pause counts
    the Ready time from here, on top of `stepReadySeconds`. Unset while fewer are Ready."""
    canary_started_at: datetime | None = None
    """When the current canary started."""
    canary_unguarded: bool = False
    """Whether the current canary was started unguarded (`spec.rollout.unguarded`): it advances on pauses and
    gates alone while the spec still says so. Fixed when the canary starts, so that a Prometheus removed or a
    spec edited mid-canary never turns a judged canary into one promoted unjudged."""
    paused_at: datetime | None = None
    """When `spec.paused` froze the rollout; on resume the step in progress starts over (its pause, evidence
    and deadline anew)."""
    failed_analyses: int = 0
    """Failed analyses of the current canary revision."""
    analyses: int = 0
    """Analyses of the current canary revision so far (the next one is look `analyses + 1`)."""
    evidence_since: datetime | None = None
    """Earliest moment the next analysis may read evidence from: when the current step's canary replicas
    were first all Ready, or the last counted failure (so each failure counts new evidence only). Kept while
    the step's canary pods are replaced: a replaced pod costs its own samples, not the step's."""
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
    step_progressed_at: datetime | None = None
    """When pods move within `rollout.maxSurge`: the last time the step's canary gained a Ready pod. Its progress
    deadline counts from here (as a Deployment's does), so a large step swapped pod by pod is not cut short."""
    step_ready_seconds: int = 0
    """Time the current step's canary replicas were all Ready before they last lost readiness: the step's
    pause counts it, and the progress deadline is pushed back by it, so it bounds the step's total not-Ready
    time (a flapping canary ends)."""
    retiring_revision: Annotated[str, Field(max_length=63)] | None = None
    """A canary that left the rollout (aborted, rolled back, promoted, reverted) whose Deployment is kept
    until its traffic has drained: taken off traffic first (once stable has a Ready pod), deleted later."""
    traffic_off_at: datetime | None = None
    """When the retiring canary lost its traffic; its Deployment is deleted a drain delay later."""
    replicas: int = 0
    """Ready replicas over all tracks (the scale subresource reads it)."""
    ready_replicas: TrackReplicas = TrackReplicas()
    ready_summary: Annotated[str, Field(max_length=32)] = ""
    """Ready pods over all tracks / `spec.replicas`, e.g. `7/8`, as `kubectl get` shows it. It can be above
    `spec.replicas` for a while: a step's new canary pods are Ready before stable gives way to them."""
    selector: Annotated[str, Field(max_length=1024)] = ""
    """Label selector of all the fleet's pods, for the scale subresource."""
    last_analysis: Analysis | None = None
    """The last judgement of the current canary (kept after it ends, until the next canary starts)."""
    canary_token_latency_p95_ms: float | None = None
    """The canary's p95 per-token latency at the last analysis in milliseconds (`lastAnalysis.canary`'s, for
    `kubectl get`); unset until it is measured."""
    history: Annotated[list[HistoryEntry], Field(max_length=HISTORY_MAX)] = []
    """The revisions canaried, oldest first, and how each ended (the last `rollout.historyLimit`)."""
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
    notified: Annotated[list[Annotated[str, Field(max_length=256)]], Field(max_length=NOTIFIED_MAX)] = []
    """The last transitions notified (with notifications on, docs/notifications.md), newest last, each as
    `uid/generation/transition/step/run`: written with the status that makes the transition, so a restarted
    operator never sends one twice, and the same transition again (a gate waited at twice) is sent once."""


class StatusChanges(TypedDict, total=False):
    """Fields of `SpeculativeDeploymentStatus` to change, as typed keyword arguments (`Pass.with_status`): a
    misspelt name or a wrong type fails mypy, and `model_copy` refuses an unknown name at run time. A unit test
    keeps the keys and types equal to the model's fields."""

    phase: Phase
    observed_generation: int | None
    conditions: list[Condition]
    stable_revision: str | None
    canary_revision: str | None
    config: str
    current_step: int | None
    step_progress: str
    canary_weight: int
    step_started_at: datetime | None
    step_ready_at: datetime | None
    canary_started_at: datetime | None
    canary_unguarded: bool
    paused_at: datetime | None
    failed_analyses: int
    analyses: int
    evidence_since: datetime | None
    unjudged_since: datetime | None
    no_data_seconds: int
    provider_error_seconds: int
    canary_restarts_accepted: int | None
    step_progressed_at: datetime | None
    step_ready_seconds: int
    retiring_revision: str | None
    traffic_off_at: datetime | None
    replicas: int
    ready_replicas: TrackReplicas
    ready_summary: str
    selector: str
    last_analysis: Analysis | None
    canary_token_latency_p95_ms: float | None
    history: list[HistoryEntry]
    stable_serving: dict[str, JsonValue] | None
    rejected_revision: str | None
    experiment: ExperimentStatus | None
    preflight: PreflightStatus | None
    drift: DriftStatus | None
    holdback: HoldbackStatus | None
    auto_tune: AutoTuneStatus | None
    acknowledged_commands: dict[str, str]
    notified: list[str]
