"""Modules share their helpers under public names: no module of ``src/fedlabels`` imports
another module's private (underscored) name, nor reads one off a module it imported
(``images._cache_key``), so each shared helper has one public home that every caller uses
(read with :mod:`ast`, module-level and function-level imports alike)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "fedlabels"


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(node: ast.ImportFrom, path: Path) -> str:
    """The module an import reads from, a relative one resolved against ``path``."""
    if not node.level:
        return node.module or ""
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[:len(package) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def _is_module(name: str) -> bool:
    path = SRC.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_uses(path: Path) -> list[str]:
    """Each other module's private name ``path`` imports or reads off an imported module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found, modules = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _absolute(node, path)
            if not source.startswith("fedlabels"):
                continue
            found += [f"{source}.{a.name}" for a in node.names if _private(a.name)]
            modules |= {a.asname or a.name: f"{source}.{a.name}" for a in node.names
                        if _is_module(f"{source}.{a.name}")}
        elif isinstance(node, ast.Import):
            modules |= {a.asname: a.name for a in node.names
                        if a.asname and a.name.startswith("fedlabels")}
    found += [f"{modules[node.value.id]}.{node.attr}" for node in ast.walk(tree)
              if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id in modules and _private(node.attr)]
    return found


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_uses_another_modules_private_name(path: Path) -> None:
    assert _private_uses(path) == []


def test_the_check_sees_a_private_name_imported_or_read_off_a_module(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check itself: each way of reaching another module's private name is found."""
    pkg = tmp_path / "fedlabels" / "data"
    pkg.mkdir(parents=True)
    (pkg / "images.py").write_text("def _cache_key(): ...\n")
    user = pkg / "user.py"
    user.write_text("from fedlabels.data.images import _cache_key\n"
                    "from . import images\n"
                    "import fedlabels.data.images as im\n"
                    "def f():\n"
                    "    from .images import _cache_key as k\n"
                    "    return images._cache_key, im._cache_key, k\n")
    monkeypatch.setitem(globals(), "SRC", tmp_path)
    assert sorted(_private_uses(user)) == ["fedlabels.data.images._cache_key"] * 4


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
