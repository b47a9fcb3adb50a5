"""``help()`` on the public API says what each function takes: every public name of
``fedlabels`` (and every public method and property of its classes), and every function
and class the docs import from the package's modules, has a docstring, and
a function's docstring names each of its parameters (the project's style: in the prose, as
``name``), a dataclass's docstring each of its fields (a run's settings, ``RunConfig``'s
fields, are documented where they are declared)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import fedlabels as fl


def _public() -> Iterator[tuple[str, Callable[..., Any]]]:
    for name in fl.__all__:
        obj = getattr(fl, name)
        yield name, obj
        if not inspect.isclass(obj):
            continue
        for attr, value in vars(obj).items():
            if attr.startswith("_"):
                continue
            if isinstance(value, property) and value.fget is not None:
                yield f"{name}.{attr}", value.fget
            elif isinstance(value, classmethod | staticmethod):
                yield f"{name}.{attr}", value.__func__
            elif inspect.isfunction(value):
                yield f"{name}.{attr}", value


def _imported_by_the_docs() -> Iterator[tuple[str, Callable[..., Any]]]:
    """Every function and class a docs page or the README imports from ``fedlabels``
    (``from fedlabels.learners.torch_mlp import TorchMLPClassifier``): the API a user is
    shown beside ``fl.``'s names."""
    root = Path(__file__).resolve().parents[1]
    imports = re.compile(r"^\s*from (fedlabels(?:\.\w+)*) import (?:\(([^)]*)\)|([^\n#]+))",
                         re.M)
    for page in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for match in imports.finditer(page.read_text(encoding="utf-8")):
            module = importlib.import_module(match.group(1))
            for entry in (match.group(2) or match.group(3)).split(","):
                name = entry.split()[0] if entry.split() else ""
                obj = getattr(module, name, None) if name else None
                if callable(obj) and not isinstance(obj, type(re)):
                    yield f"{match.group(1)}.{name}", obj


PUBLIC = dict(_public())
PUBLIC.update(_imported_by_the_docs())


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_public_name_has_a_docstring_naming_its_parameters(name: str) -> None:
    obj = PUBLIC[name]
    doc = inspect.getdoc(obj)
    assert doc and doc.strip(), f"{name} has no docstring"
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        return  # an exception's __init__ is its base's: a message
    if inspect.isclass(obj) and dataclasses.is_dataclass(obj):
        # the fields, not the generated __init__; a run's settings (RunConfig) are each
        # documented where they are declared (param's required help, docs/usage.md's table)
        if obj is not fl.RunConfig:
            fields = [f.name for f in dataclasses.fields(obj)]
            missing = [f for f in fields if not re.search(rf"\b{re.escape(f)}\b", doc)]
            assert not missing, f"{name}'s docstring does not say what {missing} are"
        return
    skip = {"self", "cls"}
    params = [p for p in inspect.signature(obj).parameters.values() if p.name not in skip
              and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    missing = [p.name for p in params if not re.search(rf"\b{re.escape(p.name)}\b", doc)]
    assert not missing, f"{name}'s docstring does not say what {missing} are"


def test_the_check_sees_what_it_checks() -> None:
    # the functions the docs show are among those checked, with their parameters
    assert {"run", "load_run", "plot", "report", "resume", "make_federation",
            "load_federation", "TorchModel", "RunResult.predict",
            "RunResult.save"} <= set(PUBLIC)
    assert "title" in inspect.signature(PUBLIC["plot"]).parameters
    # and the names the docs import from the package's modules
    assert {"fedlabels.testing.check_method", "fedlabels.learners.register_model",
            "fedlabels.learners.torch_regressor.TorchMLPRegressor",
            "fedlabels.method.options.option"} <= set(PUBLIC)
