"""`specfleet sim` (a real process) against the dev cluster: rendered vLLM pods, the real Prometheus, run-time control.

The measured acceptance comes through the whole chain: pod args -> simulator -> file_sd -> Prometheus
scrape -> PromQL, exactly as the judge will read it.
"""

import json
import selectors
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import kubernetes
import pytest
import yaml

from specfleet.api.resource import SpeculativeDeployment
from specfleet.metrics import names
from specfleet.render.manifests import Track, deployment, revision
from specfleet_workshop.devcluster.cluster import ClusterInfo

from fleetkit import wait_for

pytestmark = pytest.mark.integration

T = TypeVar("T")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama-8b-eagle3-mi325x.yaml"
TOLERANCE = 0.03
SCENARIO = """
defaults: {acceptance: 0.6, load: 8}
pairs:
  - {target: "meta-llama/Llama-3.1-8B*", drafter: "yuhuili/EAGLE3-*", track: canary, acceptance: 0.8}
"""
BAD_CANARY = """
defaults: {acceptance: 0.6, load: 8}
pairs:
  - {target: "llama-3.1-8b", drafter: eagle3, track: canary, acceptance: 0.3}
"""


class Sim:
    """`python -m specfleet.cli sim` as a child process, restricted to one namespace."""

    def __init__(self, cluster: ClusterInfo, namespace: str, scenario: Path, log: Path) -> None:
        command = [sys.executable, "-m", "specfleet.cli", "sim", "--scenario", str(scenario), "--seed", "1"]
        command += ["--kubeconfig", str(cluster.kubeconfig), "--file-sd-dir", str(cluster.file_sd_dir)]
        command += ["--namespace", namespace, "--listen", "127.0.0.1:0"]
        with log.open("ab") as stderr:
            self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr)
        self.url = self._serving_url(log)

    def _serving_url(self, log: Path, timeout: float = 30.0) -> str:
        """The URL the process prints once it serves (`specfleet sim: serving http://127.0.0.1:<port>`)."""
        assert self.process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout):
                pytest.fail(f"specfleet sim printed nothing in {timeout}s:\n{log.read_text()}")
        line = self.process.stdout.readline().decode()
        if "serving " not in line:
            pytest.fail(f"unexpected first line {line!r}:\n{log.read_text()}")
        return line.split("serving ", 1)[1].strip()

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=10) as response:
            return json.loads(response.read())

    def put_scenario(self, text: str) -> None:
        request = urllib.request.Request(self.url + "/scenario", data=text.encode(), method="PUT")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        with urllib.request.urlopen(url, timeout=10) as response:
            answer = json.loads(response.read())
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def scalar(self, promql: str) -> float | None:
        result = self.query(promql)
        return float(result[0]["value"][1]) if result else None


def selector(namespace: str, track: str) -> str:
    return f'{{{names.NAMESPACE}="{namespace}",{names.TRACK}="{track}"}}'


def acceptance(prometheus: Prometheus, namespace: str, track: str) -> float | None:
    labels = selector(namespace, track)
    return prometheus.scalar(
        f"sum(rate({names.ACCEPTED_TOKENS}{labels}[30s])) / sum(rate({names.DRAFT_TOKENS}{labels}[30s]))"
    )


def position_zero(prometheus: Prometheus, namespace: str, track: str) -> float | None:
    """The measured per-token acceptance of draft position 0: what the scenario's alpha states."""
    labels = selector(namespace, track)[:-1] + ',position="0"}'
    return prometheus.scalar(
        f"sum(rate({names.ACCEPTED_PER_POSITION}{labels}[30s]))"
        f" / sum(rate({names.NUM_DRAFTS}{selector(namespace, track)}[30s]))"
    )


def near(value: float | None, expected: float) -> bool:
    return value is not None and abs(value - expected) <= TOLERANCE


def predicted(sim: Sim, track: str) -> float:
    """accepted / drafted the simulator's model predicts for the track's pods."""
    return next(pod for pod in sim.get("/pods") if pod["track"] == track)["expected_acceptance_rate"]


@pytest.fixture
def fleet(k8s_api: kubernetes.client.ApiClient, namespace: str) -> dict[str, int]:
    """Stable (2 pods) and canary (1 pod) Deployments of the EAGLE-3 example, with the real rendered vLLM args."""
    document = yaml.safe_load(EXAMPLE.read_text())
    document["metadata"]["namespace"] = namespace
    sdep = SpeculativeDeployment.from_mapping(document)
    apps = kubernetes.client.AppsV1Api(k8s_api)
    replicas = {Track.STABLE.value: 2, Track.CANARY.value: 1}
    for track, count in replicas.items():
        apps.create_namespaced_deployment(namespace, deployment(sdep, Track(track), revision(sdep.spec), count))
    core = kubernetes.client.CoreV1Api(k8s_api)

    def all_ready() -> bool:
        conditions = [(p.status and p.status.conditions) or [] for p in core.list_namespaced_pod(namespace).items]
        ready = [c for c in conditions if any(x.type == "Ready" and x.status == "True" for x in c)]
        return len(ready) == sum(replicas.values())

    wait_for("the fake pods to be Ready", all_ready, timeout=90)
    return replicas


@pytest.fixture
def sim(dev_cluster: ClusterInfo, namespace: str, tmp_path: Path) -> Iterator[Sim]:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO)
    running = Sim(dev_cluster, namespace, scenario, tmp_path / "sim.log")
    yield running
    running.stop()
    assert not list(dev_cluster.file_sd_dir.glob(f"specfleet-sim-{running.url.rsplit(':', 1)[1]}.json"))


def test_prometheus_measures_the_scenario_and_follows_a_change(
    dev_cluster: ClusterInfo, namespace: str, fleet: dict[str, int], sim: Sim
) -> None:
    prometheus = Prometheus(dev_cluster.prometheus_url)
    wait_for("the simulator to see every pod", lambda: len(sim.get("/pods")) == 3, timeout=60)
    assert {pod["gpu"] for pod in sim.get("/pods")} == {"MI325X"}

    up = f'up{{{names.NAMESPACE}="{namespace}"}} == 1'
    wait_for("Prometheus to scrape the three pods", lambda: len(prometheus.query(up)) == 3, timeout=60)
    for series in prometheus.query(up):
        labels = series["metric"]
        assert labels[names.SDEP] == "llama-8b-eagle3" and labels[names.REVISION]
        assert labels[names.POD].startswith(f"llama-8b-eagle3-{labels[names.TRACK]}-")

    canary, stable = predicted(sim, "canary"), predicted(sim, "stable")
    assert stable < canary < 0.8  # at k = 4 accepted/drafted is well below alpha
    wait_for(
        f"acceptance {canary:.3f} on the canary and {stable:.3f} on stable",
        lambda: (
            near(acceptance(prometheus, namespace, "canary"), canary)
            and near(acceptance(prometheus, namespace, "stable"), stable)
        ),
        timeout=90,
    )
    # position 0 shows alpha, a little less for the draft weighting (requests that accept more draft less often)
    assert near(position_zero(prometheus, namespace, "canary"), 0.8 - 0.02)
    labels = selector(namespace, "canary")
    p95 = prometheus.scalar(
        f"histogram_quantile(0.95, sum by (le) (rate({names.INTER_TOKEN_LATENCY}_bucket{labels}[30s])))"
    )
    assert p95 is not None and 0.001 < p95 < 0.1

    sim.put_scenario(BAD_CANARY)  # the canary's drafter turns bad now
    expected = predicted(sim, "canary")
    assert expected == pytest.approx((0.3 + 0.09 + 0.027 + 0.0081) / 4, abs=0.01)  # the closed form at alpha
    wait_for(
        f"the canary's measured acceptance to fall to {expected:.3f}",
        lambda: near(acceptance(prometheus, namespace, "canary"), expected),
        timeout=90,
    )
    assert near(acceptance(prometheus, namespace, "stable"), stable)


def test_pods_that_go_away_lose_their_targets(
    dev_cluster: ClusterInfo, k8s_api: kubernetes.client.ApiClient, namespace: str, fleet: dict[str, int], sim: Sim
) -> None:
    targets_file = dev_cluster.file_sd_dir / f"specfleet-sim-{sim.url.rsplit(':', 1)[1]}.json"

    def tracks() -> list[str]:
        if not targets_file.exists():
            return []
        return sorted(group["labels"][names.TRACK] for group in json.loads(targets_file.read_text()))

    wait_for("targets for all three pods", lambda: tracks() == ["canary", "stable", "stable"], timeout=60)
    kubernetes.client.AppsV1Api(k8s_api).patch_namespaced_deployment_scale(
        "llama-8b-eagle3-canary", namespace, {"spec": {"replicas": 0}}
    )
    wait_for("the canary's target to go", lambda: tracks() == ["stable", "stable"], timeout=60)
    assert sorted(pod["track"] for pod in sim.get("/pods")) == ["stable", "stable"]
