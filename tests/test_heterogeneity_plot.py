"""benchmarks/heterogeneity.py's figures: what ran in a readable title, the bars named, the
legend off the data."""

from __future__ import annotations

import argparse

import pandas as pd

from conftest import load_benchmark


def test_heterogeneity_plots_say_what_ran_and_keep_the_legend_off_the_data(tmp_path,
                                                                            monkeypatch):
    """The title was 7-point text ending 'seeds [0, 1]', the error bars were unexplained and
    the legend sat inside the axes ('best'), over curves where they bunch."""
    import matplotlib.pyplot as plt

    het = load_benchmark("heterogeneity")
    table = pd.DataFrame({"label": ["fedct", "fedct", "fedavg", "fedavg"],
                          "clients": [5, 10, 5, 10], "acc_mean": [0.7, 0.72, 0.8, 0.81],
                          "acc_std_over_seeds": [0.01, 0.02, 0.01, 0.01]})
    args = argparse.Namespace(model="mlp(hidden=8)", rounds=2, period=3, seeds=[0, 1])
    figures = []
    close = plt.close
    monkeypatch.setattr(plt.Figure, "savefig", lambda fig, *a, **k: figures.append(fig))
    monkeypatch.setattr(plt, "close", lambda fig=None: None)
    het.plot({"mscale": table}, tmp_path, args)
    (fig,) = figures
    ax = fig.axes[0]
    fig.canvas.draw()
    assert ax.title.get_fontsize() >= 9 and "seeds 0, 1" in ax.get_title()
    assert "R = 2" in ax.get_title() and "against the number of clients" in ax.get_title()
    assert "± std over seeds" in ax.get_ylabel()
    assert not ax.get_legend().get_window_extent().overlaps(ax.get_window_extent())
    close("all")
