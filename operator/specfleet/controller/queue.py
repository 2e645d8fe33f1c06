"""A delaying work queue of object keys, like controller-runtime's: one worker per key at a time.

Watch events add a key now; a reconcile asks for its key again later (a pause ends, a deadline). A key
added while it is being processed is processed again afterwards, never twice at once.

Among the keys that are due, those already reconciled once go first: an object whose children are up and
only wait for their next look (a Deployment became available) finishes before the first pass of objects
never seen. When a thousand fleets arrive at once (a GitOps sync, a restore) a first-in first-out queue
makes every fleet wait for the first pass of all the others before any of them converges; this one lets
each converge as soon as it can, while every new key still gets its turn as soon as no known key is due.
"""

import asyncio
import contextlib
import heapq
import time
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

_Heap = list[tuple[float, int, K]]


class WorkQueue(Generic[K]):
    """Keys of type `K` (the controller's are `(namespace, name)`)."""

    def __init__(self) -> None:
        self._due: dict[K, float] = {}
        self._known: _Heap[K] = []
        """Keys reconciled at least once (done) since the queue started or they were forgotten."""
        self._new: _Heap[K] = []
        self._seen: set[K] = set()
        self._active: set[K] = set()
        self._again: dict[K, float] = {}
        self._counter = 0
        self._changed = asyncio.Event()

    def add(self, key: K, after: float = 0.0) -> None:
        """Process `key` in `after` seconds, or sooner if it is already due sooner."""
        due = time.monotonic() + max(after, 0.0)
        if key in self._active:
            self._again[key] = min(due, self._again.get(key, due))
            return
        if key in self._due and self._due[key] <= due:
            return
        self._due[key] = due
        self._counter += 1
        heapq.heappush(self._known if key in self._seen else self._new, (due, self._counter, key))
        self._changed.set()

    def _head(self, heap: _Heap[K]) -> tuple[float, int, K] | None:
        """The heap's earliest live entry, dropping superseded ones (a key added again sooner, or taken)."""
        while heap and self._due.get(heap[0][2]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0] if heap else None

    async def get(self) -> K:
        """The next due key, a known one before a new one; the caller must call `done(key)` afterwards."""
        while True:
            now = time.monotonic()
            heads = [(heap, head) for heap in (self._known, self._new) if (head := self._head(heap)) is not None]
            for heap, (due, _, key) in heads:
                if due <= now:
                    heapq.heappop(heap)
                    del self._due[key]
                    self._active.add(key)
                    return key
            timeout = min(head[0] for _, head in heads) - now if heads else None
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)

    def done(self, key: K) -> None:
        self._active.discard(key)
        self._seen.add(key)
        if key in self._again:
            due = self._again.pop(key)
            self.add(key, due - time.monotonic())

    def forget(self, key: K) -> None:
        """The object is gone: a key of that name again later is a new object."""
        self._seen.discard(key)

    def __len__(self) -> int:
        return len(self._due)


class FailureBackoff(Generic[K]):
    """How long a key waits after failed reconciles in a row: `base` x 2^(failures - 1), at most `cap`, per key;
    a success forgets the key's failures (client-go's ItemExponentialFailureRateLimiter). A fleet whose
    reconcile keeps failing (a bug, an API server refusing its writes) is retried ever less often instead of
    every few seconds forever, and does not slow the others. After `stall_after` failures in a row the key is
    `stalled`: still retried at the cap, but no longer a passing hiccup, and the status says so."""

    def __init__(self, base: float = 5.0, cap: float = 300.0, stall_after: int = 10) -> None:
        self.base, self.cap, self.stall_after = base, cap, stall_after
        self._failures: dict[K, int] = {}

    def failed(self, key: K) -> float:
        """Count one more failure of `key`; the seconds until it is tried again."""
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        return min(self.cap, self.base * 2.0 ** min(failures - 1, 64))

    def failures(self, key: K) -> int:
        return self._failures.get(key, 0)

    def stalled(self, key: K) -> bool:
        return self.failures(key) >= self.stall_after

    def succeeded(self, key: K) -> None:
        self._failures.pop(key, None)
