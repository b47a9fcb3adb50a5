"""Rewrite ``fedlabels`` imports and dotted module names after the package-layout move.

Usage: ``python scripts/layout_imports.py FILE...`` rewrites the files in place. It maps
``from OLD import name`` by name where a module was split, then every dotted old module
name (imports, ``monkeypatch`` targets, docstrings) to its new place. Run ``ruff check
--fix --select I`` afterwards to re-sort the imports it changed.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

#: old module -> new module
MODULES = {
    "fedlabels.errors": "fedlabels.core.errors",
    "fedlabels.randomness": "fedlabels.core.randomness",
    "fedlabels.threads": "fedlabels.core.threads",
    "fedlabels.outputs": "fedlabels.core.files",
    "fedlabels.provenance": "fedlabels.core.provenance",
    "fedlabels.metrics": "fedlabels.core.metrics",
    "fedlabels.data.cache": "fedlabels.downloads.cache",
    "fedlabels.data.fetch": "fedlabels.downloads.fetch",
    "fedlabels.data.minilm": "fedlabels.downloads.minilm",
    "fedlabels.reuse": "fedlabels.results.predict",
    "fedlabels.interpret": "fedlabels.reporting.inspect",
    "fedlabels.report": "fedlabels.reporting.report",
    "fedlabels.plots": "fedlabels.reporting.plots",
    "fedlabels.progress": "fedlabels.runs.progress",
    "fedlabels.config": "fedlabels.runs.config",
    "fedlabels.engines.runner": "fedlabels.runs.loop",
    "fedlabels.engines.checkpoint": "fedlabels.runs.checkpoint",
    "fedlabels.engines.participation": "fedlabels.runs.participation",
    "fedlabels.protocols.base": "fedlabels.method.base",
    "fedlabels.protocols.options": "fedlabels.method.options",
    "fedlabels.protocols.threat": "fedlabels.method.threat",
    "fedlabels.protocols.state": "fedlabels.method.state",
    "fedlabels.protocols.server_state": "fedlabels.method.server_state",
    "fedlabels.protocols.blocks": "fedlabels.method.blocks",
    "fedlabels.protocols.adversary": "fedlabels.method.adversary",
    "fedlabels.protocols.dpsgd_client": "fedlabels.method.dpsgd_client",
    "fedlabels.protocols.fedct": "fedlabels.methods.fedct.fedct",
    "fedlabels.protocols.fedct_regression": "fedlabels.methods.fedct.regression",
    "fedlabels.protocols.fedct_schedule": "fedlabels.methods.fedct.schedule",
    "fedlabels.protocols.dp_fedct": "fedlabels.methods.fedct.dp_fedct",
    "fedlabels.protocols.dp_fedct_options": "fedlabels.methods.fedct.dp_fedct_options",
    "fedlabels.protocols.dp_fedct_mechanisms": "fedlabels.methods.fedct.mechanisms",
    "fedlabels.protocols.fedavg": "fedlabels.methods.fedavg.fedavg",
    "fedlabels.protocols.dp_fedavg": "fedlabels.methods.fedavg.dp_fedavg",
    "fedlabels.protocols.dp_fedavg_record": "fedlabels.methods.fedavg.dp_fedavg_record",
    "fedlabels.protocols.dd": "fedlabels.methods.distillation.dd",
    "fedlabels.protocols.fedmd": "fedlabels.methods.distillation.fedmd",
    "fedlabels.protocols.dsfl": "fedlabels.methods.distillation.dsfl",
    "fedlabels.protocols.feddf": "fedlabels.methods.distillation.feddf",
    "fedlabels.protocols.teacher_student": "fedlabels.methods.teacher_student.roles",
    "fedlabels.protocols.pate": "fedlabels.methods.teacher_student.pate",
    "fedlabels.protocols.fredy": "fedlabels.methods.teacher_student.fredy",
    "fedlabels.protocols.local": "fedlabels.methods.local",
    "fedlabels.protocols.xclp": "fedlabels.methods.xclp",
    "fedlabels.protocols": "fedlabels.methods",
    "fedlabels.engines.flower.local": "fedlabels.deploy.launcher",
    "fedlabels.engines.flower.processes": "fedlabels.deploy.processes",
    "fedlabels.engines.flower.security": "fedlabels.deploy.tls",
    "fedlabels.engines.flower.fleet_proxy": "fedlabels.deploy.fleet_proxy",
    "fedlabels.engines.flower.site_exec": "fedlabels.deploy.site_exec",
    "fedlabels.privacy.auditing": "fedlabels.privacy.epsilon_lower_bound",
    "fedlabels.results": "fedlabels.results",
}
#: (old module, name) -> new module, where a module was split or a package re-export moved
NAMES = {
    **{("fedlabels.protocols", n): "fedlabels.method" for n in (
        "ClientRole", "Grid", "Method", "MethodContext", "ServerRole", "Settings",
        "MethodOptions", "option", "Payload", "ThreatModel")},
    **{("fedlabels.reuse", n): "fedlabels.data.preprocessing" for n in (
        "Preprocessing", "categorical_columns")},
    **{("fedlabels.interpret", n): "fedlabels.results.models_file" for n in (
        "FORMAT", "save_models", "load_models")},
    ("fedlabels.interpret", "models_path"): "fedlabels.core.files",
    **{("fedlabels.results", n): "fedlabels.core.files" for n in (
        "atomic_path", "write_atomic")},
    ("fedlabels.data.loading", "federation_for"): "fedlabels.runs.federation",
    ("fedlabels.data.federation", "LazyRows"): "fedlabels.data.lazy_rows",
    ("fedlabels.learners.specs", "ModelSpec"): "fedlabels.learners.model_spec",
    **{("fedlabels.privacy.sensitivity", n): "fedlabels.methods.fedct.sensitivity" for n in (
        "empirical_sensitivity", "FLOOR_BITS", "RELATIONS")},
    **{("fedlabels.engines", n): "fedlabels.runs.loop" for n in (
        "CommMeter", "RunPlan", "derive_seeds", "plan_run", "run_rounds")},
}
_PATTERN = re.compile(r"\b(" + "|".join(
    re.escape(m) for m in sorted(MODULES, key=len, reverse=True)) + r")(?![\w])")


def _split_imports(text: str) -> str:
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    edits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level or node.module is None:
            continue
        groups: dict[str, list[str]] = {}
        moved = False
        for alias in node.names:
            name = alias.name + (f" as {alias.asname}" if alias.asname else "")
            target = NAMES.get((node.module, alias.name))
            submodule = MODULES.get(f"{node.module}.{alias.name}")
            if submodule is not None and submodule != f"{node.module}.{alias.name}":
                target, leaf = submodule.rsplit(".", 1)  # from PACKAGE import SUBMODULE
                name = leaf + (f" as {alias.asname or alias.name}"
                               if alias.asname or leaf != alias.name else "")
            moved = moved or target is not None
            groups.setdefault(target or node.module, []).append(name)
        if not moved:
            continue
        indent = " " * node.col_offset
        new = "".join(f"{indent}from {mod} import {', '.join(names)}\n"
                      for mod, names in groups.items())
        edits.append((node.lineno, node.end_lineno or node.lineno, new))
    for start, end, new in sorted(edits, reverse=True):
        lines[start - 1:end] = [new]
    return "".join(lines)


def rewrite(text: str, python: bool) -> str:
    if python:
        text = _split_imports(text)
    return _PATTERN.sub(lambda m: MODULES[m.group(1)], text)


def main(paths: list[str]) -> None:
    for name in paths:
        path = Path(name)
        old = path.read_text()
        new = rewrite(old, path.suffix == ".py")
        if new != old:
            path.write_text(new)
            print("rewrote", path)


if __name__ == "__main__":
    main(sys.argv[1:])
