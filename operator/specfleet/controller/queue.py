"""A delaying work queue of object keys, like controller-runtime's: one worker per key at a time.

Watch events add a key now; a reconcile asks for its key again later (a pause ends, a deadline). A key
added while it is being processed is processed again afterwards, never twice at once.
"""

import asyncio
import contextlib
import heapq
import time
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    """Keys of type `K` (the controller's are `(namespace, name)`)."""

    def __init__(self) -> None:
        self._due: dict[K, float] = {}
        self._heap: list[tuple[float, int, K]] = []
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
        heapq.heappush(self._heap, (due, self._counter, key))
        self._changed.set()

    async def get(self) -> K:
        """The next due key; the caller must call `done(key)` afterwards."""
        while True:
            while self._heap and self._due.get(self._heap[0][2]) != self._heap[0][0]:
                heapq.heappop(self._heap)  # superseded or forgotten entry
            now = time.monotonic()
            if self._heap and self._heap[0][0] <= now:
                _, _, key = heapq.heappop(self._heap)
                del self._due[key]
                self._active.add(key)
                return key
            timeout = self._heap[0][0] - now if self._heap else None
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)

    def done(self, key: K) -> None:
        self._active.discard(key)
        if key in self._again:
            due = self._again.pop(key)
            self.add(key, due - time.monotonic())

    def __len__(self) -> int:
        return len(self._due)
