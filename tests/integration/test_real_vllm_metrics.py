"""The metrics contract: the simulator's exposition has real vLLM's shape, real counters keep their relations,
and the judge's PromQL finds every measurement in a real Prometheus scraping real vLLM. And speculation is
lossless there: the n-gram and draft-model pods answer the built-in prompts as the plain pod does.

Three real `vllm serve` processes (an n-gram pod, a draft-model pod and a plain one, rendered from the examples
at vLLM 0.32.0 and translated for CPU) get the same bounded load of REQUESTS completions; the simulator gets the
same argv. Prometheus is the dev cluster's, scraping the file_sd targets the real engine writes.
"""

import json
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.spec import OutputEquivalence
from specfleet.api.vocabulary import LABEL_NAME, LABEL_REVISION, LABEL_TRACK, Track
from specfleet.controller.analysis import evidence
from specfleet.controller.outputs import BUILTIN_PROMPTS, Round, compare_round
from specfleet.metrics import names, promql
from specfleet.metrics.prometheus import Prometheus
from specfleet.render.manifests import deployment, revision
from specfleet_workshop.devcluster.cluster import ClusterInfo
from specfleet_workshop.realvllm.install import DEFAULT_VERSION, VllmHome
from specfleet_workshop.realvllm.runner import LoadPlan, RealEngine
from specfleet_workshop.realvllm.translate import translate
from specfleet_workshop.sim import Simulator
from specfleet_workshop.sim.scenario import load_scenario

from fleetkit import wait_for

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.integration,
    pytest.mark.timeout(1500),  # the first test also starts the module's two servers (2-7 min each on 2 cores)
]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
REQUESTS = 150
MAX_TOKENS = 32
NAMESPACE = "real-vllm-metrics"

IGNORED_PREFIXES = ("http_", "process_", "python_")
"""The API server's own HTTP, process and interpreter metrics (prometheus_client defaults)."""
IGNORED = frozenset(
    {
        "vllm:admission_rejections",
        "vllm:cache_config_info",
        "vllm:engine_sleep_state",
        "vllm:estimated_flops_per_gpu",
        "vllm:estimated_read_bytes_per_gpu",
        "vllm:estimated_write_bytes_per_gpu",
        "vllm:external_prefix_cache_hits",
        "vllm:external_prefix_cache_queries",
        "vllm:iteration_tokens_total",
        "vllm:mm_cache_hits",
        "vllm:mm_cache_queries",
        "vllm:num_requests_waiting_by_reason",
        "vllm:prefix_cache_queries",
        "vllm:prompt_tokens_by_source",
        "vllm:prompt_tokens_cached",
        "vllm:prompt_tokens_cached_by_source",
        "vllm:request_generation_tokens",
        "vllm:request_max_num_generation_tokens",
        "vllm:request_num_preemptions",
        "vllm:request_params_max_tokens",
        "vllm:request_params_n",
        "vllm:request_prefill_kv_computed_tokens",
        "vllm:request_prompt_tokens",
    }
)
"""vLLM families the simulator does not model and the judge does not read (docs/simulator.md, "Not modelled")."""


@dataclass(frozen=True)
class Shape:
    type: str
    labels: frozenset[str]
    buckets: tuple[float, ...]


def shapes(text: str) -> dict[str, Shape]:
    """Family -> type, label names and bucket bounds (`_created` gauges are families of their own)."""
    found = {}
    for family in text_string_to_metric_families(text):
        labels = frozenset(label for sample in family.samples for label in sample.labels if label != "le")
        bounds = {float(s.labels["le"]) for s in family.samples if s.name.endswith("_bucket")}
        found[family.name] = Shape(family.type, labels, tuple(sorted(bounds)))
    return found


def values(text: str) -> dict[str, float]:
    """Sample name + labels (engine and model_name dropped) -> value."""
    result = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = {k: v for k, v in sample.labels.items() if k not in ("engine", "model_name")}
            key = sample.name + (json.dumps(labels, sort_keys=True) if labels else "")
            result[key] = sample.value
    return result


def rendered_pod(example: str, name: str, speculative: dict[str, Any] | None = None) -> tuple[dict[str, Any], int]:
    """A Running, Ready pod of the example (its speculative config replaced, if given) at vLLM 0.32.0 on track
    stable, and its k."""
    document = yaml.safe_load((EXAMPLES / example).read_text())
    document["spec"]["engine"]["vllmVersion"] = DEFAULT_VERSION
    if speculative is not None:
        document["spec"]["speculative"] = speculative
    sdep = SpeculativeDeployment.from_mapping(document)
    template = deployment(sdep, Track.STABLE, revision(sdep.spec), 1)["spec"]["template"]
    pod = {
        "metadata": {**template["metadata"], "namespace": NAMESPACE, "name": name, "uid": f"uid-{name}"},
        "spec": {**template["spec"], "nodeName": "node-0"},
        "status": {"phase": "Running", "podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    return pod, sdep.spec.speculative.num_speculative_tokens or 0


def scrape(url: str) -> str:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        return response.read().decode()


@dataclass
class RealPod:
    pod: dict[str, Any]
    k: int
    url: str = ""
    text: str = ""


@pytest.fixture(scope="module")
def real(vllm_home: VllmHome, dev_cluster: ClusterInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """An n-gram pod, a draft-model pod and a plain pod of the n-gram pod's target on real vLLM, each after
    REQUESTS finished requests."""
    pods = {
        "ngram": RealPod(*rendered_pod("codellama-ngram.yaml", "ngram-0")),
        "draft": RealPod(*rendered_pod("llama-70b-draft-mi300x.yaml", "draft-0")),
        "plain": RealPod(*rendered_pod("codellama-ngram.yaml", "plain-0", {"method": "none"})),
    }
    engine = RealEngine(
        vllm_home,
        workdir=tmp_path_factory.mktemp("vllm"),
        file_sd_dir=dev_cluster.file_sd_dir,
        max_servers=len(pods),
        load=LoadPlan(rate=6.0, concurrency=4, max_tokens=MAX_TOKENS, requests=REQUESTS),
    ).start()
    try:
        for real_pod in pods.values():
            engine.upsert_pod(real_pod.pod, {})
        for real_pod in pods.values():
            key = f"{NAMESPACE}/{real_pod.pod['metadata']['name']}"

            def serving(key: str = key) -> dict | None:
                row = next(row for row in engine.describe() if row["pod"] == key)
                assert row["state"] != "failed", row
                return row if row["state"] == "serving" else None

            real_pod.url = wait_for(f"{key} to serve", serving, timeout=420)["url"]
        for real_pod in pods.values():

            def finished(real_pod: RealPod = real_pod) -> str | None:
                text = scrape(real_pod.url)
                done = sum(v for k, v in values(text).items() if k.startswith("vllm:request_success_total"))
                return text if done >= REQUESTS else None

            real_pod.text = wait_for(f"{REQUESTS} requests on {real_pod.url}", finished, timeout=600)
        yield {"engine": engine, **pods}
    finally:
        engine.stop()


def simulated(pod: dict[str, Any], models: Path) -> str:
    """The simulator's exposition for the same argv real vLLM ran, after a minute of simulated load."""
    container = pod["spec"]["containers"][0]
    same = {**container, "args": list(translate(container["args"], models, 8000).argv)}
    now = [0.0]
    sim = Simulator(load_scenario("pairs: []\n"), listen=("127.0.0.1", 0), clock=lambda: now[0])
    sim.upsert_pod({**pod, "spec": {**pod["spec"], "containers": [same]}}, {})
    now[0] = 60.0
    status, body = sim.metrics(NAMESPACE, pod["metadata"]["name"])
    assert status == 200
    return body.decode()


def ignored(family: str) -> bool:
    return family.startswith(IGNORED_PREFIXES) or family.removesuffix("_created") in IGNORED


@pytest.mark.parametrize("which", ["ngram", "draft"])
def test_the_simulator_has_real_vllms_families_types_labels_and_buckets(
    which: str, real: dict, vllm_home: VllmHome
) -> None:
    pod: RealPod = real[which]
    sim, vllm = shapes(simulated(pod.pod, vllm_home.models)), shapes(pod.text)
    differences = {
        family: (sim.get(family), vllm.get(family))
        for family in set(sim) | set(vllm)
        if sim.get(family) != vllm.get(family) and not (family not in sim and ignored(family))
    }
    assert not differences
    assert len(vllm["vllm:inter_token_latency_seconds"].buckets) > 100  # the rendered fine buckets reached vLLM


def test_nothing_the_judge_reads_is_ignored() -> None:
    read = [*promql.COUNTERS.values(), *promql.HISTOGRAMS.values(), names.ACCEPTED_PER_POSITION]
    assert not [metric for metric in read if ignored(metric.removesuffix("_total"))]


def test_real_counters_keep_the_relations_the_judge_relies_on(real: dict) -> None:
    for which in ("ngram", "draft"):
        pod: RealPod = real[which]
        v, k = values(pod.text), pod.k
        drafts, draft_tokens = v["vllm:spec_decode_num_drafts_total"], v["vllm:spec_decode_num_draft_tokens_total"]
        accepted = v["vllm:spec_decode_num_accepted_tokens_total"]
        per_position = [v[f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{"position": "{i}"}}'] for i in range(k)]
        steps = v["vllm:inter_token_latency_seconds_count"]
        requests = sum(value for key, value in v.items() if key.startswith("vllm:request_success_total"))
        generated = v["vllm:generation_tokens_total"]
        assert drafts > 0 and draft_tokens > 0, which
        assert per_position == sorted(per_position, reverse=True), (which, per_position)  # a rejection ends a draft
        assert sum(per_position) == accepted, which
        # One ITL observation per request per engine step: after the first token, each step emits 1 + the
        # tokens accepted in it; the last step of a request may overshoot max_tokens by up to k (cut off).
        overshoot = steps + accepted - (generated - requests)
        assert 0 <= overshoot <= k * requests, (which, steps, accepted, generated, requests)
        if which == "draft":
            # A draft model proposes k tokens at every decode step of every request.
            assert draft_tokens == k * drafts
            assert steps == drafts
        else:
            # An n-gram lookup proposes only as far as the matched continuation goes (and finds none at some
            # steps, which are not drafts): fewer than k per draft on average, never more.
            assert drafts < draft_tokens <= k * drafts
            assert steps > drafts


def test_the_judges_promql_finds_every_measurement_in_prometheus_scraping_real_vllm(
    real: dict, dev_cluster: ClusterInfo
) -> None:
    prometheus = Prometheus(dev_cluster.prometheus_url)
    for which in ("ngram", "draft"):
        labels = real[which].pod["metadata"]["labels"]
        selector = promql.TrackSelector(NAMESPACE, labels[LABEL_NAME], labels[LABEL_TRACK], labels[LABEL_REVISION])
        finished = f"sum(vllm:request_success_total{selector.matchers()})"
        wait_for(f"Prometheus to scrape {which}'s last counts", lambda q=finished: prometheus.scalar(q) == REQUESTS, 60)
        found = evidence(prometheus, selector, 600, time.time())
        assert found.token_latency and found.step_latency and found.ttft, found
        assert found.requests > 0, found
        assert None not in (found.drafts, found.draft_tokens, found.accepted_tokens, found.generation_tokens), found
        assert len(found.accepted_per_position) == real[which].k, found
        assert found.request_rate_per_pod, found


@pytest.mark.parametrize("which", ["ngram", "draft"])
def test_speculative_pods_answer_the_builtin_prompts_as_plain_decoding_does(which: str, real: dict) -> None:
    """Lossless on real vLLM: greedy answers to every built-in prompt, through the operator's own comparison."""
    settings = OutputEquivalence(enabled=True, pairs_per_analysis=len(BUILTIN_PROMPTS))
    turn = Round(settings, BUILTIN_PROMPTS, f"{real[which].url}/v1/completions", f"{real['plain'].url}/v1/completions")
    pairs = compare_round(turn, None, datetime.now(UTC))
    print(f"\n{which} vs plain on real vLLM: {pairs.identical}/{pairs.pairs} identical")
    assert (pairs.failed_requests, pairs.last_error) == (0, None), pairs
    assert pairs.pairs == len(BUILTIN_PROMPTS)
    assert pairs.identical == pairs.pairs, pairs.first_divergences
