"""A release cut into a real OCI registry and installed from it, as docs/release.md and docs/install.md say.

The registry is CNCF Distribution's `registry` (pinned, built from the Go module proxy into the cache), on
loopback over HTTPS with a CA of its own, standing in for the public one. `specfleet dev release` pushes the
images and the chart into it; `helm install oci://...` installs from it; the operator image is pulled from it
by digest into an empty podman storage and run as the installed Deployment says (the dev cluster's kwok nodes
run no containers, so podman plays the kubelet, as in test_images.py). docs/install.md's marked shell blocks
are then run in order on a fresh dev cluster, with the registry's address in SPECFLEET_REGISTRY, the release's
files served on loopback in SPECFLEET_DOWNLOADS (a stand-in for the release page) and the registry's CA
trusted through SSL_CERT_FILE, as a machine trusts a public registry's.
"""

import http.server
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from specfleet_workshop.cachedir import cache_root
from specfleet_workshop.devcluster import cluster, images, registry
from specfleet_workshop.devcluster.binaries import COMPONENTS, find_binary
from specfleet_workshop.devcluster.cluster import ClusterInfo
from specfleet_workshop.devcluster.config import free_ports
from specfleet_workshop.devcluster.nodes import pool_from_counts

from chartkit import Cluster
from fleetkit import Fleet, free_port, healthy, wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.xdist_group("images"),
    pytest.mark.cache("registry", "operator-image", "vllm-image", "kubectl-specfleet-zipapp"),
    pytest.mark.timeout(1200),
]

ROOT = Path(__file__).resolve().parents[2]
INSTALL_MD = ROOT / "docs" / "install.md"
VERSION = str(yaml.safe_load((ROOT / "charts" / "specfleet" / "Chart.yaml").read_text())["version"])
"""The version docs/install.md installs: the chart's own, so the walk below finds what the page names."""
WALK_MARKER = "<!-- walked-by: tests/integration/test_release.py -->"
"""The line before each fenced block of docs/install.md that the walk runs, in page order."""


@pytest.fixture(scope="module")
def loopback(tmp_path_factory: pytest.TempPathFactory) -> Iterator[registry.Registry]:
    binary = find_binary(COMPONENTS["registry"], cache_root())
    assert binary is not None, "the `registry` cache entry builds it before the test"
    with registry.running(binary, tmp_path_factory.mktemp("registry")) as running:
        yield running


@pytest.fixture(scope="module")
def released(loopback: registry.Registry, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`specfleet dev release`, the documented command, into the loopback registry."""
    output = tmp_path_factory.mktemp("dist")
    command = [str(Path(sys.executable).parent / "specfleet"), "dev", "release", "--registry", loopback.address,
               "--ca-file", str(loopback.ca_file), "--version", VERSION, "--output", str(output)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=1100, check=False)
    print(done.stderr[-4000:])
    assert done.returncode == 0, done.stderr[-4000:]
    made: dict[str, Any] = json.loads((output / "release.json").read_text())
    assert json.loads(done.stdout) == made
    return made


@pytest.fixture
def storage() -> Iterator[images.Storage]:
    """An empty podman storage, so the image can only come from the registry (under /tmp: podman refuses a
    runroot path longer than 50 characters, which pytest's tmp_path is)."""
    root = Path(tempfile.mkdtemp(prefix="sf-release-", dir="/tmp"))
    made = images.Storage(root)
    for directory in (made.graph, made.run, made.tmp):
        directory.mkdir()
    yield made
    subprocess.run(made.podman("rmi", "--all", "--force"), capture_output=True, timeout=120, check=False)
    shutil.rmtree(root, ignore_errors=True)


def catalog(loopback: registry.Registry) -> list[str]:
    context = ssl.create_default_context(cafile=str(loopback.ca_file))
    with urllib.request.urlopen(f"https://{loopback.address}/v2/_catalog", context=context, timeout=10) as answer:
        repositories: list[str] = json.load(answer)["repositories"]
    return repositories


def podman(storage: images.Storage, *args: str) -> str:
    done = subprocess.run(storage.podman(*args), capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        pytest.fail(f"podman {' '.join(args[:2])} ... failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def test_the_release_installs_from_the_registry_and_the_operator_runs_from_its_image_by_digest(
    dev_cluster: ClusterInfo,
    crd_installed: None,
    namespace: str,
    loopback: registry.Registry,
    released: dict[str, Any],
    fleet: Fleet,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    storage: images.Storage,
) -> None:
    assert sorted(catalog(loopback)) == ["charts/specfleet", "specfleet-operator", "vllm-rocm"]
    operator_image = f"{released['operator']['repository']}@{released['operator']['digest']}"
    assert released["chart"] == f"oci://{loopback.address}/charts/specfleet"

    health_port, metrics_port = free_port(), free_port()  # podman runs it on the host network
    chart, name = Cluster(dev_cluster), f"sf-{namespace.removeprefix('test-')}"  # its ClusterRoles are cluster-wide
    request.addfinalizer(lambda: chart.helm("uninstall", name, "-n", namespace, "--wait", check=False))
    installed = chart.helm(
        "install", name, released["chart"], "--version", VERSION, "-n", namespace, "--ca-file", str(loopback.ca_file),
        "--set", f"watchNamespaces={{{namespace}}}", "--set", f"healthPort={health_port}",
        "--set", f"metrics.port={metrics_port}", "--set", "operator.resyncSeconds=30",
    )  # fmt: skip
    serving_image = f"{released['vllm']['repository']}@{released['vllm']['digest']}"
    assert serving_image in installed.stdout  # the notes name the serving image of this release, by digest
    deployment = json.loads(fleet.kubectl("get", "deployment", f"{name}-specfleet", "-o", "json").stdout)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == operator_image

    podman(storage, "pull", "--cert-dir", str(loopback.cert_dir), operator_image)
    inspected = json.loads(podman(storage, "image", "inspect", operator_image))
    assert inspected[0]["Digest"] == released["operator"]["digest"]

    kubeconfig = tmp_path / "kubeconfig"  # the pod's ServiceAccount token, readable by the pod's user
    shutil.copy(dev_cluster.kubeconfig, kubeconfig)
    os.chown(kubeconfig, pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"])
    container = f"specfleet-released-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "operator.log"
    with log.open("wb") as out:
        process = subprocess.Popen(images.podman_run_argv(storage, deployment, operator_image, container, kubeconfig),
                                   stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    try:

        def ready() -> bool:
            if process.poll() is not None:
                pytest.fail(f"the container exited ({process.returncode}):\n{log.read_text()[-3000:]}")
            return answers(f"http://127.0.0.1:{health_port}/healthz")

        wait_for("the released operator's health endpoint", ready, timeout=120)
        fleet.unguarded = True  # no Prometheus here: the fleet canaries on its pauses alone, as it says
        status = healthy(fleet)
        assert status["phase"] == "Healthy"
        assert (
            podman(storage, "inspect", "--format", "{{.ImageDigest}}", container).strip()
            == released["operator"]["digest"]
        )
    finally:
        subprocess.run(storage.podman("stop", "--time", "20", container), capture_output=True, timeout=120, check=False)
        process.wait(timeout=60)
        print(log.read_text()[-3000:])


def walked_blocks(markdown: str) -> list[str]:
    """The fenced bash blocks that follow WALK_MARKER, in page order."""
    pattern = re.escape(WALK_MARKER) + r"\n```bash\n(.*?)\n```"
    return re.findall(pattern, markdown, flags=re.DOTALL)


def test_the_walked_blocks_are_found_and_name_the_chart_s_version() -> None:
    blocks = walked_blocks(INSTALL_MD.read_text())
    assert len(blocks) >= 2 and INSTALL_MD.read_text().count(WALK_MARKER) == len(blocks)
    assert f"--version {VERSION}" in blocks[0] and f"/v{VERSION}" in "\n".join(blocks)


@pytest.fixture
def fresh_cluster(tmp_path: Path) -> Iterator[ClusterInfo]:
    """A dev cluster of its own, as a new user has: nothing installed, the chart's CRD not applied."""
    state = tmp_path / "cluster"
    info = cluster.up(state, pool=pool_from_counts(mi300x=1, mi325x=0, mi355x=0, cpu=1), ports=free_ports())
    try:
        yield info
    finally:
        cluster.down(state)


@pytest.fixture
def release_page(released: dict[str, Any]) -> Iterator[str]:
    """The release's files over HTTP on loopback, standing in for the project's release download page."""
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(Path(released["plugin"]).parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_docs_install_md_walked_as_a_new_user(
    fresh_cluster: ClusterInfo,
    loopback: registry.Registry,
    released: dict[str, Any],
    release_page: str,
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    trust = tmp_path / "ca-bundle.crt"  # the machine's roots and the registry's CA, as for a public registry
    trust.write_text(Path(ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt").read_text()
                     + loopback.ca_file.read_text())  # fmt: skip
    tools = {str(fresh_cluster.kubectl.parent), str(fresh_cluster.helm.parent)}
    env = {
        "HOME": str(home),
        "PATH": os.pathsep.join([str(home / ".local" / "bin"), *tools, "/usr/local/bin", "/usr/bin", "/bin"]),
        "KUBECONFIG": str(fresh_cluster.kubeconfig),
        "SSL_CERT_FILE": str(trust),
        "SPECFLEET_REGISTRY": loopback.address,
        "SPECFLEET_DOWNLOADS": release_page,
        "LANG": "C.UTF-8",
    }
    script = "set -euxo pipefail\n" + "\n".join(walked_blocks(INSTALL_MD.read_text())) + "\n"
    (tmp_path / "walk.sh").write_text(script)
    done = subprocess.run(["bash", str(tmp_path / "walk.sh")], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip
    print(done.stdout[-4000:], done.stderr[-6000:], sep="\n")
    assert done.returncode == 0, done.stderr[-6000:]
    operator_image = f"{released['operator']['repository']}@{released['operator']['digest']}"
    assert operator_image in done.stdout  # the page's check of the image the chart runs
    assert (home / ".local" / "bin" / "kubectl-specfleet").read_bytes() == Path(released["plugin"]).read_bytes()
