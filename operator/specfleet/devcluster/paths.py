"""Where the dev cluster keeps its binaries (a cache shared by all clusters) and its state (one per cluster).

Both live outside the repository so a fresh clone, `git clean` or a second work tree reuses the
binaries that took many minutes to build. The functions take the environment as a mapping so the
rules can be tested without touching the real environment.
"""

import os
from collections.abc import Mapping
from pathlib import Path


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """Binary and build cache: $SPECFLEET_CACHE, else $XDG_CACHE_HOME/specfleet, else ~/.cache/specfleet."""
    env = os.environ if environ is None else environ
    if env.get("SPECFLEET_CACHE"):
        return Path(env["SPECFLEET_CACHE"]).expanduser()
    xdg_cache = env.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(xdg_cache).expanduser() / "specfleet"


def default_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Cluster state: $SPECFLEET_STATE_DIR, else $XDG_STATE_HOME/specfleet/dev, else ~/.local/state/specfleet/dev."""
    env = os.environ if environ is None else environ
    if env.get("SPECFLEET_STATE_DIR"):
        return Path(env["SPECFLEET_STATE_DIR"]).expanduser()
    xdg_state = env.get("XDG_STATE_HOME") or str(Path("~/.local/state").expanduser())
    return Path(xdg_state).expanduser() / "specfleet" / "dev"
