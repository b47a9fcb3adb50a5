"""A numpydoc ``Parameters`` section names exactly the parameters its function takes: no
name that is not a parameter (renamed or removed), and none left out (added later). Read
from the source with ``ast`` (no module imported), over every module of the package; a
class's section is checked against its ``__init__``, or a dataclass's fields."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import fedlabels

SRC = Path(fedlabels.__file__).resolve().parent
_NAME = r"\*{0,2}[A-Za-z_]\w*"
#: an entry's first line: ``name : type`` or ``a, b : type``; a list of names may run on
#: to the next line after a trailing comma
_ENTRY = re.compile(rf"^({_NAME}(?:\s*,\s*{_NAME})*)\s*(?::.*|,)?$")


def documented(doc: str) -> list[str] | None:
    """The names the ``Parameters`` section lists, in order; None without one."""
    lines = doc.splitlines()
    try:
        start = next(i for i, line in enumerate(lines[:-1]) if line.strip() == "Parameters"
                     and set(lines[i + 1].strip()) == {"-"})
    except StopIteration:
        return None
    names: list[str] = []
    continued = False
    for i in range(start + 2, len(lines)):
        line = lines[i]
        if i + 1 < len(lines) and line.strip() and set(lines[i + 1].strip()) == {"-"}:
            break  # the next section (Returns, Raises, ...)
        if not line.strip() or line.startswith((" ", "\t")):
            continued = False
            continue
        entry = _ENTRY.match(line.strip())
        if entry is None:
            if continued:
                continue
            break  # prose after the section
        names += [n.strip().lstrip("*") for n in entry.group(1).split(",") if n.strip()]
        continued = line.rstrip().endswith(",")
    return names


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = node.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    return [a.arg for a in every if a.arg not in ("self", "cls")]


def _starred(node: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    return {a.arg for a in (node.args.vararg, node.args.kwarg) if a is not None}


def _class_parameters(node: ast.ClassDef) -> tuple[list[str], set[str]] | None:
    init = next((b for b in node.body if isinstance(b, ast.FunctionDef)
                 and b.name == "__init__"), None)
    if init is not None:
        return _parameters(init), _starred(init)
    if any("dataclass" in ast.unparse(d) for d in node.decorator_list):
        return [b.target.id for b in node.body if isinstance(b, ast.AnnAssign)
                and isinstance(b.target, ast.Name)
                and "ClassVar" not in ast.unparse(b.annotation)], set()
    return None


def sections() -> Iterator[tuple[str, list[str], list[str], set[str]]]:
    """(where, documented names, parameters, ``*args``/``**kwargs`` names) of every
    function and class of the package whose docstring has a ``Parameters`` section."""
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            doc = ast.get_docstring(node)
            names = documented(doc) if doc else None
            if names is None:
                continue
            where = f"{path.relative_to(SRC.parent)}:{node.lineno} {node.name}"
            if isinstance(node, ast.ClassDef):
                found = _class_parameters(node)
                if found is None:
                    continue
                yield where, names, *found
            else:
                yield where, names, _parameters(node), _starred(node)


SECTIONS = list(sections())


@pytest.mark.parametrize("where, names, params, starred", SECTIONS,
                         ids=[s[0] for s in SECTIONS])
def test_a_parameters_section_names_the_parameters(where: str, names: list[str],
                                                   params: list[str],
                                                   starred: set[str]) -> None:
    absent = [n for n in names if n not in params and n not in starred]
    assert not absent, f"{where}: its docstring names {absent}, which it does not take"
    missing = [p for p in params if p not in names]
    assert not missing, f"{where}: its docstring's Parameters leave out {missing}"


def test_the_reader_sees_the_sections() -> None:
    # the estimators' and make_federation's sections are read, each with its names
    read = {where.split(" ")[-1]: names for where, names, _, _ in SECTIONS}
    assert {"make_federation", "TorchMLPClassifier", "TransformerClassifier"} <= set(read)
    assert read["make_federation"][:3] == ["X", "y", "clients"]
    doc = "Do it.\n\nParameters\n----------\na, b : int\n    Two.\nc,\nd :\n    More.\n" \
          "\nReturns\n-------\nx : int\n"
    assert documented(doc) == ["a", "b", "c", "d"]
    assert documented("Do it.\n\nParameters\n----------\na : int\n\nProse after it.\n") \
        == ["a"]
