"""The package ships its type hints to its users' checkers (PEP 561): without the
``py.typed`` marker mypy skipped ``fedlabels`` (``import-untyped``) and every API was Any."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path


def test_the_package_is_marked_typed_and_the_marker_is_installed() -> None:
    assert resources.files("fedlabels").joinpath("py.typed").is_file()
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    config = tomllib.loads(pyproject.read_text())
    assert "py.typed" in config["tool"]["setuptools"]["package-data"]["fedlabels"]
