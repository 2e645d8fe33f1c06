"""The token ids of a simulated greedy answer, and a pair that is wrong on purpose. Pure.

A plain model's greedy answer depends on the prompt alone: here its ids are a hash of the prompt and the
position. A pair with the scenario knob `divergence` answers differently for that share of prompts, from a
position that is also a hash: which prompts diverge, and where, depends only on the prompt and the request's
seed, so two pods of the same config (and two runs of one scenario) agree.
"""

import hashlib

VOCABULARY = 32_000
"""Token ids are below this (a Llama-2-sized vocabulary)."""


def _hash(*parts: object) -> int:
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def diverges(prompt_key: str, seed: int | None, divergence: float) -> bool:
    """Whether a pair with this `divergence` answers the prompt differently from the plain model."""
    return divergence > 0 and _hash("diverges", prompt_key, seed) / 2**64 < divergence


def answer_token_ids(prompt_key: str, seed: int | None, count: int, divergence: float = 0.0) -> list[int]:
    """`count` token ids of the greedy answer to the prompt (`prompt_key`: a digest of it)."""
    plain = [_hash("token", prompt_key, i) % VOCABULARY for i in range(count)]
    if count == 0 or not diverges(prompt_key, seed, divergence):
        return plain
    start = _hash("where", prompt_key, seed) % count
    return plain[:start] + [
        (token + 1 + _hash("wrong", prompt_key, i) % (VOCABULARY - 1)) % VOCABULARY
        for i, token in enumerate(plain[start:], start)
    ]
