"""The chart reads ConfigMaps (output equivalence's prompts) only when a value turns it on, narrowed to names."""

import subprocess
from pathlib import Path
from typing import Any

import yaml

from repokit import KUBE, ROOT


def config_map_rules(helm: Path, *args: str) -> list[dict[str, Any]]:
    command = [str(helm), "template", "sf", str(ROOT / "charts" / "specfleet"), "--namespace", "ops", *KUBE, *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    roles = [d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] in ("ClusterRole", "Role")]
    return [r for role in roles for r in role["rules"] if "configmaps" in r["resources"]]


def test_config_maps_only_when_output_equivalence_prompts_are_on_and_narrowed_to_names(helm: Path) -> None:
    assert config_map_rules(helm) == []
    assert config_map_rules(helm, "--set", "outputEquivalencePrompts.enabled=true") == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}
    ]
    narrowed = (
        "--set",
        "outputEquivalencePrompts.enabled=true",
        "--set",
        "outputEquivalencePrompts.configMapNames={p}",
    )
    assert config_map_rules(helm, *narrowed, "--set", "watchNamespaces={a}") == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["p"]}
    ]
