"""The simulator's kubelet for preflight pods: the container as a local command (this Python, the model cache
and termination log mapped here, never a Secret), and the status a kubelet writes when it exits."""

import sys
import time
from pathlib import Path

from specfleet.api.resource import SpeculativeDeployment
from specfleet.preflight.job import preflight_job
from specfleet_workshop.fleetpods.kubelet import (
    LOG_TAIL_BYTES,
    PreflightKubelet,
    local_run,
    terminated_status,
    termination_message,
)

from bad_specs import BASE, merged

CACHE, WORK = Path("/local/cache"), Path("/local/work")


def pod(**spec: object) -> dict:
    sdep = SpeculativeDeployment.from_mapping(merged(BASE, {"spec": spec}))
    template = preflight_job(sdep, "r1", sdep.spec.serving())["spec"]["template"]
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "labels": template["metadata"]["labels"]},
        "spec": template["spec"],
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_the_container_runs_with_this_python_and_the_pods_paths_mapped_here() -> None:
    spec = {"model": {"name": "/cache/huggingface/models/target"}, "storage": {"hfTokenSecret": {"name": "hf"}}}
    run = local_run(pod(**spec), CACHE, WORK, {"PATH": "/bin", "HF_TOKEN": "mine", "HF_HOME": "/home/me/.hf"})
    assert run.argv[:3] == [sys.executable, "-m", "specfleet.preflight"]
    assert run.argv[run.argv.index("--target") + 1] == "/local/cache/models/target"
    assert run.argv[run.argv.index("--termination-log") + 1] == str(WORK / "u-1.termination-log")
    assert run.env["HF_HOME"] == str(CACHE) and run.env["HF_HUB_OFFLINE"] == "1" and run.env["PATH"] == "/bin"
    assert "HF_TOKEN" not in run.env, "neither this machine's token nor the pod's Secret"


def test_the_message_is_the_termination_log_or_on_failure_the_end_of_the_output() -> None:
    assert termination_message('{"passed": true}', "noise", 0) == '{"passed": true}'
    assert termination_message("", "noise", 0) == ""
    output = "\n".join(f"line {i}" for i in range(500))
    tail = termination_message("", output, 1)
    assert tail.endswith("line 499") and len(tail.encode()) <= LOG_TAIL_BYTES


def test_the_status_says_the_container_terminated_as_a_kubelet_writes_it() -> None:
    running = pod()
    failed = terminated_status(running, 1, "EOS differs", "t0", "t1")["status"]
    assert failed["phase"] == "Failed"
    (container,) = failed["containerStatuses"]
    assert container["state"]["terminated"] == {
        "exitCode": 1,
        "reason": "Error",
        "message": "EOS differs",
        "startedAt": "t0",
        "finishedAt": "t1",
    }
    assert {c["type"]: c["status"] for c in failed["conditions"]}["Ready"] == "False"
    assert terminated_status(running, 0, "", "t0", "t1")["status"]["phase"] == "Succeeded"


def test_only_running_preflight_pods_on_fake_nodes_are_run_and_each_once(tmp_path: Path) -> None:
    started: list[str] = []

    class Recording(PreflightKubelet):
        def _run(self, pod: dict) -> None:
            started.append(pod["metadata"]["uid"])

    kubelet = Recording(api_client=None, model_cache=tmp_path)  # type: ignore[arg-type]
    fake = {"type": "kwok"}
    pending = {**pod(), "status": {"phase": "Pending"}}
    assert kubelet.takes(pending, fake) and started == []
    assert kubelet.takes(pod(), {"type": "real"}) and started == []
    assert kubelet.takes(pod(), fake) and kubelet.takes(pod(), fake)
    assert not kubelet.takes({"metadata": {"labels": {}}}, fake), "a serving pod is not the kubelet's"
    kubelet.stop()
    deadline = time.monotonic() + 5
    while not started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert started == ["u-1"]
