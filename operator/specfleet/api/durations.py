"""Go-style durations (`30s`, `5m`, `1h30m`) as the CRD spells them, and their parsing."""

import re
from datetime import timedelta

DURATION_PATTERN = r"^([0-9]+(ms|s|m|h))+$"
_PART = re.compile(r"([0-9]+)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> timedelta:
    """Parse `1h30m`-style text; raises ValueError on anything the CRD pattern would refuse."""
    if not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(f"invalid duration {text!r}: use a number with a unit, e.g. 30s, 5m, 1h30m")
    seconds = sum(int(number) * _UNIT_SECONDS[unit] for number, unit in _PART.findall(text))
    return timedelta(seconds=seconds)
