"""What every registered method promises, checked on a small real run of each with the public
contract check (:func:`fedlabels.testing.check_method`), one test per method, option case
and check:

* ``declarations``: a threat model, capabilities and options all declared;
* ``options``: options survive a JSON round trip; unknown ones are rejected, naming the
  valid ones;
* ``determinism``: two simulator runs with the same seed give the same records;
* ``payloads``: every value a client sends in a protocol or evaluation reply is one of its
  threat model's payloads;
* ``state``: a client role's ``state_dict()`` restored into a freshly built role gives the
  same state and the same reply to the next message;
* ``flower``: the Flower engine (real ServerApp loop and ClientApp over the loopback grid,
  state only in ``context.state``) gives the simulator's per-round accuracies and bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fedlabels.api import load_federation
from fedlabels.core.errors import FedLabelsError
from fedlabels.method import Method
from fedlabels.methods import METHODS
from fedlabels.runs.config import RunConfig
from fedlabels.testing import check_method

#: two rounds reach every message kind of every method (test_deviating_server.py fails on a
#: kind first sent later) and a round that follows one; the modules that run these cases
#: (here, deviating server, site state, workers) share them, so their calibrations too
DATASET, CLIENTS, ROUNDS, PERIOD, SEED = "breast_cancer", 3, 2, 2, 1
MLP = "mlp(hidden=8)"
#: methods that exchange soft labels (class probabilities): they need a torch model
SOFT_LABELS = {"dd", "fedmd", "ds-fl"}
XCLP_SMALL = {"lsh_bits": 32, "knn": 3, "labeled_fraction": 0.3, "key_bits": 512,
              "insecure_small_keys": True}  # functional test: short Paillier keys
#: the options each method needs to run (a list: one case per entry); others run with none
OPTIONS: dict[str, list[dict[str, Any]]] = {
    "dp-fedct": [{"epsilon": 1.0, "mechanism": "xor"},
                 {"epsilon": 8.0, "mechanism": "subsample-aggregate", "teachers": 3,
                  "label_queries": 40, "data_dependent": True},
                 {"epsilon": 8.0, "mechanism": "dpsgd", "example_rate": 0.1},
                 {"epsilon": 8.0, "mechanism": "dpsgd", "example_rate": 0.1,
                  "site_model": "private"},
                 {"epsilon": 8.0, "mechanism": "dpsgd", "example_rate": 0.1,
                  "site_model": "private", "pseudo_filter": "agree", "own_confidence": 0.3,
                  "pseudo_warmup": 1, "finetune_steps": 3},
                 {"noise_multiplier": 1.5, "mechanism": "dpsgd", "example_rate": 0.1}],
    "dp-fedavg": [{"epsilon": 8.0}, {"epsilon": 8.0, "level": "record"},
                  {"noise_multiplier": 1.5, "level": "record"},
                  {"epsilon": 8.0, "noise": "discrete", "aggregation": "secure"}],
    "dp-pate": [{"epsilon": 2.0}, {"epsilon": 8.0, "aggregation": "secure"}],
    "fredy": [{"epsilon": 1.0, "queries": 40}],
    "xclp": [{**XCLP_SMALL, "test_points": 20, "secure": "ot"},
             {**XCLP_SMALL, "test_points": 20, "secure": "paillier"}],
    # the secure protocols are the xclp cases' (the same client code); plaintext here
    "fedavg-xclp": [{**XCLP_SMALL, "warmup_rounds": 1, "secure": "none"}],
}
#: methods the Flower engine refuses, with (a pattern of) the reason it gives
FLOWER_REFUSED = {"feddf": "Flower ServerApp holds no copy of U"}
#: the checks run per option case (declarations and options: per method)
RUN_CHECKS = ("determinism", "payloads", "state", "flower")


@dataclass(frozen=True)
class Case:
    method: str
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def impl(self) -> Method:
        return METHODS[self.method]

    @property
    def model(self) -> str:
        dpsgd = self.options.get("mechanism") == "dpsgd"  # DP-SGD needs a torch MLP
        return MLP if self.impl.capabilities.requires_weights or self.method in SOFT_LABELS \
            or dpsgd else "dt"

    def config(self) -> RunConfig:
        return RunConfig(method=self.method, dataset=DATASET, clients=CLIENTS,
                         model=self.model, rounds=ROUNDS, period=PERIOD, seed=SEED,
                         options=dict(self.options))

    def check(self, *checks: str) -> list[str]:
        return check_method(self.impl, options=self.options, model=self.model,
                            dataset=DATASET, clients=CLIENTS, rounds=ROUNDS, period=PERIOD,
                            seed=SEED, checks=checks)


def _which(options: dict[str, Any]) -> str:
    return (f"secure={options['secure']}" if "secure" in options
            else f"mechanism={options.get('mechanism', 'default')}"
            + (f",site_model={options['site_model']}" if "site_model" in options else "")
            + (",pseudo_filter" if "pseudo_filter" in options else ""))


def _apart(variants: list[dict[str, Any]]) -> list[str]:
    """Each variant by the options that tell it from the others (``default``: it sets
    none of them), e.g. ``noise=discrete,aggregation=secure``."""
    keys = [k for k in dict.fromkeys(k for v in variants for k in v)
            if len({repr(v.get(k)) for v in variants}) > 1]
    return [",".join(f"{k}={v[k]}" for k in keys if k in v) or "default" for v in variants]


def _cases() -> list[Any]:
    out = []
    for name in sorted(METHODS):
        variants = OPTIONS.get(name, [{}])
        which = [_which(options) for options in variants]
        if len(set(which)) < len(which):  # the usual options do not tell them apart
            which = _apart(variants)
        for options, label in zip(variants, which, strict=True):
            out.append(pytest.param(Case(name, options),
                                    id=name if len(variants) == 1 else f"{name}[{label}]"))
    return out


CASES = _cases()


def test_every_case_has_its_own_readable_id() -> None:
    """(pytest suffixes 0, 1, 2 to ids that repeat: three dp-fedavg cases were once all
    ``dp-fedavg[mechanism=default]``.)"""
    ids = [p.id for p in CASES]
    assert len(set(ids)) == len(ids)
FIRST_CASES = [pytest.param(Case(name, OPTIONS.get(name, [{}])[0]), id=name)
               for name in sorted(METHODS)]


@pytest.mark.parametrize("case", FIRST_CASES)
@pytest.mark.parametrize("check", ["declarations", "options"])
def test_method_declarations_and_options(case: Case, check: str) -> None:
    assert case.check(check) == [check]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("check", ["determinism", "payloads", "state"])
def test_method_keeps_the_contract_in_the_simulator(case: Case, check: str) -> None:
    assert case.check(check) == [check]


@pytest.mark.parametrize("case", CASES)
def test_flower_loopback_equals_simulator(case: Case, tmp_path: Path) -> None:
    pytest.importorskip("flwr")
    federation = load_federation(DATASET, clients=CLIENTS, seed=SEED)
    roles = len(case.impl.client_datasets(federation.clients))
    if roles != federation.n_clients:
        pytest.skip(f"{case.method}'s client roles are not the sites ({federation.n_clients} "
                    f"sites -> {roles} role(s)): it cannot be deployed")
    if case.method in FLOWER_REFUSED:  # refused with its reason when it is prepared
        from fedlabels.engines.flower.loopback import loopback_deployment

        with pytest.raises(FedLabelsError, match=FLOWER_REFUSED[case.method]):
            loopback_deployment(case.config(), tmp_path / "sites", reply_timeout=60.0)
        assert not (tmp_path / "sites").exists()  # before any file was written
        return
    assert case.check("flower") == ["flower"]
