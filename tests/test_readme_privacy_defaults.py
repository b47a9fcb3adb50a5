"""The README's paragraph on differential privacy states each DP method's default guarantee
as the code declares it: the unit it protects and whether it holds against the server."""

from __future__ import annotations

from pathlib import Path

from fedlabels.methods import get_method
from fedlabels.privacy.sensitivity import sensitivity_guarantee, worst_case_sensitivity

README = Path(__file__).resolve().parents[1] / "README.md"


def _dp_paragraph() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("**Differential privacy.**")
    return " ".join(text[start:text.index("\n\n", start)].split())


def test_the_readme_says_dp_fedavgs_default_does_not_hold_against_the_server() -> None:
    """The paragraph said how DP-FedAvg adds noise but not that, by default (central DP),
    the server sees every clipped update: a reader took the guarantee to cover it."""
    threat = get_method("dp-fedavg").threat_model
    assert "not the server" in threat.against  # the oracle: what the method declares
    paragraph = _dp_paragraph()
    assert "not against the server" in paragraph.lower()
    unit = threat.neighbouring.split(":")[0]
    assert f"its {unit} guarantee" in paragraph


def test_the_readme_says_what_dp_fedcts_default_sensitivity_protects() -> None:
    """`--sensitivity worst` (the default) protects a client's whole dataset, formally;
    the paragraph named the sensitivities without saying which unit each protects."""
    opts = get_method("dp-fedct").parse_options({"epsilon": 8.0})
    assert opts.sensitivity == "worst"
    stated = sensitivity_guarantee(worst_case_sensitivity(10))
    paragraph = _dp_paragraph()
    assert f"the default `worst` is {stated['guarantee']}" in paragraph
    unit = stated["neighbouring"].split(":")[0]  # client-level under replacement
    assert "client-level" in unit and "client-level" in paragraph
    assert "under replacement" in unit and "under replacement" in paragraph
