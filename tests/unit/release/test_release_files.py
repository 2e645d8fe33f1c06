"""The chart files a release stages: both images pinned by digest in the default values, the version in
Chart.yaml, every comment kept; and what the release reads from helm's and buildah's output."""

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from specfleet_workshop.devcluster.registry import registry_config
from specfleet_workshop.devcluster.release import (
    CHART,
    Pushed,
    ReleaseError,
    chart_push_digest,
    check_version,
    pin_chart_version,
    pin_values,
)
from specfleet_workshop.devcluster.versions import KUBERNETES_VERSION

OPERATOR = Pushed("127.0.0.1:5000/specfleet/specfleet-operator", "0.3.0", "sha256:" + "a" * 64)
VLLM = Pushed("127.0.0.1:5000/specfleet/vllm-rocm", "v0.32.0", "sha256:" + "b" * 64)


def test_the_values_pin_both_images_by_digest_and_keep_every_other_line() -> None:
    text = (CHART / "values.yaml").read_text()
    pinned = pin_values(text, OPERATOR, VLLM, "0.32.0")
    values, before = yaml.safe_load(pinned), yaml.safe_load(text)
    assert values["image"] == {**before["image"], "repository": OPERATOR.repository, "tag": "0.3.0",
                               "digest": OPERATOR.digest}  # fmt: skip
    assert values["servingImage"] == {"repository": VLLM.repository, "vllmVersion": "0.32.0", "digest": VLLM.digest}
    assert {k: v for k, v in values.items() if k not in ("image", "servingImage")} == {
        k: v for k, v in before.items() if k not in ("image", "servingImage")
    }
    changed = [(a, b) for a, b in zip(text.splitlines(), pinned.splitlines(), strict=True) if a != b]
    assert len(changed) == 6, changed  # the six pinned lines, no comment lost


def test_the_staged_chart_renders_the_operator_by_digest(helm: Path, tmp_path: Path) -> None:
    staged = tmp_path / "specfleet"
    shutil.copytree(CHART, staged)
    (staged / "values.yaml").write_text(pin_values((CHART / "values.yaml").read_text(), OPERATOR, VLLM, "0.32.0"))
    (staged / "Chart.yaml").write_text(pin_chart_version((CHART / "Chart.yaml").read_text(), "0.3.0"))
    rendered = subprocess.run([str(helm), "template", "sf", str(staged), "--kube-version", KUBERNETES_VERSION],
                              capture_output=True, text=True, check=True).stdout  # fmt: skip
    (deployment,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == OPERATOR.by_digest


def test_a_values_file_without_the_block_is_refused_by_name() -> None:
    with pytest.raises(ReleaseError, match="no top-level `servingImage:`"):
        pin_values("image:\n  repository: x\n  tag: ''\n  digest: ''\n", OPERATOR, VLLM, "0.32.0")


def test_chart_yaml_gets_the_release_version_as_version_and_app_version() -> None:
    text = (CHART / "Chart.yaml").read_text()
    chart = yaml.safe_load(pin_chart_version(text, "0.3.0-rc.1"))
    assert (chart["version"], chart["appVersion"]) == ("0.3.0-rc.1", "0.3.0-rc.1")
    assert chart["annotations"] == yaml.safe_load(text)["annotations"]


@pytest.mark.parametrize("version", ["v0.3.0", "0.3", "latest", "0.3.0 ", ""])
def test_a_version_helm_would_refuse_is_refused_first(version: str) -> None:
    with pytest.raises(ReleaseError, match="SemVer"):
        check_version(version)


def test_the_chart_digest_is_read_from_helm_push() -> None:
    output = "Pushed: 127.0.0.1:5000/charts/specfleet:0.3.0\nDigest: sha256:" + "c" * 64 + "\n"
    assert chart_push_digest(output) == "sha256:" + "c" * 64
    with pytest.raises(ReleaseError, match="no digest"):
        chart_push_digest("Pushed: somewhere\n")


def test_the_registry_listens_on_loopback_only_over_tls(tmp_path: Path) -> None:
    config = registry_config(5000, tmp_path / "storage", tmp_path / "registry.crt", tmp_path / "registry.key")
    assert config["http"]["addr"] == "127.0.0.1:5000"
    assert config["http"]["tls"] == {
        "certificate": str(tmp_path / "registry.crt"),
        "key": str(tmp_path / "registry.key"),
    }
    assert config["storage"]["filesystem"] == {"rootdirectory": str(tmp_path / "storage")}
