"""The operator's image, built here with buildah (`specfleet dev images`), run as the chart runs it.

The image is built from images/operator/Dockerfile on the real base where a registry answers, else on the
Debian stand-in (cached under ~/.cache/specfleet/images, so a warm run only looks it up). podman runs it
with runc on the host network, with the argv, user, read-only root, capabilities and mounts taken from the
Deployment `helm template` renders for that image (`images.podman_run_argv`): nothing is copied by hand.
The one addition is the dev cluster's kubeconfig, mounted read-only, where a pod has its ServiceAccount token.
"""

import json
import os
import shutil
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.vocabulary import Track
from specfleet.preflight.job import preflight_job
from specfleet.render import manifests
from specfleet.render.argv import served_model_name
from specfleet_workshop.cachedir import cache_root
from specfleet_workshop.devcluster import images
from specfleet_workshop.devcluster.cluster import ClusterInfo
from specfleet_workshop.devcluster.images import OPERATOR, BaseChoice, Built, ImageBuilder, ImageError
from specfleet_workshop.devcluster.versions import KUBERNETES_VERSION
from specfleet_workshop.fleetpods.tiny_tokenizers import hub_snapshot, write_tokenizer
from specfleet_workshop.realvllm import install
from specfleet_workshop.realvllm.translate import translate

from fleetkit import EAGLE3_K5, PLAIN, Fleet, Simulator, free_port, start_canary, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("images"), pytest.mark.cache("operator-image")]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "specfleet"


@pytest.fixture(scope="module")
def builder() -> ImageBuilder:
    built = ImageBuilder(cache_root(), log=print)
    try:
        built.check_tools(("buildah", "mmdebstrap", "podman", "runc"))
    except ImageError as error:
        pytest.fail(str(error))
    return built


@pytest.fixture(scope="module")
def operator_image(builder: ImageBuilder) -> Built:
    """The operator image, built before the module's first test started (`cache("operator-image")`)."""
    return builder.build(OPERATOR, BaseChoice.AUTO)


def podman(builder: ImageBuilder, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(builder.storage.podman(*args), capture_output=True, text=True, timeout=120, check=False)
    if check and done.returncode != 0:
        pytest.fail(f"podman {' '.join(args[:3])} ... failed ({done.returncode}):\n{done.stderr}")
    return done


def image_config(builder: ImageBuilder, tag: str) -> dict[str, Any]:
    argv = builder.storage.buildah("inspect", "--type", "image", tag)
    return json.loads(subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60).stdout)["OCIv1"][
        "config"
    ]


INSPECT = """
import json, os, shutil
bundle = open("/etc/ssl/certs/ca-certificates.crt").read()
tools = {t: shutil.which(t) for t in ("pip", "pip3", "gcc", "cc", "g++", "c++", "make")}
pips = [os.path.join(d, n) for d, dirs, files in os.walk("/") for n in dirs + files
        if n == "pip" or n.startswith("pip-") and n.endswith(".dist-info")]
print(json.dumps({"bundle": bundle, "tools": tools, "pips": pips, "uid": os.getuid(), "gid": os.getgid()}))
"""


def test_the_runtime_image_has_no_pip_no_compiler_and_not_the_build_ca(
    builder: ImageBuilder, operator_image: Built
) -> None:
    config = image_config(builder, operator_image.tag)
    assert config["User"] == "65532:65532" and config["Entrypoint"] == ["specfleet", "run"]
    run = ("run", "--rm", *images.PODMAN_ULIMITS, "--network", "none", "--read-only", "--entrypoint", "python")
    found = json.loads(podman(builder, *run, operator_image.tag, "-c", INSPECT).stdout)
    assert (found["uid"], found["gid"]) == (65532, 65532)
    assert found["tools"] == dict.fromkeys(found["tools"]), "pip or a compiler on the runtime image's PATH"
    assert found["pips"] == [], "pip left in the runtime image (base or venv)"
    in_image = images.fingerprints(found["bundle"])
    assert len(in_image) > 100  # Debian's / the base's Mozilla bundle is there
    if not operator_image.extra_cas:
        pytest.skip("no extra CA on this machine: nothing was passed to the build that could leak")
    extra = set().union(*(images.fingerprints(path.read_text()) for path in operator_image.extra_cas))
    assert extra and not extra & in_image, "an extra CA given to the build is in the image's trust store"


RUNTIME_ONLY = """
import importlib.metadata, importlib.util, json
names = sorted(d.metadata["Name"] for d in importlib.metadata.distributions())
print(json.dumps({"workshop": importlib.util.find_spec("specfleet_workshop") is not None, "distributions": names}))
"""


def test_the_operator_image_holds_the_runtime_distribution_only(builder: ImageBuilder, operator_image: Built) -> None:
    run = ("run", "--rm", *images.PODMAN_ULIMITS, "--network", "none", "--read-only", "--entrypoint", "python")
    found = json.loads(podman(builder, *run, operator_image.tag, "-c", RUNTIME_ONLY).stdout)
    assert found["workshop"] is False
    assert "specfleet" in found["distributions"]
    assert not {"specfleet-workshop", "specfleet-dev", "matplotlib", "transformers"} & set(found["distributions"])
    dev = podman(builder, "run", "--rm", *images.PODMAN_ULIMITS, "--network", "none", "--read-only",
                 "--entrypoint", "specfleet", operator_image.tag, "dev", "up", check=False)  # fmt: skip
    assert dev.returncode == 2 and "pip install specfleet-workshop" in dev.stderr, dev.stderr


def rendered_deployment(dev_cluster: ClusterInfo, image: str, *values: str) -> dict[str, Any]:
    repository, tag = image.rsplit(":", 1)
    rendered = subprocess.run(
        [str(dev_cluster.helm), "template", "sf", str(CHART), "--kube-version", KUBERNETES_VERSION,
         "--set", f"image.repository={repository}",
         "--set", f"image.tag={tag}", *values],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    (deployment,) = [doc for doc in yaml.safe_load_all(rendered) if doc and doc["kind"] == "Deployment"]
    return deployment


@pytest.fixture
def chart_deployment(dev_cluster: ClusterInfo, namespace: str, operator_image: Built) -> dict[str, Any]:
    """What `helm install` with image.repository/tag set to the build would create, for this test's namespace."""
    return rendered_deployment(
        dev_cluster,
        operator_image.tag,
        *("--set", f"watchNamespaces={{{namespace}}}", "--set", f"operator.prometheusUrl={dev_cluster.prometheus_url}"),
        *("--set", "operator.resyncSeconds=30", "--set", f"healthPort={free_port()}"),
        *("--set", f"metrics.port={free_port()}"),  # the host network: no clash with anything listening
    )


@dataclass
class Running:
    name: str
    argv: list[str]
    process: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        if self.process.poll() is not None:
            pytest.fail(f"the container exited ({self.process.returncode}):\n{self.log.read_text()[-3000:]}")
        return True


@pytest.fixture
def operator_container(
    builder: ImageBuilder,
    dev_cluster: ClusterInfo,
    crd_installed: None,
    chart_deployment: dict[str, Any],
    tmp_path: Path,
) -> Iterator[Running]:
    """The rendered container running under podman. Its kubeconfig is a copy owned by the pod's user, as a
    pod's ServiceAccount token is readable by it."""
    pod = chart_deployment["spec"]["template"]["spec"]
    kubeconfig = tmp_path / "kubeconfig"
    shutil.copy(dev_cluster.kubeconfig, kubeconfig)
    os.chown(kubeconfig, pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"])
    kubeconfig.chmod(0o400)
    name = f"specfleet-operator-{uuid.uuid4().hex[:8]}"
    argv = images.podman_run_argv(builder.storage, chart_deployment, pod["containers"][0]["image"], name, kubeconfig)
    log = tmp_path / "operator.log"
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield Running(name, argv, process, log)
    finally:
        podman(builder, "stop", "--time", "20", name, check=False)
        process.wait(timeout=60)
        print(log.read_text()[-5000:])


def probe_url(container: dict[str, Any], probe: dict[str, Any]) -> str:
    """A kubelet's httpGet probe on the host network: the named port resolved from the container's ports."""
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    port = probe["httpGet"]["port"]
    return f"http://127.0.0.1:{ports.get(port, port)}{probe['httpGet']['path']}"


def answers(url: str, timeout: float) -> bool:
    try:
        return urllib.request.urlopen(url, timeout=timeout).status == 200
    except OSError:
        return False


def test_the_operator_runs_from_its_image_exactly_as_the_chart_renders_it(
    builder: ImageBuilder,
    chart_deployment: dict[str, Any],
    operator_container: Running,
    simulator: Simulator,
    fleet: Fleet,
) -> None:
    name = operator_container.name
    pod = chart_deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    for probe in ("readinessProbe", "livenessProbe"):
        spec = container[probe]
        url = probe_url(container, spec)
        wait_for(
            f"the {probe} ({url})",
            lambda u=url, s=spec: operator_container.alive() and answers(u, s["timeoutSeconds"]),
            timeout=90,
        )

    inspected = json.loads(podman(builder, "inspect", name).stdout)[0]
    assert [inspected["Path"], *inspected["Args"]] == ["specfleet", "run", *container["args"]]
    user = f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}"
    assert inspected["Config"]["User"] == user
    assert podman(builder, "exec", name, "id", "-u").stdout.strip() == str(pod["securityContext"]["runAsUser"])
    assert inspected["HostConfig"]["ReadonlyRootfs"] is container["securityContext"]["readOnlyRootFilesystem"] is True
    assert podman(builder, "exec", name, "touch", "/opt/x", check=False).returncode != 0
    capabilities = podman(builder, "exec", name, "grep", "CapEff", "/proc/1/status").stdout.split()
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"] and capabilities == ["CapEff:", "0" * 16]
    tmpfs = {m["mountPath"] for m in container["volumeMounts"] if _volume(pod, m["name"]).get("emptyDir") is not None}
    assert set(inspected["HostConfig"]["Tmpfs"]) == tmpfs == {"/tmp"}  # the emptyDirs, and no other writable place
    assert [m["Destination"] for m in inspected["Mounts"]] == ["/etc/specfleet/kubeconfig"]  # the one addition
    assert podman(builder, "exec", name, "touch", "/tmp/x").returncode == 0  # the emptyDir is writable

    start_canary(fleet, {**EAGLE3_K5, "model": "bad/EAGLE3-drafter"}, stable=PLAIN)
    status = wait_for("rollback", fleet.phase_is("llama", "RolledBack"), timeout=180)
    outcome = status["history"][-1]
    assert outcome["outcome"] == "RolledBack" and "acceptance alpha" in outcome["reason"], outcome
    assert fleet.core.read_namespaced_service("llama", fleet.namespace).spec.selector["specfleet.io/track"] == "stable"


def _volume(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(volume for volume in pod["volumes"] if volume["name"] == name)


VLLM_CPU_ENV = (
    *("VLLM_TARGET_DEVICE", "VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "OMP_NUM_THREADS"),
    "VLLM_ENABLE_V1_MULTIPROCESSING",
    *("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK", "PYTHONUNBUFFERED"),
)
"""What `specfleet sim --engine vllm-cpu` sets for real vLLM on 2 cores (realvllm.install.VllmHome.env), minus paths."""


ARCTIC = "import arctic_inference.suffix_decoding._C as c; print(c.__file__)"
"""The one extension the image adds: arctic-inference's suffix tree, built against the base's Python."""


@pytest.mark.vllm
@pytest.mark.cache("vllm-image")
def test_the_vllm_image_serves_the_rendered_pods_command_line_on_a_tiny_model(
    builder: ImageBuilder, vllm_home: install.VllmHome, tmp_path: Path
) -> None:
    """images/vllm-rocm's own layers on the vllm-cpu stand-in (the venv mounted, not copied: 5.9 GB), then the
    rendered pod's `command` and args (hardware parts translated, as `sim --engine vllm-cpu` does) in it."""
    built = builder.build(images.vllm_spec(vllm_home.venv, install.DEFAULT_VERSION), BaseChoice.STAND_IN)
    config = image_config(builder, built.tag)
    assert config["User"] == f"{manifests.SERVING_UID}:{manifests.SERVING_UID}" and config["WorkingDir"] == "/cache"
    assert {"HOME=/cache", f"HF_HOME={manifests.HF_HOME}"} <= set(config["Env"])

    document = yaml.safe_load((ROOT / "examples" / "codellama-ngram.yaml").read_text())
    document["spec"]["engine"]["vllmVersion"] = install.DEFAULT_VERSION
    sdep = SpeculativeDeployment.from_mapping(document)
    pod = manifests.pod_template(sdep, Track.STABLE, "r")["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["vllm", "serve"]
    port = free_port()
    translation = translate(container["args"], Path("/models"), port)
    print("\n".join(translation.changes))
    cpu_env = vllm_home.env({})
    env = {**{e["name"]: e["value"] for e in container["env"] if "value" in e}, **{k: cpu_env[k] for k in VLLM_CPU_ENV}}
    models = tmp_path / "models"  # readable by the pod's user, as the model cache is with the pod's fsGroup
    shutil.copytree(vllm_home.models, models)
    for path in [models, *models.rglob("*")]:
        os.chown(path, pod["securityContext"]["runAsUser"], pod["securityContext"]["fsGroup"])
    shm = next(m["name"] for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm")
    shm_size = _volume(pod, shm)["emptyDir"]["sizeLimit"].removesuffix("i").lower()  # the pod's dshm emptyDir
    name = f"vllm-{uuid.uuid4().hex[:8]}"
    argv = builder.storage.podman(
        *("run", "--rm", "--name", name, "--network", "host", *images.PODMAN_ULIMITS, "--shm-size", shm_size),
        *("--user", f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}"),
        *("--volume", f"{vllm_home.venv}:{images.VLLM_MOUNT}:ro", "--volume", f"{models}:/models:ro"),
        *(part for key, value in env.items() for part in ("--env", f"{key}={value}")),
        *("--entrypoint", json.dumps(container["command"]), built.tag, *translation.argv),
    )
    log = tmp_path / "vllm.log"
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:

        def healthy() -> bool:
            if process.poll() is not None:
                pytest.fail(f"vllm serve exited ({process.returncode}):\n{log.read_text()[-4000:]}")
            return answers(f"http://127.0.0.1:{port}/health", 3)

        wait_for("vllm serve in the image to be healthy", healthy, timeout=420)
        arctic = podman(builder, "exec", name, "python3", "-c", ARCTIC, check=False)
        top = podman(builder, "top", name, "args").stdout
        body = json.dumps({"model": served_model_name(sdep.spec), "prompt": "def f(x):",
                           "max_tokens": 16, "temperature": 0}).encode()  # fmt: skip
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})  # fmt: skip
        completion = json.load(urllib.request.urlopen(request, timeout=120))
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        podman(builder, "stop", "--time", "20", name, check=False)
        process.wait(timeout=60)
    assert "vllm serve /models/target" in top or "vllm.entrypoints.cli.main serve /models/target" in top, top
    assert completion["choices"][0]["text"], completion
    assert "vllm:spec_decode_num_drafts_total" in metrics
    assert arctic.returncode == 0 and "/site-packages/arctic_inference/" in arctic.stdout, arctic.stderr


@pytest.mark.vllm
@pytest.mark.cache("vllm-image")
def test_the_vllm_image_runs_the_rendered_preflight_job_offline_as_the_pods_user(
    builder: ImageBuilder, vllm_home: install.VllmHome, tmp_path: Path
) -> None:
    """The preflight Job's container, as rendered, in the vLLM image (on its stand-in): no network, the model
    cache mounted at HF_HOME and the termination log at its path, as a kubelet would. The tiny models' drafter
    passes against their target (real byte-level BPE tokenizers); a drafter with another vocabulary fails."""
    built = builder.build(images.vllm_spec(vllm_home.venv, install.DEFAULT_VERSION), BaseChoice.STAND_IN)
    cache = tmp_path / "hf"  # the pods' model cache, in the hub's layout
    for model in ("target", "good-drafter"):
        shutil.copytree(vllm_home.models / model, hub_snapshot(cache, f"specfleet-tiny/{model}", "main"))
    write_tokenizer(hub_snapshot(cache, "specfleet-test/other-vocab", "main"), vocab_size=600)
    for path in [cache, *cache.rglob("*")]:
        os.chown(path, manifests.SERVING_UID, manifests.SERVING_UID)
    verdicts = {}
    for drafter in ("specfleet-tiny/good-drafter", "specfleet-test/other-vocab"):
        document = yaml.safe_load((ROOT / "examples" / "codellama-ngram.yaml").read_text())
        document["spec"]["model"] = {"name": "specfleet-tiny/target", "revision": "main"}
        document["spec"]["speculative"] = {"method": "draft_model", "model": drafter, "revision": "main"}
        sdep = SpeculativeDeployment.from_mapping(document)
        pod = preflight_job(sdep, "r", sdep.spec.serving())["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        termination = tmp_path / f"termination-{drafter.replace('/', '-')}"
        termination.touch()
        os.chown(termination, manifests.SERVING_UID, manifests.SERVING_UID)  # as a kubelet makes it for the pod
        env = {**{e["name"]: e["value"] for e in container["env"] if "value" in e}, "HF_HUB_OFFLINE": "1"}
        argv = builder.storage.podman(
            *("run", "--rm", "--network", "none", *images.PODMAN_ULIMITS),
            *("--user", f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}"),
            *("--volume", f"{vllm_home.venv}:{images.VLLM_MOUNT}:ro", "--volume", f"{cache}:{manifests.HF_HOME}"),
            *("--volume", f"{termination}:{container['terminationMessagePath']}"),
            *(part for key, value in env.items() for part in ("--env", f"{key}={value}")),
            *("--entrypoint", json.dumps(container["command"]), built.tag, *container["args"]),
        )
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        verdicts[drafter] = (done.returncode, json.loads(termination.read_text() or "{}"), done.stderr[-2000:])
    code, verdict, stderr = verdicts["specfleet-tiny/good-drafter"]
    assert code == 0 and verdict["passed"], (verdict, stderr)
    assert verdict["target"]["source"] == "tokenizer of specfleet-tiny/target@main"
    assert "drafter size measured from its weight files" in " ".join(verdict["notes"])
    code, verdict, stderr = verdicts["specfleet-test/other-vocab"]
    assert code == 1 and not verdict["passed"], (verdict, stderr)
    assert any(p.startswith("vocabulary size differs: target ") for p in verdict["problems"]), verdict
