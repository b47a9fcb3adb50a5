"""benchmarks/audit_table1.py --variant: parsing a row spec, and the errors of a bad one."""

from __future__ import annotations

from types import ModuleType

import pytest

from conftest import load_benchmark
from fedlabels.core.errors import FedLabelsError
from fedlabels.methods import get_method

SPEC = "e8=dp-fedct:mechanism=dpsgd,site_model=private,epsilon=8"


@pytest.fixture(scope="module")
def t1() -> ModuleType:
    """The benchmark script, imported as a module (benchmarks/ is not a package)."""
    return load_benchmark("audit_table1")


def test_variant_parses_to_typed_options(t1: ModuleType) -> None:
    row = t1.parse_variant(f" {SPEC} ")
    assert (row.tag, row.method, row.variant) == ("e8", "dp-fedct", True)
    assert row.options == {"mechanism": "dpsgd", "site_model": "private", "epsilon": 8}
    assert row.label == "dp-fedct (mechanism=dpsgd, site_model=private, epsilon=8)"
    # the options are what the method itself accepts
    parsed = get_method("dp-fedct").parse_options(row.options)
    assert (parsed.mechanism, parsed.site_model, parsed.epsilon) == ("dpsgd", "private", 8.0)


def test_plain_rows_keep_their_names_and_options(t1: ModuleType) -> None:
    rows = t1.rows_to_run("fedct, dp-fedct", [])
    assert [(r.tag, r.variant) for r in rows] == [("fedct", False), ("dp-fedct", False)]
    assert rows[0].label == "fedct"
    assert rows[1].options == t1.METHOD_OPTIONS["dp-fedct"]
    assert rows[1].label == "dp-fedct (epsilon_per_round=1.0)"


def test_methods_default_all_unless_variants(t1: ModuleType) -> None:
    every = t1.rows_to_run(None, [])
    assert {r.tag for r in every} == set(t1.auditable_methods()) & set(t1.METHODS)
    only = t1.rows_to_run(None, [SPEC])
    assert [r.tag for r in only] == ["e8"]
    both = t1.rows_to_run("fedct", [SPEC])
    assert [r.tag for r in both] == ["fedct", "e8"]


@pytest.mark.parametrize("spec, says", [
    ("dp-fedct:epsilon=8", "use TAG=METHOD"),
    ("e=", "use TAG=METHOD"),
    ("fedct=fedct", "not a method's name"),
    ("a/b=fedct", "letters, digits"),
    ("e=no-such-method", "unknown method 'no-such-method'"),
    ("e=dp-fedct:mechanism", "is not key=value"),
    ("e=dp-fedct:epsilon=1,epsilon=2", "given twice"),
])
def test_bad_spec_is_one_clear_error(t1: ModuleType, spec: str, says: str) -> None:
    with pytest.raises(FedLabelsError, match=says):
        t1.parse_variant(spec)


@pytest.mark.parametrize("options", [
    {"mechanism": "dpsgd", "site_modl": "private", "epsilon": 8},  # unknown option
    {"mechanism": "xor", "site_model": "private", "epsilon": 8},  # inapplicable option
    {"mechanism": "dpsgd"},  # no budget
])
def test_method_validation_error_is_the_methods_own(t1: ModuleType,
                                                    options: dict[str, object]) -> None:
    with pytest.raises(FedLabelsError) as own:
        get_method("dp-fedct").parse_options(options)
    spec = "e=dp-fedct:" + ",".join(f"{k}={v}" for k, v in options.items())
    with pytest.raises(FedLabelsError) as got:
        t1.parse_variant(spec)
    assert str(got.value) == str(own.value)


def test_duplicate_tags_rejected(t1: ModuleType) -> None:
    with pytest.raises(FedLabelsError, match="e8"):
        t1.rows_to_run(None, [SPEC, SPEC])
