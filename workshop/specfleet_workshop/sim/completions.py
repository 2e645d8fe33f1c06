"""The OpenAI completions protocol as the simulator speaks it (vLLM's `/v1/completions`). Pure: bytes in, dicts out.

    POST .../v1/completions  {"model": "llama-3.1-8b", "prompt": "Hello", "max_tokens": 64, "stream": true,
                              "stream_options": {"include_usage": true}, "ignore_eos": true}

A streaming answer is server-sent events, one `data: <json>` per engine step that emitted tokens for the
request (OpenAI's completion chunk: id, object `text_completion`, created, model, choices[{index, text,
finish_reason, logprobs}]), the usage chunk when asked for, then `data: [DONE]`. The text is filler words,
one per token: what matters here is when tokens come, not what they say.

Prompt tokens are counted, not tokenized: a word or a punctuation mark is one token (a list of token ids
counts its length). Real tokenizers give about 1.3 tokens per English word; the simulator's TTFT depends on
the count only through the prefill, which is small next to decoding at these lengths.
"""

import hashlib
import json
import re
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

DEFAULT_MAX_TOKENS = 16
"""OpenAI's default for `max_tokens` on the completions endpoint."""
WORDS = (
    " the", " fleet", " drafts", " tokens", " and", " the", " target", " verifies", " them", " in", " one",
    " pass", ",", " so", " decoding", " runs", " faster", " when", " the", " drafter", " guesses", " well", ".",
)  # fmt: skip
_TOKEN = re.compile(r"\w+|[^\w\s]")


class CompletionError(ValueError):
    """A request the endpoint answers with an error: its HTTP status and OpenAI's error type."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status

    @property
    def kind(self) -> str:
        """OpenAI's error type for the status, as vLLM names it (`NotFoundError`, `BadRequestError`, ...)."""
        return {
            HTTPStatus.BAD_REQUEST: "BadRequestError",
            HTTPStatus.NOT_FOUND: "NotFoundError",
            HTTPStatus.SERVICE_UNAVAILABLE: "ServiceUnavailableError",
        }.get(self.status, "InternalServerError")

    def body(self) -> dict[str, Any]:
        return error_body(self.status, str(self))


@dataclass(frozen=True)
class CompletionRequest:
    """What the simulator takes from a completions request."""

    model: str | None
    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool
    """`stream_options.include_usage`: a last chunk with the token counts (always in a non-streamed answer)."""
    ignore_eos: bool
    """vLLM's extension: generate exactly `max_tokens`, as load tests do to compare like with like."""
    prompt_key: str = ""
    """A digest of the prompt: what a simulated answer's token ids depend on (the prompt itself is not kept)."""
    seed: int | None = None
    return_token_ids: bool = False
    """vLLM >= 0.10.2's extension: the answer's `token_ids` in each choice (non-streamed answers here)."""


def count_prompt_tokens(prompt: Any) -> int:
    """A prompt's tokens: its words and punctuation marks for text, its length for a list of token ids."""
    if isinstance(prompt, str):
        return max(1, len(_TOKEN.findall(prompt)))
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return len(prompt)
    if isinstance(prompt, list) and len(prompt) == 1:
        return count_prompt_tokens(prompt[0])
    raise CompletionError(
        HTTPStatus.BAD_REQUEST, "prompt must be one non-empty string or list of token ids (one prompt per request)"
    )


def parse_request(body: bytes) -> CompletionRequest:
    """The request body -> CompletionRequest; CompletionError (400) names what is wrong."""
    try:
        document = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError) as error:
        raise CompletionError(HTTPStatus.BAD_REQUEST, f"the body is not JSON: {error}") from error
    if not isinstance(document, dict):
        raise CompletionError(HTTPStatus.BAD_REQUEST, "the body must be a JSON object")
    if "prompt" not in document:
        raise CompletionError(HTTPStatus.BAD_REQUEST, "prompt is required")
    model = document.get("model")
    if model is not None and not isinstance(model, str):
        raise CompletionError(HTTPStatus.BAD_REQUEST, "model must be a string")
    max_tokens = document.get("max_tokens")
    max_tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise CompletionError(HTTPStatus.BAD_REQUEST, f"max_tokens must be an integer >= 1, not {max_tokens!r}")
    if document.get("n", 1) != 1:
        raise CompletionError(HTTPStatus.BAD_REQUEST, "the simulator serves n = 1 only")
    options = document.get("stream_options") or {}
    if not isinstance(options, dict):
        raise CompletionError(HTTPStatus.BAD_REQUEST, "stream_options must be an object")
    seed = document.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise CompletionError(HTTPStatus.BAD_REQUEST, f"seed must be an integer, not {seed!r}")
    prompt_key = hashlib.sha256(json.dumps(document["prompt"], sort_keys=True).encode()).hexdigest()
    return CompletionRequest(
        model=model,
        prompt_tokens=count_prompt_tokens(document["prompt"]),
        max_tokens=max_tokens,
        stream=bool(document.get("stream", False)),
        include_usage=bool(options.get("include_usage", False)),
        ignore_eos=bool(document.get("ignore_eos", False)),
        prompt_key=prompt_key,
        seed=seed,
        return_token_ids=bool(document.get("return_token_ids", False)),
    )


def check_model(request: CompletionRequest, served: tuple[str, ...]) -> None:
    """vLLM answers 404 for a model it does not serve (the served model name, or the model argument)."""
    if request.model is not None and request.model not in served:
        raise CompletionError(HTTPStatus.NOT_FOUND, f"The model `{request.model}` does not exist.")


def check_length(request: CompletionRequest, max_model_len: int | None) -> None:
    """vLLM refuses a prompt and max_tokens that do not fit `--max-model-len` (400)."""
    if max_model_len is not None and request.prompt_tokens + request.max_tokens > max_model_len:
        raise CompletionError(
            HTTPStatus.BAD_REQUEST,
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{request.prompt_tokens + request.max_tokens} tokens ({request.prompt_tokens} in the messages, "
            f"{request.max_tokens} in the completion). Please reduce the length of the messages or completion.",
        )


def token_text(start: int, count: int) -> str:
    """The text of tokens start..start+count-1 of an answer: one filler word per token."""
    return "".join(WORDS[(start + i) % len(WORDS)] for i in range(count))


def chunk(completion_id: str, created: int, model: str, text: str, finish_reason: str | None) -> dict[str, Any]:
    """One streamed chunk: the tokens one engine step emitted (finish_reason on the last)."""
    return {
        "id": completion_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}],
    }


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def usage_chunk(completion_id: str, created: int, model: str, prompt_tokens: int, completion_tokens: int) -> dict:
    """The last chunk when `stream_options.include_usage` is set: no choices, the token counts."""
    return {
        "id": completion_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage(prompt_tokens, completion_tokens),
    }


def completion(
    completion_id: str,
    created: int,
    model: str,
    text: str,
    finish_reason: str,
    prompt_tokens: int,
    tokens: int,
    token_ids: list[int] | None = None,
) -> dict[str, Any]:
    """A non-streamed answer: the whole text and the usage (and the choice's `token_ids` when asked for)."""
    answer = chunk(completion_id, created, model, text, finish_reason)
    if token_ids is not None:
        answer["choices"][0]["token_ids"] = token_ids
    return {**answer, "usage": usage(prompt_tokens, tokens)}


def error_body(status: HTTPStatus, message: str) -> dict[str, Any]:
    """OpenAI's error document, as vLLM answers it (also as a streamed event when a request fails mid-way)."""
    kind = CompletionError(status, message).kind
    return {"error": {"message": message, "type": kind, "param": None, "code": int(status)}}


def event(payload: dict[str, Any] | str) -> bytes:
    """One server-sent event: `data: <json>` (or `data: [DONE]`) and a blank line."""
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


DONE = event("[DONE]")


def models(served: str, created: int) -> dict[str, Any]:
    """`GET /v1/models`: the served model, as vLLM lists it."""
    return {
        "object": "list",
        "data": [{"id": served, "object": "model", "created": created, "owned_by": "vllm", "root": served}],
    }
