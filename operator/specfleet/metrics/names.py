"""vLLM's metric names (v1 engine, `vllm/v1/metrics/loggers.py`) and the target labels specfleet relies on.

Pods are scraped with their `specfleet.io/*` labels as target labels, sanitised the way the Prometheus
operator's PodMonitor `podTargetLabels` does it (`specfleet.io/track` -> `specfleet_io_track`). The
simulator writes file_sd targets with exactly these labels, and the chart's PodMonitor produces them.
"""

from specfleet.api.vocabulary import LABEL_NAME, LABEL_REVISION, LABEL_TRACK


def prometheus_label(pod_label: str) -> str:
    """`specfleet.io/track` -> `specfleet_io_track`."""
    return "".join(c if c.isalnum() else "_" for c in pod_label)


NAMESPACE = "namespace"
POD = "pod"
SDEP = prometheus_label(LABEL_NAME)
TRACK = prometheus_label(LABEL_TRACK)
REVISION = prometheus_label(LABEL_REVISION)
POD_TARGET_LABELS = (LABEL_NAME, LABEL_TRACK, LABEL_REVISION)

NUM_DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
INTER_TOKEN_LATENCY = "vllm:inter_token_latency_seconds"
"""Observed once per request per engine step, however many tokens the step emitted: a *step* time."""
TIME_PER_OUTPUT_TOKEN = "vllm:request_time_per_output_token_seconds"
"""Observed once per finished request: decode time / (generated tokens - 1), the per-token latency users see."""
TIME_TO_FIRST_TOKEN = "vllm:time_to_first_token_seconds"
E2E_LATENCY = "vllm:e2e_request_latency_seconds"
QUEUE_TIME = "vllm:request_queue_time_seconds"
"""Observed once per finished request: the time it spent WAITING before it was first scheduled."""
NUM_PREEMPTIONS = "vllm:num_preemptions_total"
"""Requests preempted (KV cache exhausted: their blocks freed, recomputed later)."""
PROMPT_TOKENS = "vllm:prompt_tokens_total"
"""Every prompt token of every request admitted, prefix-cache hits included."""
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"
"""Prompt tokens found in the prefix cache (not computed again), counted as the scheduler queries it."""
GENERATION_TOKENS = "vllm:generation_tokens_total"
REQUESTS_RUNNING = "vllm:num_requests_running"
REQUESTS_WAITING = "vllm:num_requests_waiting"
KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
"""A gauge from 0 to 1 (1 = every KV-cache block in use), despite its name."""
REQUEST_SUCCESS = "vllm:request_success_total"
ERROR_FINISH_REASON = "error"
ABORT_FINISH_REASON = "abort"
"""Client aborts are not errors (and vLLM's v1 engine does not even count them)."""
