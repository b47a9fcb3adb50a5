"""The privacy package shares its helpers under public names: no module of
``src/fedlabels/privacy`` imports another module's private (underscored) name, so the
dependency check, one step's PLD and GNMax's setting have one public home each that every
caller uses (read with :mod:`ast`, module-level and function-level imports alike)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PRIVACY = Path(__file__).resolve().parents[1] / "src" / "fedlabels" / "privacy"


def _private_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.level or (
                node.module or "").startswith("fedlabels")):
            found += [f"{node.module}.{a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")]
    return found


@pytest.mark.parametrize("path", sorted(PRIVACY.glob("*.py")), ids=lambda p: p.name)
def test_no_privacy_module_imports_a_private_name(path: Path) -> None:
    assert _private_imports(path) == []


def test_the_shared_helpers_are_public_and_the_callers_use_them() -> None:
    from fedlabels.privacy import (
        accounting,
        discrete_accounting,
        distributed_discrete,
        gaussian_calibration,
    )

    for module in (discrete_accounting, distributed_discrete, gaussian_calibration):
        assert module.require_dp_accounting is accounting.require_dp_accounting
    assert gaussian_calibration.pld_of_one_step is accounting.pld_of_one_step
