"""Cache and state directories follow SPECFLEET_* first, then XDG, then the home directory."""

from pathlib import Path

from specfleet_workshop.cachedir import cache_root
from specfleet_workshop.devcluster.cli import env_exports
from specfleet_workshop.devcluster.paths import default_state_dir


def test_cache_prefers_specfleet_cache_then_xdg_then_home() -> None:
    assert cache_root({"SPECFLEET_CACHE": "/c", "XDG_CACHE_HOME": "/x"}) == Path("/c")
    assert cache_root({"XDG_CACHE_HOME": "/x"}) == Path("/x/specfleet")
    assert cache_root({}) == Path("~/.cache/specfleet").expanduser()


def test_state_prefers_specfleet_state_dir_then_xdg_then_home() -> None:
    assert default_state_dir({"SPECFLEET_STATE_DIR": "/s", "XDG_STATE_HOME": "/x"}) == Path("/s")
    assert default_state_dir({"XDG_STATE_HOME": "/x"}) == Path("/x/specfleet/dev")
    assert default_state_dir({}) == Path("~/.local/state/specfleet/dev").expanduser()


def test_dev_env_puts_the_pinned_tools_first_on_path_once_each() -> None:
    lines = env_exports(
        Path("/state/kube config"),
        [
            Path("/cache/bin/kubectl-v1.37.2/kubectl"),
            Path("/cache/bin/helm-v3.22.0/helm"),
            Path("/cache/bin/helm-v3.22.0/x"),
        ],
    )
    assert lines == [
        "export KUBECONFIG='/state/kube config'",
        'export PATH=/cache/bin/kubectl-v1.37.2:/cache/bin/helm-v3.22.0:"$PATH"',
    ]
