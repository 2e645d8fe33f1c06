"""Where the repository's files are, for unit tests at any depth under tests/unit."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root."""
EXAMPLES = ROOT / "examples"
"""The example SpeculativeDeployments."""
