"""Driving a load test: at each concurrency level, that many closed-loop clients stream completions from
an OpenAI-compatible server (vLLM, or the simulator's `/v1/completions`) and time every chunk.

    results = run_load_test([Target("stable", url1), Target("canary", url2)], LoadPlan(levels=(1, 4, 16)))

Levels run one after the other, and at each level the targets take turns, so stable and canary are
measured minutes apart at most and never load each other's client. A client sends its next request as
soon as its previous one is answered; a level ends after `duration_seconds` (or `requests` requests),
once the requests in flight are answered. Only the standard OpenAI routes are used (`/v1/models` when no
model is given, `/v1/completions`), plus vLLM's `ignore_eos` so every answer is `max_tokens` long.
"""

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from specfleet_workshop.loadtest.measurements import LevelResult, RequestSample, summarize

DEFAULT_LEVELS = (1, 4, 16)
"""Low, medium and peak-like concurrency."""
DEFAULT_PROMPT = (
    "Explain in a few paragraphs how speculative decoding speeds up large language model inference, "
    "and when it does not help."
)
EXCERPT_CHARS = 200
DONE = "[DONE]"

Progress = Callable[[LevelResult], None]
Clock = Callable[[], float]


class LoadTestError(RuntimeError):
    """A target cannot be load-tested at all: unreachable, or no model to ask for."""


@dataclass(frozen=True)
class Target:
    """A server to load: a name for the report and its base URL (`http://host:8000`, or ending in `/v1`)."""

    name: str
    url: str

    @property
    def api(self) -> str:
        """The OpenAI API root: the URL with `/v1` appended unless it ends with it already."""
        base = self.url.rstrip("/")
        return base if base.endswith("/v1") else f"{base}/v1"


@dataclass(frozen=True)
class LoadPlan:
    """What each level sends; `requests` (per target and level) replaces `duration_seconds` when set."""

    levels: tuple[int, ...] = DEFAULT_LEVELS
    duration_seconds: float = 15.0
    requests: int | None = None
    prompt: str = DEFAULT_PROMPT
    max_tokens: int = 128
    model: str | None = None
    """None: the first model the target's `/v1/models` lists."""
    ignore_eos: bool = True
    timeout_seconds: float = 120.0
    """Per request, from sending it to the end of its answer."""

    def __post_init__(self) -> None:
        if not self.levels or any(level < 1 for level in self.levels):
            raise ValueError(f"concurrency levels must be integers >= 1, not {list(self.levels)}")
        if self.requests is not None and self.requests < 1:
            raise ValueError(f"requests per level must be >= 1, not {self.requests}")
        if self.duration_seconds <= 0 or self.max_tokens < 1 or self.timeout_seconds <= 0:
            raise ValueError("duration, max_tokens and timeout must be positive")


def request_body(plan: LoadPlan, model: str) -> dict[str, Any]:
    """A streamed completion that asks for the token count at the end (chunks may carry several tokens)."""
    return {
        "model": model,
        "prompt": plan.prompt,
        "max_tokens": plan.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": plan.ignore_eos,
        "temperature": 0,
    }


def parse_event(line: bytes) -> dict[str, Any] | str | None:
    """One line of a server-sent event stream: the `data:` JSON, `"[DONE]"`, or None for anything else."""
    text = line.decode("utf-8", "replace").strip()
    if not text.startswith("data:"):
        return None
    data = text[len("data:") :].strip()
    if data == DONE:
        return DONE
    try:
        document = json.loads(data)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


def event_error(event: dict[str, Any]) -> str | None:
    """The message of an error event (`{"error": {...}}`, or vLLM's older `{"object": "error", ...}`), else None."""
    if "error" in event:
        error = event["error"]
        return str(error.get("message", error)) if isinstance(error, dict) else str(error)
    if event.get("object") == "error":
        return str(event.get("message", event))
    return None


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """A body cut to one line of `limit` characters, for error messages."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


async def one_request(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], clock: Clock = time.perf_counter
) -> RequestSample:
    """Send one streamed completion and time its chunks; any failure becomes the sample's error."""
    sent = clock()
    first = last = None
    chunks = 0
    usage_tokens: int | None = None

    def failed(message: str) -> RequestSample:
        return RequestSample(sent=sent, ended=clock(), error=message)

    try:
        async with session.post(url, json=body) as response:
            if response.status != 200:
                return failed(f"HTTP {response.status}: {excerpt(await response.text())}")
            async for line in response.content:
                event = parse_event(line)
                if event == DONE:
                    break
                if not isinstance(event, dict):
                    continue
                message = event_error(event)
                if message is not None:
                    return failed(f"error event: {excerpt(message)}")
                if any(choice.get("text") for choice in event.get("choices") or ()):
                    last = clock()
                    first = first if first is not None else last
                    chunks += 1
                usage = event.get("usage")
                if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
                    usage_tokens = usage["completion_tokens"]
    except TimeoutError:
        return failed("no complete answer within the timeout")
    except aiohttp.ClientError as error:
        return failed(f"{type(error).__name__}: {error}")
    if first is None:
        return failed("the answer carried no token")
    tokens = usage_tokens if usage_tokens is not None else chunks
    return RequestSample(sent=sent, ended=clock(), first_token=first, last_token=last, output_tokens=tokens)


async def served_model(session: aiohttp.ClientSession, target: Target, wanted: str | None) -> str:
    """`wanted`, or the first model `GET /v1/models` lists. LoadTestError when the target cannot be reached,
    or when no model was given and it lists none (a server without `/v1/models` is fine when one was given)."""
    url = f"{target.api}/models"
    try:
        async with session.get(url) as response:
            status, text = response.status, await response.text()
    except aiohttp.ClientError as error:
        raise LoadTestError(f"{target.name}: cannot reach {url}: {error}") from error
    except TimeoutError as error:
        raise LoadTestError(f"{target.name}: GET {url} timed out") from error
    if wanted is not None:
        return wanted
    if status != 200:
        raise LoadTestError(f"{target.name}: GET {url}: HTTP {status}: {excerpt(text)}; pass --model")
    try:
        return str(json.loads(text)["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError) as error:
        raise LoadTestError(f"{target.name}: {url} lists no model: {excerpt(text)}; pass --model") from error


async def measure_level(
    session: aiohttp.ClientSession,
    target: Target,
    model: str,
    concurrency: int,
    plan: LoadPlan,
    clock: Clock = time.perf_counter,
) -> LevelResult:
    """`concurrency` closed-loop clients until the plan's duration or request count; the level's figures."""
    url, body = f"{target.api}/completions", request_body(plan, model)
    samples: list[RequestSample] = []
    started = clock()
    deadline = started + plan.duration_seconds
    left = plan.requests

    def another() -> bool:
        nonlocal left
        if left is None:
            return clock() < deadline
        left -= 1
        return left >= 0

    async def client() -> None:
        while another():
            samples.append(await one_request(session, url, body, clock))

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return summarize(target.name, concurrency, samples, clock() - started)


async def run_load_test_async(
    targets: Sequence[Target], plan: LoadPlan, progress: Progress | None = None
) -> list[LevelResult]:
    """Every level for every target (levels outer, targets inner); LoadTestError before any load if a target
    cannot be reached or names no model."""
    timeout = aiohttp.ClientTimeout(total=plan.timeout_seconds)
    connector = aiohttp.TCPConnector(limit=max(plan.levels))
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        models = {target.name: await served_model(session, target, plan.model) for target in targets}
        results = []
        for concurrency in plan.levels:
            for target in targets:
                result = await measure_level(session, target, models[target.name], concurrency, plan)
                results.append(result)
                if progress is not None:
                    progress(result)
        return results


def run_load_test(targets: Sequence[Target], plan: LoadPlan, progress: Progress | None = None) -> list[LevelResult]:
    """`run_load_test_async` on its own event loop (for callers that have none running)."""
    if len({target.name for target in targets}) != len(targets):
        raise ValueError("target names must differ")
    return asyncio.run(run_load_test_async(targets, plan, progress))
