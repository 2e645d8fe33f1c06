"""Go-style durations (`30s`, `5m`, `1h30m`) as the CRD spells them, and their parsing."""

import re
from datetime import timedelta

DURATION_PATTERN = r"^([0-9]+(ms|s|m|h))+$"
_PART = re.compile(r"([0-9]+)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


LONGEST = "8760h"
"""The longest duration a spec may give (a year): the pattern alone admits 32 digits of hours, past what
Python's timedelta and Go's time.Duration hold, and no pause, window or deadline of a rollout needs more."""
_LONGEST_SECONDS = 8760 * 3600.0


def parse_duration(text: str) -> timedelta:
    """Parse `1h30m`-style text; raises ValueError on anything the CRD pattern or its bound would refuse."""
    if not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(f"invalid duration {text!r}: use a number with a unit, e.g. 30s, 5m, 1h30m")
    seconds = sum(int(number) * _UNIT_SECONDS[unit] for number, unit in _PART.findall(text))
    if seconds > _LONGEST_SECONDS:
        raise ValueError(f"duration {text!r} is longer than {LONGEST}")
    return timedelta(seconds=seconds)


def bounded_duration(text: str) -> str:
    """A pydantic after-validator: `text` when it parses within LONGEST (the CRD's CEL rule says the same)."""
    parse_duration(text)
    return text
