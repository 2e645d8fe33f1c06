"""Output equivalence, the shell: the operator's own greedy requests to one Ready pod of each track.

Each analysis of a canary with `guardrails.outputEquivalence.enabled` sends the next `pairsPerAnalysis`
prompts of the set, one at a time, to one Ready canary pod and one Ready stable pod (the pod's IP and vLLM's
port; `--pod-url-template` maps a pod elsewhere, e.g. the dev cluster's simulator), compares the token ids
and adds the pairs to the counts status keeps (`OutputPairs`): restart-safe, and never a prompt or an answer.

The requests are greedy (temperature 0, the spec's seed), `ignore_eos` so both answers have `maxTokens`
tokens, bounded in time (REQUEST_SECONDS) and size (MAX_ANSWER_BYTES read), and marked as the operator's:
`user` is PROBE_USER and the PROBE_HEADER header is set. vLLM counts them in its metrics like any request
(it has no way to leave them out); docs/judge.md says why that does not move the latency the judge reads.

Token ids: vLLM >= 0.10.2 returns them with `return_token_ids` (each choice's `token_ids`); older releases
with `logprobs` and `return_tokens_as_token_ids` (each `logprobs.tokens` entry reads `token_id:<id>`).
Both are asked for, and whichever the answer has is read.
"""

import hashlib
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.spec import OutputEquivalence
from specfleet.api.status import OutputPairs, SpeculativeDeploymentStatus
from specfleet.api.vocabulary import LABEL_NAME, LABEL_REVISION, LABEL_TRACK, Track
from specfleet.judge.equivalence import KEPT_POSITIONS, compare
from specfleet.render.argv import VLLM_PORT

log = logging.getLogger(__name__)

PROMPTS_KEY = "prompts"
"""The ConfigMap key holding the prompts: a JSON list of strings, or one prompt per line."""
PROBE_USER = "specfleet-output-equivalence"
"""The OpenAI `user` field of the operator's requests (vLLM logs it with the request)."""
PROBE_HEADER = "X-Specfleet-Probe"
CONCURRENCY = 4
"""Pairs asked at once: at most this many of the operator's requests are in flight on each pod."""
REQUEST_SECONDS = 30.0
"""Longest wait for one answer: a pod that takes longer counts a failed request, not a pair."""
MAX_ANSWER_BYTES = 1 << 20
"""Most bytes read of one answer (a few hundred tokens of JSON are a few KiB)."""
MAX_PROMPTS = 10_000
MAX_PROMPT_CHARS = 16_384
DEFAULT_POD_URL_TEMPLATE = "http://{ip}:{port}"
"""How the operator reaches a pod: `{ip}`, `{port}` (vLLM's), `{namespace}` and `{name}` are filled in."""

BUILTIN_PROMPTS: tuple[str, ...] = (
    "Explain why the sky is blue in two sentences.",
    "Write a haiku about a lighthouse in winter.",
    "List three uses of a paperclip other than holding paper.",
    "What is the capital of Australia, and why was it chosen?",
    "Translate 'Where is the train station?' into French and German.",
    "Summarise the plot of Romeo and Juliet in one paragraph.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "What are the main differences between TCP and UDP?",
    "Give a recipe for a simple tomato soup.",
    "Describe photosynthesis to a ten-year-old.",
    "Write a short, polite email declining a meeting invitation.",
    "What causes the seasons on Earth?",
    "Explain what a hash table is and when to use one.",
    "Name five prime numbers greater than 100.",
    "Write a SQL query that counts orders per customer.",
    "What is the difference between weather and climate?",
    "Suggest a name for a bakery that specialises in sourdough.",
    "Explain the rules of chess for the knight.",
    "Write a limerick about a cat who learns to code.",
    "How does a refrigerator keep food cold?",
    "Give three tips for a good night's sleep.",
    "What is the Pythagorean theorem? Give an example.",
    "Describe the water cycle step by step.",
    "Write a bash command that finds files larger than 100 MB.",
    "What were the causes of the First World War?",
    "Explain recursion with a simple example.",
    "Convert 72 degrees Fahrenheit to Celsius and show the steps.",
    "Write a dialogue between a customer and a barista.",
    "What is machine learning, in one paragraph?",
    "Compare the advantages of trains and planes for a 500 km trip.",
    "Write a regular expression that matches an email address.",
    "Why do leaves change colour in autumn?",
)
"""A small general set, used when the spec names no ConfigMap: give your own prompts, like your traffic."""

Post = Callable[[str, dict[str, Any]], dict[str, Any]]
"""POST a JSON body to a URL and return the JSON answer; raises OSError or ValueError when it cannot."""


class ConfigMaps(Protocol):
    def read_config_map(self, namespace: str, name: str, key: str) -> str: ...


def parse_prompts(text: str) -> tuple[str, ...]:
    """A JSON list of strings, else one prompt per non-empty line; ValueError when none, or too many or long."""
    prompts: list[str]
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    if isinstance(document, list) and all(isinstance(p, str) for p in document):
        prompts = [p for p in document if p.strip()]
    else:
        prompts = [line for line in text.splitlines() if line.strip()]
    if not prompts:
        raise ValueError("holds no prompts")
    if len(prompts) > MAX_PROMPTS:
        raise ValueError(f"holds {len(prompts)} prompts (at most {MAX_PROMPTS})")
    if (longest := max(len(p) for p in prompts)) > MAX_PROMPT_CHARS:
        raise ValueError(f"holds a prompt of {longest} characters (at most {MAX_PROMPT_CHARS})")
    return tuple(prompts)


def prompts_hash(prompts: Iterable[str]) -> str:
    """A digest of the set that says whether it changed, and nothing of what it holds (16 hex digits)."""
    digest = hashlib.sha256()
    for prompt in prompts:
        digest.update(hashlib.sha256(prompt.encode()).digest())
    return digest.hexdigest()[:16]


def request_body(settings: OutputEquivalence, prompt: str) -> dict[str, Any]:
    """One greedy completion, asking for its token ids both ways vLLM knows."""
    return {
        "prompt": prompt,
        "max_tokens": settings.max_tokens,
        "temperature": 0,
        "seed": settings.seed,
        "ignore_eos": True,
        "stream": False,
        "user": PROBE_USER,
        "return_token_ids": True,
        "logprobs": 1,
        "return_tokens_as_token_ids": True,
    }


def token_ids(answer: Mapping[str, Any]) -> list[int]:
    """The answer's token ids: `choices[0].token_ids`, else from `logprobs.tokens` (`token_id:<id>`)."""
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError("the answer has no choices")
    choice = choices[0]
    ids = choice.get("token_ids")
    if isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return ids
    tokens = (choice.get("logprobs") or {}).get("tokens") if isinstance(choice.get("logprobs"), dict) else None
    if isinstance(tokens, list) and all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
        try:
            return [int(t.removeprefix("token_id:")) for t in tokens]
        except ValueError:
            pass
    raise ValueError("the answer has no token ids (vLLM < 0.10.2 needs logprobs with return_tokens_as_token_ids)")


def post_json(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST with the operator's mark, bounded in time and in what is read."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", PROBE_HEADER: "output-equivalence"},
    )
    with urllib.request.urlopen(request, timeout=REQUEST_SECONDS) as response:
        data = response.read(MAX_ANSWER_BYTES + 1)
    if len(data) > MAX_ANSWER_BYTES:
        raise ValueError(f"the answer is larger than {MAX_ANSWER_BYTES} bytes")
    answer = json.loads(data)
    if not isinstance(answer, dict):
        raise ValueError("the answer is not a JSON object")
    return answer


def ready_pod(
    pods: Iterable[Mapping[str, Any]], name: str, track: Track, revision: str, need_ip: bool = True
) -> Mapping[str, Any] | None:
    """The first (by name) Ready pod of the track at the revision (that has an IP, when `need_ip`)."""
    found = []
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        labels = meta.get("labels") or {}
        if (labels.get(LABEL_NAME), labels.get(LABEL_TRACK), labels.get(LABEL_REVISION)) != (name, track, revision):
            continue
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        if ready and not meta.get("deletionTimestamp") and (status.get("podIP") or not need_ip):
            found.append(pod)
    return min(found, key=lambda p: p["metadata"]["name"], default=None)


def pod_url(template: str, pod: Mapping[str, Any]) -> str:
    """The pod's completions URL."""
    meta = pod["metadata"]
    ip = (pod.get("status") or {}).get("podIP") or ""
    base = template.format(ip=ip, port=VLLM_PORT, namespace=meta["namespace"], name=meta["name"])
    return base.rstrip("/") + "/v1/completions"


@dataclass(frozen=True)
class Round:
    """What one analysis sends: which prompts, to which pods."""

    settings: OutputEquivalence
    prompts: tuple[str, ...]
    canary_url: str
    stable_url: str


def _said(error: Exception) -> str:
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code}"
    return type(error).__name__ if not isinstance(error, ValueError) else str(error)


def _ask(turn: Round, prompt: str, post: Post) -> tuple[list[list[int]], list[str]]:
    """One prompt to both pods: the token ids of the answers that came, and what went wrong with the others."""
    body = request_body(turn.settings, prompt)
    answers, problems = [], []
    for which, url in (("canary", turn.canary_url), ("stable", turn.stable_url)):
        try:
            answers.append(token_ids(post(url, body)))
        except (OSError, ValueError) as problem:
            problems.append(f"{which} pod: {_said(problem)}")
    return answers, problems


def compare_round(turn: Round, previous: OutputPairs | None, now: datetime, post: Post = post_json) -> OutputPairs:
    """The counts with this analysis's pairs added: the next `pairsPerAnalysis` prompts of the set, in turn,
    CONCURRENCY at a time."""
    digest = prompts_hash(turn.prompts)
    pairs = previous if previous is not None and previous.prompts_hash == digest else None
    if pairs is None:
        pairs = OutputPairs(prompts=len(turn.prompts), prompts_hash=digest)
    compared, identical, failed = pairs.pairs, pairs.identical, pairs.failed_requests
    positions, error, count = list(pairs.first_divergences), None, turn.settings.pairs_per_analysis
    chosen = [turn.prompts[(pairs.next_prompt + i) % len(turn.prompts)] for i in range(count)]
    with ThreadPoolExecutor(CONCURRENCY, thread_name_prefix="specfleet-outputs") as pool:
        results = list(pool.map(lambda prompt: _ask(turn, prompt, post), chosen))
    for answers, problems in results:
        failed += len(problems)
        error = problems[-1] if problems else error
        if len(answers) < 2:
            continue
        found = compare(*answers)
        compared += 1
        identical += found.identical
        if found.first_divergence is not None and len(positions) < KEPT_POSITIONS:
            positions.append(found.first_divergence)
    return pairs.model_copy(
        update={
            "next_prompt": (pairs.next_prompt + count) % len(turn.prompts),
            "pairs": compared,
            "identical": identical,
            "first_divergences": positions,
            "failed_requests": failed,
            "since": pairs.since or (now if compared > pairs.pairs else None),
            "last_error": error,
        }
    )


def _previous(status: SpeculativeDeploymentStatus) -> OutputPairs | None:
    last = status.last_analysis
    return last.output_pairs if last is not None and last.revision == status.canary_revision else None


def collect_pairs(
    config_maps: ConfigMaps,
    sdep: SpeculativeDeployment,
    status: SpeculativeDeploymentStatus,
    pods: Iterable[Mapping[str, Any]],
    now: datetime,
    url_template: str = DEFAULT_POD_URL_TEMPLATE,
    post: Post = post_json,
) -> OutputPairs | None:
    """Blocking: this analysis's pairs added to the canary's counts. Never raises: what could not be done is
    in `lastError` (and the counts stay as they were); None when nothing was ever counted."""
    settings = sdep.spec.rollout.guardrails.output_equivalence
    previous = _previous(status)
    meta = sdep.metadata

    def kept(reason: str) -> OutputPairs | None:
        log.warning("%s/%s: output equivalence: %s", meta.namespace, meta.name, reason)
        return previous.model_copy(update={"last_error": reason}) if previous is not None else None

    prompts = BUILTIN_PROMPTS
    if settings.prompts_config_map is not None:
        try:
            prompts = parse_prompts(
                config_maps.read_config_map(meta.namespace, settings.prompts_config_map, PROMPTS_KEY)
            )
        except ValueError as error:
            return kept(f"ConfigMap {meta.namespace}/{settings.prompts_config_map} key {PROMPTS_KEY}: {error}")
        except Exception as error:  # ConfigMapError, or the API unreachable: the message names no prompt
            return kept(str(error) or type(error).__name__)
    if status.canary_revision is None or status.stable_revision is None:
        return previous
    pod_list = list(pods)
    need_ip = "{ip}" in url_template
    canary = ready_pod(pod_list, meta.name, Track.CANARY, status.canary_revision, need_ip)
    stable = ready_pod(pod_list, meta.name, Track.STABLE, status.stable_revision, need_ip)
    if canary is None or stable is None:
        missing = "canary" if canary is None else "stable"
        return kept(f"no Ready {missing} pod{' with an IP' if need_ip else ''} to ask")
    try:
        turn = Round(settings, prompts, pod_url(url_template, canary), pod_url(url_template, stable))
    except (KeyError, IndexError, ValueError) as error:
        return kept(f"--pod-url-template cannot be filled in: {error!r}")
    found = compare_round(turn, previous, now, post)
    if found.last_error:
        log.warning("%s/%s: output equivalence: %s", meta.namespace, meta.name, found.last_error)
    return found
