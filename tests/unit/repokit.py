"""Where the repository's files are, for unit tests at any depth under tests/unit."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root."""
EXAMPLES = ROOT / "examples"
"""The example SpeculativeDeployments."""
BENCHMARKS = ROOT / "benchmarks"
"""The benchmarks, whose short versions some unit tests run (put on sys.path by those tests)."""
