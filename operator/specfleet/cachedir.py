"""The per-user cache that outlives repositories and clusters: built binaries and images, real vLLM's venvs.

It lives outside the repository so a fresh clone, `git clean` or a second work tree reuses what took many
minutes to build or download. Here, below both, because the dev cluster and real vLLM share it. The
function takes the environment as a mapping so the rule can be tested without touching the real one.
"""

import os
from collections.abc import Mapping
from pathlib import Path


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """$SPECFLEET_CACHE, else $XDG_CACHE_HOME/specfleet, else ~/.cache/specfleet."""
    env = os.environ if environ is None else environ
    if env.get("SPECFLEET_CACHE"):
        return Path(env["SPECFLEET_CACHE"]).expanduser()
    xdg_cache = env.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(xdg_cache).expanduser() / "specfleet"
