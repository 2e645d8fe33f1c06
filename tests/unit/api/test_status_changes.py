"""A status change names a field the status has, or it fails: never a key that vanishes from the write."""

import subprocess
import sys
import typing
from datetime import UTC, datetime
from pathlib import Path

import pytest

from specfleet.api.base import UnknownFieldError
from specfleet.api.status import Phase, SpeculativeDeploymentStatus, StatusChanges
from specfleet.rollout.lifecycle import FRESH_EVIDENCE, step_anew


def _plain(annotation: object) -> object:
    """The type a field holds, without pydantic's constraints (`Annotated[str, Field(...)]` is `str`)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _plain(typing.get_args(annotation)[0])
    if origin is None:
        return annotation
    args = tuple(_plain(a) for a in typing.get_args(annotation))
    return typing.Union[args] if origin in (typing.Union, type(int | None)) else origin[args]  # type: ignore[index]  # noqa: UP007


def test_status_changes_name_every_status_field_with_its_type() -> None:
    fields = {name: _plain(f.annotation) for name, f in SpeculativeDeploymentStatus.model_fields.items()}
    changes = {name: _plain(t) for name, t in typing.get_type_hints(StatusChanges).items()}
    assert changes == fields


def test_a_misspelt_status_field_raises_naming_it() -> None:
    with pytest.raises(UnknownFieldError, match="SpeculativeDeploymentStatus has no field canary_revison"):
        SpeculativeDeploymentStatus().model_copy(update={"canary_revison": "abc"})


def test_a_known_status_field_is_changed() -> None:
    status = SpeculativeDeploymentStatus().model_copy(update={"phase": Phase.HEALTHY, **step_anew(datetime.now(UTC))})
    assert status.phase is Phase.HEALTHY
    assert status.step_started_at is not None


def test_fresh_evidence_is_made_of_status_fields() -> None:
    assert set(FRESH_EVIDENCE) <= set(SpeculativeDeploymentStatus.model_fields)
    assert SpeculativeDeploymentStatus().model_copy(update=FRESH_EVIDENCE).analyses == 0


def test_mypy_rejects_a_misspelt_field_in_a_typed_status_change(tmp_path: Path) -> None:
    module = tmp_path / "misspelt.py"
    module.write_text(
        "from specfleet.rollout.state import Pass\n\n\n"
        "def f(p: Pass) -> Pass:\n"
        "    return p.with_status(canary_revison='abc')\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent", str(module)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert 'Unexpected keyword argument "canary_revison"' in result.stdout
