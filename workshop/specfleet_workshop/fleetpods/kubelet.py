"""Plays the kubelet for the pods the dev engines run for real: preflight Job pods (docs/simulator.md).

kwok makes every pod on its fake nodes Running, and its pod-complete stage would mark a Job's pod Succeeded
at once (the dev cluster keeps that stage off these pods): a preflight's verdict would be made up. Instead,
once kwok has a preflight pod Running, its container's command runs here, with this Python, the pod's model
cache (HF_HOME) mapped to a local directory and its termination log to a local file. Then the pod's status
says the container terminated, with the exit code and the message, as a kubelet writes it, and the dev
cluster's Job controller marks the Job Complete or Failed.
"""

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes
import urllib3
from kubernetes.client.exceptions import ApiException

from specfleet.api.vocabulary import LABEL_PREFLIGHT
from specfleet_workshop.fleetpods.tiny_tokenizers import has_snapshot, hub_snapshot, write_tokenizer

log = logging.getLogger(__name__)

FAKE_NODE_LABELS = {"type": "kwok"}
"""The dev cluster's nodes: pods elsewhere have a real kubelet and are never run here."""
DEFAULT_TERMINATION_PATH = "/dev/termination-log"
LOG_TAIL_LINES = 80
LOG_TAIL_BYTES = 2048
"""What a kubelet keeps of the log for `terminationMessagePolicy: FallbackToLogsOnError`."""
MESSAGE_BYTES = 4096
TIMEOUT_SECONDS = 600.0


@dataclass(frozen=True)
class LocalRun:
    """A pod's container as a local process: its argv and environment with the pod's paths mapped here."""

    argv: list[str]
    env: dict[str, str]
    termination_log: Path


def _mapped(value: str, mounts: Mapping[str, Path]) -> str:
    for remote, local in mounts.items():
        if value == remote or value.startswith(remote + "/"):
            return str(local) + value[len(remote) :]
    return value


def local_run(pod: Mapping[str, Any], model_cache: Path, workdir: Path, base_env: Mapping[str, str]) -> LocalRun:
    """The pod's one container as a local command: `python...` is this Python, the pod's HF_HOME is
    `model_cache`, its termination log a file in `workdir`. Only literal env values are taken (a Secret is
    never read); the hub is never asked (HF_HUB_OFFLINE), and this machine's own HF_* settings are dropped."""
    (container,) = pod["spec"]["containers"]
    literal = {e["name"]: e.get("value", "") for e in container.get("env") or [] if "valueFrom" not in e}
    termination = workdir / f"{pod['metadata']['uid']}.termination-log"
    mounts = {container.get("terminationMessagePath", DEFAULT_TERMINATION_PATH): termination}
    if literal.get("HF_HOME"):
        mounts[literal["HF_HOME"]] = model_cache
    command = list(container.get("command") or [])
    if command and Path(command[0]).name.startswith("python"):
        command[0] = sys.executable
    env = {k: v for k, v in base_env.items() if not k.startswith(("HF_", "HUGGING_FACE"))}
    env |= {name: _mapped(value, mounts) for name, value in literal.items()}
    env |= {"HF_HOME": str(model_cache), "HF_HUB_OFFLINE": "1"}
    argv = [_mapped(arg, mounts) for arg in [*command, *(container.get("args") or [])]]
    return LocalRun(argv, env, termination)


def termination_message(written: str, output: str, exit_code: int) -> str:
    """What a kubelet reports: the termination log, or on failure with an empty log the tail of the output."""
    if written.strip():
        return written.encode()[:MESSAGE_BYTES].decode(errors="ignore")
    if exit_code == 0:
        return ""
    tail = "\n".join(output.splitlines()[-LOG_TAIL_LINES:])
    return tail.encode()[-LOG_TAIL_BYTES:].decode(errors="ignore")


def terminated_status(pod: Mapping[str, Any], exit_code: int, message: str, started: str, finished: str) -> dict:
    """The status a kubelet writes when the pod's one container has exited (restartPolicy Never)."""
    (container,) = pod["spec"]["containers"]
    conditions = [
        c
        for c in (pod.get("status") or {}).get("conditions") or []
        if c.get("type") not in ("Ready", "ContainersReady")
    ]
    conditions += [
        {"type": kind, "status": "False", "reason": "PodCompleted", "lastTransitionTime": finished}
        for kind in ("Ready", "ContainersReady")
    ]
    terminated: dict[str, Any] = {
        "exitCode": exit_code,
        "reason": "Completed" if exit_code == 0 else "Error",
        "startedAt": started,
        "finishedAt": finished,
    }
    if message:
        terminated["message"] = message
    return {
        "status": {
            "phase": "Succeeded" if exit_code == 0 else "Failed",
            "conditions": conditions,
            "containerStatuses": [
                {
                    "name": container["name"],
                    "image": container["image"],
                    "imageID": "",
                    "ready": False,
                    "started": False,
                    "restartCount": 0,
                    "state": {"terminated": terminated},
                }
            ],
        }
    }


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PreflightKubelet:
    """Runs each preflight pod once, when kwok has it Running on a fake node, and reports how it exited.

    `model_cache` stands in for the pods' model cache volume. Without one, the kubelet uses a directory of its
    own and writes there a stand-in tokenizer (the same for every model) for each hub model a preflight names:
    every pair then passes the vocabulary check, as the scenario's models are not on this machine.
    """

    def __init__(self, api_client: kubernetes.client.ApiClient, model_cache: Path | None = None) -> None:
        self.core = kubernetes.client.CoreV1Api(api_client)
        self._workdir = Path(tempfile.mkdtemp(prefix="specfleet-sim-kubelet-"))
        self.stand_ins = model_cache is None
        self.model_cache = model_cache or self._workdir / "model-cache"
        self._started: set[str] = set()
        self._lock = threading.Lock()

    def stop(self) -> None:
        shutil.rmtree(self._workdir, ignore_errors=True)

    # the PodSink interface, for a KubePodSource of preflight pods alone (`specfleet sim --engine vllm-cpu`)

    def upsert_pod(self, pod: dict[str, Any], node_labels: dict[str, str]) -> None:
        self.takes(pod, node_labels)

    def remove_pod(self, namespace: str, name: str) -> None:
        """Nothing to forget: a pod is run once, by its uid."""

    def replace_pods(self, namespace: str | None, pods: list[tuple[dict[str, Any], dict[str, str]]]) -> None:
        for pod, node_labels in pods:
            self.takes(pod, node_labels)

    def takes(self, pod: Mapping[str, Any], node_labels: Mapping[str, str]) -> bool:
        """Whether the pod is a preflight pod (then it is this kubelet's, not an engine's); runs it once when due."""
        meta = pod.get("metadata") or {}
        if LABEL_PREFLIGHT not in (meta.get("labels") or {}):
            return False
        running = (pod.get("status") or {}).get("phase") == "Running" and not meta.get("deletionTimestamp")
        fake_node = all(node_labels.get(k) == v for k, v in FAKE_NODE_LABELS.items())
        with self._lock:
            due = running and fake_node and meta.get("uid") not in self._started
            if due:
                self._started.add(meta["uid"])
        if due:
            threading.Thread(
                target=self._run, args=(dict(pod),), name=f"sim-kubelet-{meta['name']}", daemon=True
            ).start()
        return True

    def _stand_ins(self, argv: list[str]) -> None:
        """A stand-in tokenizer for each hub model of the command that the kubelet's own cache lacks."""
        from specfleet.preflight.__main__ import parser

        args, _ = parser().parse_known_args(argv[3:])
        with self._lock:
            for model, revision in ((args.target, args.target_revision), (args.drafter, args.drafter_revision)):
                if not Path(model).is_absolute() and not has_snapshot(self.model_cache, model, revision):
                    write_tokenizer(hub_snapshot(self.model_cache, model, revision))
                    log.info("preflight: no %s in the model cache: wrote a stand-in tokenizer", model)

    def _run(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        where = f"{meta['namespace']}/{meta['name']}"
        run = local_run(pod, self.model_cache, self._workdir, os.environ)
        started, clock = _now(), time.monotonic()
        try:
            if self.stand_ins:
                self._stand_ins(run.argv)
            done = subprocess.run(
                run.argv, env=run.env, capture_output=True, text=True, timeout=TIMEOUT_SECONDS, check=False
            )
            exit_code, output = done.returncode, done.stdout + done.stderr
        except (OSError, subprocess.TimeoutExpired, SystemExit) as error:
            exit_code, output = 1, f"the simulator could not run the container: {error}"
        written = run.termination_log.read_text() if run.termination_log.is_file() else ""
        run.termination_log.unlink(missing_ok=True)
        message = termination_message(written, output, exit_code)
        body = terminated_status(pod, exit_code, message, started, _now())
        try:
            self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], body)
        except (ApiException, urllib3.exceptions.HTTPError) as error:
            log.warning("preflight pod %s: cannot report its exit: %s", where, error)
            return
        seconds = time.monotonic() - clock
        log.info("preflight pod %s exited %d in %.1fs: %s", where, exit_code, seconds, message[:300] or output[-300:])
