"""The operator's Kubernetes client says who it is, so audit logs tell it apart from other clients."""

from pathlib import Path

from specfleet import __version__
from specfleet.controller.kube import load_config
from specfleet.devcluster.config import render_kubeconfig


def test_the_operator_client_sends_its_own_user_agent(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(render_kubeconfig("https://127.0.0.1:1", b"CA", b"CERT", b"KEY", "me"))
    client = load_config(str(kubeconfig))
    assert client.user_agent == f"specfleet/{__version__}"
    assert client.default_headers["User-Agent"] == f"specfleet/{__version__}"
