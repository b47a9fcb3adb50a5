"""benchmarks/fedct_ablation.py: a variant's options are read as ``--opt KEY=VALUE`` reads
them (a text value such as ``ties=abstain`` was a raw JSONDecodeError)."""

from __future__ import annotations

import pytest

from conftest import load_benchmark
from fedlabels.core.errors import FedLabelsError

SCRIPT = "fedct_ablation"


def test_variant_values_are_read_like_opt() -> None:
    parse = load_benchmark(SCRIPT).parse_variant
    assert parse("fedct[ties=abstain;pseudo_weight=0.5;quorum=none]") == \
        ("fedct", {"ties": "abstain", "pseudo_weight": 0.5, "quorum": None})
    assert parse("fedct[balanced=true;pseudo_warmup=25]") == \
        ("fedct", {"balanced": True, "pseudo_warmup": 25})
    assert parse("fedavg") == ("fedavg", {})


@pytest.mark.parametrize("text", ["fedct[ties]", "fedct[=1]", "fedmd[quorum=0.8]"])
def test_bad_variants_are_one_line_errors(text: str) -> None:
    with pytest.raises(FedLabelsError, match="variant"):
        load_benchmark(SCRIPT).parse_variant(text)
