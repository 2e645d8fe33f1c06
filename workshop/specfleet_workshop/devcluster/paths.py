"""Where the dev cluster keeps its state (one directory per cluster); its binaries are in the shared cache
(`specfleet_workshop.cachedir`).

The state lives outside the repository, so a fresh clone or a second work tree finds the running cluster.
The function takes the environment as a mapping so the rule can be tested without touching the real one.
"""

import os
from collections.abc import Mapping
from pathlib import Path


def default_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Cluster state: $SPECFLEET_STATE_DIR, else $XDG_STATE_HOME/specfleet/dev, else ~/.local/state/specfleet/dev."""
    env = os.environ if environ is None else environ
    if env.get("SPECFLEET_STATE_DIR"):
        return Path(env["SPECFLEET_STATE_DIR"]).expanduser()
    xdg_state = env.get("XDG_STATE_HOME") or str(Path("~/.local/state").expanduser())
    return Path(xdg_state).expanduser() / "specfleet" / "dev"
