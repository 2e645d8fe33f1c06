"""Event aggregation, as client-go's EventCorrelator does it: which Event a new one becomes.

A fleet that says the same thing again (a command ignored twice, a rollback retried) gets one Event whose
`count` and `lastTimestamp` grow, not a new object each time: `kubectl describe` shows "x3 over 5m", and the
API server's etcd holds one object. A fleet that says similar things (one reason, one type, messages that
differ) ten times within the window gets one Event "(combined from similar events): <the latest message>"
that grows the same way. What was said is remembered per key in an LRU of `max_keys`, so the memory stays
bounded however many fleets come and go; a key forgotten (or older than the window) starts a new Event.

Pure: `EventCorrelator.correlate` only decides; `Kube.post_event` creates or patches what it says.
"""

import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar

MAX_KEYS = 4096
"""client-go's `maxLruCacheEntries`."""
SIMILAR_EVENTS = 10
"""Distinct messages of one (object, type, reason) within the window before they are combined
(client-go's `defaultAggregateMaxEvents`)."""
WINDOW = timedelta(minutes=10)
"""How long an Event keeps counting repeats (client-go's `defaultAggregateIntervalInSeconds`)."""
COMBINED = "(combined from similar events): "


@dataclass(frozen=True)
class Involved:
    """The object an Event is about: a recreated object of the same name (a new uid) starts anew."""

    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class EventWrite:
    """What to write: create the Event `name` (`create`), or patch its count, lastTimestamp and message."""

    name: str
    create: bool
    message: str
    count: int
    first_timestamp: datetime
    last_timestamp: datetime


@dataclass
class _Seen:
    name: str
    count: int
    first: datetime
    last: datetime


@dataclass
class _Similar:
    messages: set[str]
    last: datetime


_EventKey = tuple[Involved, str, str, str]
_SimilarKey = tuple[Involved, str, str]


class EventCorrelator:
    """Remembers the Events written per (object, type, reason, message); safe to call from several threads."""

    def __init__(self, max_keys: int = MAX_KEYS, similar: int = SIMILAR_EVENTS, window: timedelta = WINDOW) -> None:
        self.max_keys, self.similar, self.window = max_keys, similar, window
        self._seen: OrderedDict[_EventKey, _Seen] = OrderedDict()
        self._similar: OrderedDict[_SimilarKey, _Similar] = OrderedDict()
        self._lock = threading.Lock()
        self._last_stamp = 0

    def correlate(self, involved: Involved, event_type: str, reason: str, message: str, now: datetime) -> EventWrite:
        """The Event that says `message` now: a new one, or the one that said it (or similar things) before."""
        with self._lock:
            message = self._combined(involved, event_type, reason, message, now)
            key = _event_key(involved, event_type, reason, message)
            seen = self._seen.get(key)
            if seen is None or now - seen.last > self.window:
                seen = _Seen(self._new_name(involved, now), 0, now, now)
            seen.count, seen.last = seen.count + 1, now
            _put(self._seen, key, seen, self.max_keys)
            return EventWrite(seen.name, seen.count == 1, message, seen.count, seen.first, seen.last)

    def _new_name(self, involved: Involved, now: datetime) -> str:
        """`<object>.<nanoseconds, hex>` as client-go names Events, never the same twice in this process (two
        Events of one pass may be posted within one tick of the clock)."""
        self._last_stamp = max(int(now.timestamp() * 1e9), self._last_stamp + 1)
        return f"{involved.name}.{self._last_stamp:x}"

    def forget(self, involved: Involved, event_type: str, reason: str, message: str) -> None:
        """The Event is gone (expired by the API server's event TTL): the next one like it is created anew."""
        with self._lock:
            self._seen.pop(_event_key(involved, event_type, reason, message), None)

    def _combined(self, involved: Involved, event_type: str, reason: str, message: str, now: datetime) -> str:
        """`message`, or its combined form once this object has said `similar` different things of one reason."""
        key = (involved, event_type, reason)
        similar = self._similar.get(key)
        if similar is None or now - similar.last > self.window:
            similar = _Similar(set(), now)
        similar.messages.add(message)
        similar.last = now
        _put(self._similar, key, similar, self.max_keys)
        if len(similar.messages) < self.similar:
            return message
        while len(similar.messages) > self.similar:  # bounded: from here on every one of them is combined
            similar.messages.pop()
        return COMBINED + message


K = TypeVar("K")
V = TypeVar("V")


def _event_key(involved: Involved, event_type: str, reason: str, message: str) -> _EventKey:
    """Combined Events are one Event whatever their latest message."""
    return (involved, event_type, reason, COMBINED if message.startswith(COMBINED) else message)


def _put(cache: OrderedDict[K, V], key: K, value: V, max_keys: int) -> None:
    """Insert or refresh `key` as the most recently used; drop the least recently used beyond `max_keys`."""
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > max_keys:
        cache.popitem(last=False)
