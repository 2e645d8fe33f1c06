"""PromQL evaluated by Prometheus' own engine: `promtool test rules` over series given in its notation.

promtool is Debian's (the prometheus package `.ci/install-system-deps` installs); a test that needs it fails
without it, never skips.
"""

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml


def promtool() -> str:
    found = shutil.which("promtool") or "/usr/bin/promtool"
    if not Path(found).exists():
        pytest.fail("promtool missing: run .ci/install-system-deps (Debian's prometheus package ships it)")
    return found


def evaluated(tmp_path: Path, series: dict[str, str], expr: str, at: str, expected: list[dict[str, Any]]) -> str:
    """promtool's unit test of `expr` at `at` over `series` scraped every 5 s: '' when it answers `expected`."""
    (tmp_path / "rules.yaml").write_text("groups: []\n")
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "5s",
        "tests": [
            {
                "interval": "5s",
                "input_series": [{"series": s, "values": v} for s, v in series.items()],
                "promql_expr_test": [{"expr": expr, "eval_time": at, "exp_samples": expected}],
            }
        ],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test))
    result = subprocess.run(
        [promtool(), "test", "rules", "test.yaml"], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    return "" if result.returncode == 0 else result.stdout + result.stderr
