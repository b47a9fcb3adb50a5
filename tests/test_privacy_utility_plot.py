"""benchmarks/privacy_utility.py's figure: DP-FedCT (record-level or, with the worst-case s*,
client-level under replacement; against the server) and
DP-FedAvg (client-level, not against the server) share one ε axis, and the figure says so."""

from __future__ import annotations

import json

from conftest import load_benchmark


def _record(seed: int) -> dict:
    runs = [{"method": m, "epsilon": e, "accuracy": 0.5 + 0.01 * seed}
            for m in ("DP-FedCT (empirical s*)", "DP-FedCT (worst s* = 2|U|)", "DP-FedAvg")
            for e in (1.0, 10.0)]
    runs += [{"method": "FedCT", "epsilon": None, "accuracy": 0.7 + seed / 100},
             {"method": "FedAvg", "epsilon": None, "accuracy": 0.8}]
    return {"config": {"rounds": 8, "delta": 1e-5, "unlabeled": 2000, "seed": seed},
            "federation": {"n_clients": 5}, "runs": runs}


def test_the_panels_say_each_guarantee_and_name_the_dataset(tmp_path, monkeypatch):
    """The legend named the methods only, the ε axis said nothing of the guarantees, the
    panels named no dataset, and one shared legend showed panel A's no-DP accuracies as
    every panel's."""
    import matplotlib.pyplot as plt

    pu = load_benchmark("privacy_utility")
    panels = {}
    for name, seeds in (("A", (0, 1)), ("B", (2,))):
        files = []
        for s in seeds:
            path = tmp_path / f"{name}{s}.json"
            path.write_text(json.dumps(_record(s)))
            files.append(path)
        panels[name] = files
    figures = []
    monkeypatch.setattr(plt.Figure, "savefig", lambda fig, *a, **k: figures.append(fig))
    pu.plot_panels(panels, tmp_path / "f.png")
    (fig,) = figures
    curves = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert any("DP-FedAvg" in c and "client-level" in c and "not against the server" in c
               for c in curves)
    # s* = 2|U| covers any two datasets of a client: its whole dataset, not one record (the
    # legend said record-level, the run's own statement client-level under replacement)
    assert any("DP-FedCT (worst" in c and "client-level under replacement" in c
               and "against the server" in c for c in curves)
    assert any("conditional on the measured s*" in c for c in curves)
    for ax in fig.axes:
        assert "Fashion-MNIST" in ax.get_title() and "not comparable" in ax.get_xlabel()
    refs = [[t.get_text() for t in ax.get_legend().get_texts()] for ax in fig.axes]
    assert "FedCT (no DP) 0.705" in refs[0] and "FedCT (no DP) 0.720" in refs[1]
    assert "bars: min–max" in fig.axes[0].get_ylabel()
    plt.close(fig)
