"""Completions at the pace of the engine that runs them: one chunk per engine step, as vLLM streams."""

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager
from http import HTTPStatus
from typing import Any, Protocol

from specfleet_workshop.fleetpods.pods import PodInfo
from specfleet_workshop.sim import completions
from specfleet_workshop.sim.answers import answer_token_ids
from specfleet_workshop.sim.completions import CompletionError, CompletionRequest
from specfleet_workshop.sim.engine import ClientRequest, Engine

POLL_SECONDS = 0.25
"""Longest sleep of a completion's thread between looks at its engine (it wakes at each step's end before)."""


class StreamHost(Protocol):
    """The simulator as its completion streams see it (`specfleet_workshop.sim.simulator.Simulator`)."""

    @property
    def lock(self) -> AbstractContextManager[Any]:
        """Held for every look at the pods and their engines."""
        ...

    stopping: threading.Event

    def clock(self) -> float: ...

    def serves(self, key: str, engine: Engine) -> bool:
        """Whether `engine` still runs the pod `key` (call with the lock)."""
        ...

    def release_completion(self) -> None:
        """Free the completion slot the stream held."""
        ...


class CompletionStream:
    """One client request in a pod's engine, given back at the pace the engine emits its tokens.

    Simulated time is wall time, so the thread that follows the request sleeps until the end of each engine
    step and then hands over what that step emitted: one chunk per step, as vLLM streams.
    """

    def __init__(
        self,
        host: StreamHost,
        pod: PodInfo,
        engine: Engine,
        client: ClientRequest,
        request: CompletionRequest,
        divergence: float = 0.0,
    ) -> None:
        self._host, self._pod, self._engine, self._client, self._request = host, pod, engine, client, request
        self._divergence = divergence
        """The pod's pair's `divergence` knob: the share of prompts it answers unlike the plain model."""
        self._closed = False
        self.id = f"cmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = pod.args.served_model_name

    def steps(self) -> Iterator[tuple[int, str | None]]:
        """(tokens, finish reason on the last) per engine step that emitted tokens for the request, at its end.

        Raises CompletionError when the request fails in the engine (the scenario's `error_rate`), the pod
        goes away, or the simulator stops.
        """
        host, client, sent = self._host, self._client, 0
        while True:
            with host.lock:
                if not host.serves(self._pod.key, self._engine):
                    raise CompletionError(HTTPStatus.SERVICE_UNAVAILABLE, f"pod {self._pod.key} went away")
                now = host.clock()
                self._engine.advance_to(now)
                emitted, sent = client.tokens[sent:], len(client.tokens)
                finish, wake = client.finish_reason, self._engine.next_step_end
            for index, (_, count) in enumerate(emitted):
                yield count, finish if finish != "error" and index == len(emitted) - 1 else None
            if finish == "error":
                raise CompletionError(HTTPStatus.INTERNAL_SERVER_ERROR, "the request failed in the engine")
            if finish is not None:
                return
            delay = POLL_SECONDS if wake is None else min(POLL_SECONDS, max(0.0, wake - now))
            if host.stopping.wait(delay):
                raise CompletionError(HTTPStatus.SERVICE_UNAVAILABLE, "the simulator is stopping")

    def events(self) -> Iterator[bytes]:
        """The streamed answer: a chunk per step, the usage chunk if asked for, `[DONE]`; an error event on failure."""
        generated = 0
        try:
            for count, finish in self.steps():
                text = completions.token_text(generated, count)
                generated += count
                yield completions.event(completions.chunk(self.id, self.created, self.model, text, finish))
            if self._request.include_usage:
                usage = completions.usage_chunk(
                    self.id, self.created, self.model, self._client.prompt_tokens, generated
                )
                yield completions.event(usage)
        except CompletionError as error:
            yield completions.event(error.body())
        yield completions.DONE

    def response(self) -> dict[str, Any]:
        """The whole answer once the request finished (CompletionError if it failed)."""
        generated, finish = 0, None
        for count, reason in self.steps():
            generated, finish = generated + count, reason or finish
        return completions.completion(
            self.id,
            self.created,
            self.model,
            completions.token_text(0, generated),
            finish or "length",
            self._client.prompt_tokens,
            generated,
            answer_token_ids(self._request.prompt_key, self._request.seed, generated, self._divergence)
            if self._request.return_token_ids
            else None,
        )

    def close(self) -> None:
        """Abort the request if it has not finished (the client went away), and free its slot. Idempotent."""
        if self._closed:
            return
        self._closed = True
        with self._host.lock:
            self._engine.abort(self._client)
        self._host.release_completion()
