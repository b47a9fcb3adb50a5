"""benchmarks/fedct_beyond.py: the CNN setting and the --model / --unlabeled overrides
leave the existing settings (and the names their recorded results are keyed by) as they
were."""

from __future__ import annotations

import argparse
from pathlib import Path

from conftest import load_benchmark
from fedlabels.learners.specs import parse_model_spec

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "fedct_beyond.py"


def load_script():
    return load_benchmark("fedct_beyond")


def namespace(**given):
    args = {"setting": "fashion", "rounds": None, "private": None, "unlabeled": None,
            "model": None}
    return argparse.Namespace(**{**args, **given})


def test_existing_settings_keep_their_defaults_and_names():
    script = load_script()
    setting, name = script.configure(namespace())
    assert name == "fashion T=1000"
    assert setting == {"dataset": "fashion_mnist", "clients": 5, "unlabeled": 10_000,
                       "per_client": 2000, "rounds": 20, "period": 50,
                       "model": "mlp(hidden=512-512)"}
    assert script.configure(namespace(setting="tweets", private=3500))[1] == \
        "tweets T=500 private=3500"


def test_the_cnn_setting_and_the_overrides():
    script = load_script()
    setting, name = script.configure(namespace(setting="fashion_cnn"))
    assert name == "fashion_cnn T=1000" and setting["model"] == "cnn(arch=small)"
    assert {k: v for k, v in setting.items() if k != "model"} == \
        {k: v for k, v in script.SETTINGS["fashion"].items() if k != "model"}
    setting, name = script.configure(namespace(
        setting="fashion_cnn", rounds=4, unlabeled=2000, model="cnn(arch=small,augment=true)"))
    assert name == "fashion_cnn T=200 U=2000 model=cnn(arch=small,augment=true)"
    assert (setting["rounds"], setting["unlabeled"]) == (4, 2000)
    assert script.SETTINGS["fashion_cnn"]["unlabeled"] == 10_000  # not changed in place
    (cnn,) = parse_model_spec("cnn(arch=small,augment=true)")  # a spec the library accepts
    assert cnn.params["augment"] is True


def test_the_gap_to_fedavg_is_paired_by_seed():
    """A variant run on seed 0 only is compared with FedAvg's seed 0, not its mean."""
    script = load_script()
    rows = [{"setting": "s", "variant": v, "seed": seed, "acc": acc, "consensus_acc": None,
             "up": 1.0, "down": 1.0}
            for v, seed, acc in [("fedavg", 0, 0.80), ("fedavg", 1, 0.90), ("fedavg", 2, 0.85),
                                 ("fedct", 0, 0.78), ("fedct[x=1]", 1, 0.86),
                                 ("local", 3, 0.70)]]
    table = script.summarise(rows)
    gap = {line.split("|")[2].strip(): line.split("|")[6].strip()
           for line in table.splitlines()[2:]}
    assert gap == {"`fedavg`": "0.00", "`fedct`": "2.00", "`fedct[x=1]`": "4.00",
                   "`local`": "—"}
