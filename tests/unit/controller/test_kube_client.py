"""The operator's Kubernetes client: it says who it is (audit logs tell it apart), and keeps enough connections."""

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


def test_the_client_keeps_a_connection_per_worker(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(render_kubeconfig("https://127.0.0.1:1", b"CA", b"CERT", b"KEY", "me"))
    assert load_config(str(kubeconfig), connections=64).configuration.connection_pool_maxsize == 64
    assert load_config(str(kubeconfig), connections=1).configuration.connection_pool_maxsize >= 5  # the default
