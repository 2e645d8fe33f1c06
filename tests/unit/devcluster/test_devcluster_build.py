"""Throwaway-module rendering, version ldflags and how binaries are found (env var, cache, PATH)."""

from pathlib import Path

import pytest

from specfleet_workshop.devcluster.binaries import (
    COMPONENTS,
    PEERS,
    RELEASE_TOOLS,
    TOOLS,
    BinaryError,
    find_binary,
    parse_version,
)
from specfleet_workshop.devcluster.build import (
    BuildGroup,
    build_groups,
    kubernetes_ldflags,
    module_replaces,
    render_go_mod,
    staging_replaces,
)
from specfleet_workshop.devcluster.versions import KUBERNETES_VERSION

KUBERNETES_GO_MOD = """module k8s.io/kubernetes

go 1.26.0

require (
\tgithub.com/blang/semver/v4 v4.0.0
\tk8s.io/api v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
)
"""


def test_staging_replaces_point_at_the_published_v0_twins() -> None:
    assert staging_replaces(KUBERNETES_GO_MOD, "v1.37.2") == [
        ("k8s.io/api", "k8s.io/api v0.37.2"),
        ("k8s.io/client-go", "k8s.io/client-go v0.37.2"),
    ]


ARGO_GO_MOD = """module github.com/argoproj/argo-rollouts

go 1.26.1

replace github.com/single/line => github.com/single/line v1.2.3

replace (
	github.com/go-telegram-bot-api/telegram-bot-api/v5 => github.com/OvyFlash/telegram-bot-api/v5 v5.0.0-2024
	k8s.io/api => k8s.io/api v0.34.5
	github.com/local/fork => ../fork
	github.com/pinned/old v1.0.0 => github.com/pinned/old v1.0.1
)
"""


def test_a_module_s_own_replaces_are_repeated_except_local_paths() -> None:
    """Argo Rollouts pins its dependencies by replace; a module that requires it must repeat them."""
    assert module_replaces(ARGO_GO_MOD) == [
        ("github.com/single/line", "github.com/single/line v1.2.3"),
        ("github.com/go-telegram-bot-api/telegram-bot-api/v5", "github.com/OvyFlash/telegram-bot-api/v5 v5.0.0-2024"),
        ("k8s.io/api", "k8s.io/api v0.34.5"),
        ("github.com/pinned/old v1.0.0", "github.com/pinned/old v1.0.1"),
    ]


def test_the_peers_are_built_only_on_request_with_their_crds() -> None:
    groups = build_groups("now")
    assert groups["argo-rollouts"].copy_replaces and groups["flagger"].extra_files == ("artifacts/flagger/crd.yaml",)
    assert "manifests/crds/rollout-crd.yaml" in groups["argo-rollouts"].extra_files
    assert set(PEERS).isdisjoint(TOOLS) and set(PEERS) | set(TOOLS) | set(RELEASE_TOOLS) == set(COMPONENTS)


def test_the_registry_is_built_beside_the_cluster_not_for_it_with_its_version_linked_in() -> None:
    group = build_groups("now")["distribution"]
    assert group.packages == {"registry": "github.com/distribution/distribution/v3/cmd/registry"}
    assert group.ldflags == (f"-X github.com/distribution/distribution/v3/version.version={group.version}",)
    assert "registry" not in TOOLS and COMPONENTS["registry"].version == group.version


def test_go_mod_requires_the_pinned_module_and_lists_replaces() -> None:
    group = BuildGroup("kubernetes", "k8s.io/kubernetes", "v1.37.2", {"kubectl": "k8s.io/kubernetes/cmd/kubectl"})
    text = render_go_mod(group, [("k8s.io/api", "k8s.io/api v0.37.2")], "1.26.0")
    assert "require k8s.io/kubernetes v1.37.2\n" in text
    assert "\tk8s.io/api => k8s.io/api v0.37.2\n" in text
    assert "go 1.26.0\n" in text


def test_go_mod_without_replaces_has_no_replace_block() -> None:
    assert "replace" not in render_go_mod(build_groups("now")["helm"], [], "1.26.0")


def test_kubernetes_ldflags_set_the_real_version_for_kubectl_version() -> None:
    flags = kubernetes_ldflags("v1.37.2", "2026-11-29T00:00:00Z")
    assert "-X k8s.io/component-base/version.gitVersion=v1.37.2" in flags
    assert "-X k8s.io/component-base/version.gitMinor=37" in flags
    assert "-X k8s.io/client-go/pkg/version.gitMajor=1" in flags


def test_the_four_kubernetes_binaries_share_one_build() -> None:
    groups = build_groups("now")
    assert set(groups["kubernetes"].packages) == {
        "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl",
    }  # fmt: skip
    assert groups["kubernetes"].replace_staging
    assert {component.build_group for component in COMPONENTS.values()} == set(groups)


@pytest.mark.parametrize(
    ("output", "pattern", "expected"),
    [
        ("etcd Version: 3.6.16\nGit SHA: abc\n", r"etcd Version: (\S+)", "v3.6.16"),
        ("Kubernetes v1.37.2\n", r"Kubernetes (v\S+)", "v1.37.2"),
        ("Client Version: v1.32.0\nKustomize Version: v5\n", r"Client Version: (\S+)", "v1.32.0"),
        ("registry github.com/distribution/distribution/v3 v3.1.2\n", COMPONENTS["registry"].version_pattern, "v3.1.2"),
        ("nothing here", r"Kubernetes (v\S+)", None),
    ],
)
def test_parse_version(output: str, pattern: str, expected: str | None) -> None:
    assert parse_version(output, pattern) == expected


def _fake_binary(directory: Path, name: str, prints: str) -> Path:
    path = directory / name
    path.write_text(f"#!/bin/sh\necho '{prints}'\n")
    path.chmod(0o755)
    return path


def test_env_var_binary_with_the_pinned_version_wins(tmp_path: Path) -> None:
    binary = _fake_binary(tmp_path, "kube-apiserver", f"Kubernetes {KUBERNETES_VERSION}")
    component = COMPONENTS["kube-apiserver"]
    assert find_binary(component, tmp_path / "cache", {"SPECFLEET_KUBE_APISERVER": str(binary), "PATH": ""}) == binary


def test_env_var_binary_with_another_version_is_an_error(tmp_path: Path) -> None:
    binary = _fake_binary(tmp_path, "kube-apiserver", "Kubernetes v1.30.0")
    with pytest.raises(BinaryError, match=r"v1\.30\.0"):
        find_binary(COMPONENTS["kube-apiserver"], tmp_path, {"SPECFLEET_KUBE_APISERVER": str(binary)})


def test_path_binary_is_used_only_when_its_version_matches(tmp_path: Path) -> None:
    component = COMPONENTS["kubectl"]
    old = tmp_path / "old"
    old.mkdir()
    _fake_binary(old, "kubectl", "Client Version: v1.32.0")
    assert find_binary(component, tmp_path / "cache", {"PATH": str(old)}) is None
    good = tmp_path / "good"
    good.mkdir()
    binary = _fake_binary(good, "kubectl", f"Client Version: {KUBERNETES_VERSION}")
    assert find_binary(component, tmp_path / "cache", {"PATH": str(good)}) == binary


def test_cached_build_is_found_by_version_keyed_path(tmp_path: Path) -> None:
    component = COMPONENTS["etcd"]
    cached = component.cached_path(tmp_path)
    assert cached == tmp_path / "bin" / f"etcd-{component.version}" / "etcd"
    cached.parent.mkdir(parents=True)
    _fake_binary(cached.parent, "etcd", "anything")
    assert find_binary(component, tmp_path, {"PATH": ""}) == cached
