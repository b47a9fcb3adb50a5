"""Privacy-utility curve: DP-FedCT vs DP-FedAvg test accuracy over ε on Fashion-MNIST (m = 5).

Reduced configuration (2 shared CPU cores): torch ``mlp(hidden=256-256)``, 2,000 private
examples per client, |U| = 2,000, R rounds of b local steps, evaluation after the last round.
Every ε is the **total** over the run at δ (per client):

* DP-FedCT (XOR mechanism): the per-round pure ε is calibrated with the exact accountant so
  that R releases give (ε, δ) (option ``epsilon``, the total), for two sensitivities: the
  empirical s*
  (measured once, below) and the worst case 2|U|;
* DP-FedAvg: σ calibrated from (ε, δ) over R rounds (q = 1: exact analytic Gaussian
  composition), client-level DP, clipping norm S.

The empirical s* is measured once, before the sweep, with the same code the protocol uses
(:func:`fedlabels.methods.fedct.sensitivity.empirical_sensitivity`): per client, a fresh learner
of the same spec trained ``--sens-steps`` steps on its private data only, against
``--neighbours`` neighbours (one record removed); s* = max over clients. It is passed to
DP-FedCT as a number (``sensitivity_note`` records where it came from).

Usage::

    nice -n 10 .venv/bin/python benchmarks/privacy_utility.py --seed 0 --out results/privacy
    # the docs' configurations:
    #   --model "mlp(hidden=128)" --rounds 8 --period 25 --neighbours 5 --sens-steps 200
    #   --epsilons 1,10,100,1000,10000 --private-per-client 2000 (or 200)

Writes ``sweep.json``, ``sweep.md`` and ``privacy_utility.png`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

import fedlabels as fl
from fedlabels.learners import build_learner, parse_model_spec
from fedlabels.methods.fedct.sensitivity import empirical_sensitivity

EPSILONS = (1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0)


def measure_sensitivity(fed: Any, spec: str, neighbours: int, steps: int, relation: str,
                        seed: int) -> dict[str, Any]:
    per_client = []
    for cid, client in enumerate(fed.clients):
        learner = build_learner(parse_model_spec(spec)[0], n_classes=fed.n_classes,
                                random_state=seed * 100 + cid)
        est = empirical_sensitivity(learner, client.X, client.y, fed.X_public, fed.n_classes,
                                    n_neighbours=neighbours, relation=relation,
                                    seed=seed * 100 + cid, steps=steps)
        per_client.append(est.details | {"bits": est.bits})
        print(f"  client {cid}: {relation} s* = {est.bits} bits, changed labels "
              f"{est.details['changed_labels']}", flush=True)
    return {"bits": max(p["bits"] for p in per_client), "relation": relation,
            "neighbours": neighbours, "steps": steps, "per_client": per_client}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="mlp(hidden=256-256)")
    parser.add_argument("--private-per-client", type=int, default=2000)
    parser.add_argument("--unlabeled", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--period", type=int, default=50)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--neighbours", type=int, default=10)
    parser.add_argument("--sens-steps", type=int, default=200)
    parser.add_argument("--sensitivity", type=int, default=None,
                        help="skip the measurement and use this empirical s* (bits)")
    parser.add_argument("--relations", default="remove",
                        help="neighbour relations to measure s* for (remove,replace)")
    parser.add_argument("--epsilons", default=",".join(str(e) for e in EPSILONS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="results/privacy")
    parser.add_argument("--replot", action="store_true",
                        help="only re-render sweep.md and the plot from --out/sweep.json")
    parser.add_argument("--panel", action="append", default=[], metavar="TITLE=A.json,B.json",
                        help="combine finished sweeps (one panel each, mean over seeds) into "
                             "--figure; baselines may come from a separate file")
    parser.add_argument("--figure", default="docs/privacy_utility.png")
    args = parser.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    if args.panel:
        panels = {}
        for item in args.panel:
            title, _, files = item.partition("=")
            panels[title] = [Path(f) for f in files.split(",")]
        print(plot_panels(panels, Path(args.figure)))
        return
    if args.replot:
        record = json.loads((out / "sweep.json").read_text())
        write_table(record, out / "sweep.md")
        plot(record, out / "privacy_utility.png")
        return
    out.mkdir(parents=True, exist_ok=True)
    epsilons = [float(e) for e in args.epsilons.split(",") if e]
    fed = fl.load_federation("fashion_mnist", clients=5, unlabeled=args.unlabeled,
                             private_per_client=args.private_per_client, seed=args.seed)
    common = {"model": args.model, "rounds": args.rounds, "period": args.period,
              "seed": args.seed, "eval_every": args.rounds, "progress": False}
    record: dict[str, Any] = {"config": vars(args), "federation": fed.summary(), "runs": []}

    t0 = time.perf_counter()
    if args.sensitivity is None:
        print("measuring the empirical sensitivity ...", flush=True)
        sens = {rel: measure_sensitivity(fed, args.model, args.neighbours, args.sens_steps,
                                         rel, args.seed) for rel in args.relations.split(",")}
        record["sensitivity"] = sens | {"worst": 2 * args.unlabeled,
                                        "seconds": time.perf_counter() - t0}
        s_emp = sens["remove"]["bits"]  # the paper's relation (one record removed)
    else:  # re-use an estimate measured before (stated in the record)
        s_emp = args.sensitivity
        record["sensitivity"] = {"remove": {"bits": s_emp, "note": "given (--sensitivity)"},
                                 "worst": 2 * args.unlabeled}

    def run(method: str, label: str, eps: float | None, options: dict[str, Any]) -> None:
        t = time.perf_counter()
        res = fl.run(method, fed, options=options, **common)
        privacy = res.extra.get("privacy", {})
        row = {"method": label, "epsilon": eps, "accuracy": res.final["mean_accuracy"],
               "accuracy_std": res.final["std_accuracy"],
               "epsilon_accounted": privacy.get("epsilon"),
               "accountant": privacy.get("accountant"),
               "epsilon_per_round": privacy.get("epsilon_per_round"),
               "flip_probability": privacy.get("flip_probability"),
               "noise_multiplier": privacy.get("noise_multiplier"),
               "consensus_accuracy": res.rounds[-1].server.get("consensus_accuracy"),
               "seconds": time.perf_counter() - t}
        record["runs"].append(row)
        print(json.dumps(row), flush=True)

    run("fedct", "FedCT", None, {})
    run("fedavg", "FedAvg", None, {})
    run("local", "local only", None, {})
    for eps in epsilons:
        # the run's total (ε, δ) budget; xor chosen explicitly (the default refuses a budget
        # at which its labels are noise, and these curves measure exactly that)
        base = {"epsilon": eps, "delta": args.delta, "mechanism": "xor"}
        run("dp-fedct", "DP-FedCT (empirical s*)", eps,
            base | {"sensitivity": s_emp,
                    "sensitivity_note": f"empirical: max over 5 clients x {args.neighbours} "
                                        f"neighbours (record removed), fresh {args.model} "
                                        f"trained {args.sens_steps} steps"})
        run("dp-fedct", "DP-FedCT (worst s* = 2|U|)", eps, base | {"sensitivity": "worst"})
        run("dp-fedavg", "DP-FedAvg", eps,
            {"epsilon": eps, "delta": args.delta, "clip": args.clip})
    record["seconds"] = time.perf_counter() - t0
    (out / "sweep.json").write_text(json.dumps(record, indent=2, default=str))
    write_table(record, out / "sweep.md")
    plot(record, out / "privacy_utility.png")
    print(f"done in {record['seconds']:.0f} s -> {out}")


def write_table(record: dict[str, Any], path: Path) -> None:
    runs = record["runs"]
    ref = {r["method"]: r["accuracy"] for r in runs if r["epsilon"] is None}
    labels = [m for m in dict.fromkeys(r["method"] for r in runs) if m not in ref]
    eps = sorted({r["epsilon"] for r in runs if r["epsilon"] is not None})
    lines = ["| method | " + " | ".join(f"ε = {e:g}" for e in eps) + " |",
             "|---|" + "---|" * len(eps)]
    for label in labels:
        cells = []
        for e in eps:
            r = next(x for x in runs if x["method"] == label and x["epsilon"] == e)
            if r["flip_probability"] is not None:
                extra = (f" (f = {r['flip_probability']:.3f}, consensus "
                         f"{r['consensus_accuracy']:.2f})")
            else:
                extra = f" (σ = {r['noise_multiplier']:.3g})"
            cells.append(f"{r['accuracy']:.3f}{extra}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    lines += ["non-private: " + ", ".join(f"{k} {v:.3f}" for k, v in ref.items())]
    path.write_text("\n".join(lines) + "\n")


# what each DP curve's ε protects and against whom (docs/privacy.md): the ε axis is shared,
# the guarantees are not, so the legend says so
GUARANTEES = {
    "DP-FedCT (empirical s*)": "record-level, against the server; conditional on the "
                               "measured s*",
    "DP-FedCT (worst s* = 2|U|)": "client-level under replacement (a client's whole "
                                  "dataset), against the server; formal",
    "DP-FedAvg": "client-level; not against the server; formal",
}
#: marker and line of each DP curve, the same in both figures
STYLES = {"DP-FedCT (empirical s*)": "o-", "DP-FedCT (worst s* = 2|U|)": "s--",
          "DP-FedAvg": "^-."}
AXIS_NOTE = "\n(the curves' guarantees differ, see legend: not comparable point for point)"


def _label(method: str) -> str:
    return f"{method}:\n  {GUARANTEES[method]}" if method in GUARANTEES else method


def plot(record: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = record["runs"]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for label, style in STYLES.items():
        pts = sorted((r["epsilon"], r["accuracy"]) for r in runs if r["method"] == label)
        if pts:
            ax.plot(*np.array(pts).T, style, label=_label(label))
    for r in runs:
        if r["epsilon"] is None:
            colour = {"FedCT": "C0", "FedAvg": "C2"}.get(r["method"], "C7")
            ax.axhline(r["accuracy"], ls=":", lw=1, color=colour,
                       label=f"{r['method']} (no DP) {r['accuracy']:.3f}")
    ax.axhline(0.1, color="grey", lw=0.8, ls="-", alpha=0.5, label="chance (10 classes)")
    ax.set_xscale("log")
    ax.set_xlabel(f"total ε over {record['config']['rounds']} rounds "
                  f"(δ = {record['config']['delta']:g}, per client){AXIS_NOTE}")
    ax.set_ylabel("mean client test accuracy")
    ax.set_title("Fashion-MNIST, m = 5, |U| = "
                 f"{record['config']['unlabeled']}, seed {record['config']['seed']}")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    fig.savefig(path, dpi=120, bbox_inches="tight")


def plot_panels(panels: dict[str, list[Path]], path: Path) -> str:
    """One panel per configuration, mean over seeds with min-max bars; returns a table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(6.0 * len(panels), 4.4), sharey=True)
    axes = np.atleast_1d(axes)
    rows = []
    for ax, (title, files) in zip(axes, panels.items(), strict=True):
        records = [json.loads(Path(f).read_text()) for f in files]
        runs, seen = [], set()
        for rec in records:  # a run (method, ε, seed) counts once even if in two files
            for r in rec["runs"]:
                key = (r["method"], r["epsilon"], rec["config"]["seed"])
                if key not in seen:
                    seen.add(key)
                    runs.append(r)
        records = [r for i, r in enumerate(records)
                   if r["config"]["seed"] not in {x["config"]["seed"] for x in records[:i]}]
        for label, style in STYLES.items():
            eps = sorted({r["epsilon"] for r in runs if r["method"] == label})
            acc = [[r["accuracy"] for r in runs if r["method"] == label and r["epsilon"] == e]
                   for e in eps]
            mean = np.array([np.mean(a) for a in acc])
            err = np.array([[m - min(a), max(a) - m] for m, a in zip(mean, acc, strict=True)]).T
            ax.errorbar(eps, mean, yerr=err, fmt=style, capsize=3, label=_label(label))
            rows.append((title, label, dict(zip(eps, mean, strict=True))))
        for method, colour in (("FedCT", "C0"), ("FedAvg", "C2"), ("local only", "C7")):
            acc = [r["accuracy"] for r in runs if r["method"] == method]
            if acc:
                ax.axhline(np.mean(acc), ls=":", lw=1.2, color=colour,
                           label=f"{method} (no DP) {np.mean(acc):.3f}")
                rows.append((title, method, {None: float(np.mean(acc))}))
        ax.axhline(0.1, color="grey", lw=0.8, alpha=0.5, label="chance")
        ax.set_xscale("log")
        cfg = records[0]["config"]
        ax.set_xlabel(f"total ε over {cfg['rounds']} rounds (δ = {cfg['delta']:g}, per client)"
                      f"{AXIS_NOTE}")
        seeds = ", ".join(str(rec["config"]["seed"]) for rec in records)
        ax.set_title(f"Fashion-MNIST, m = {records[0]['federation']['n_clients']}, "
                     f"|U| = {cfg['unlabeled']:,}"
                     f"\n{title} (seeds {seeds})", fontsize=10)
    axes[0].set_ylabel("mean client test accuracy\n(mean over seeds; bars: min–max)")
    for ax in axes:  # each panel its own no-DP references; the DP curves once, below
        handles, labels = ax.get_legend_handles_labels()
        refs = [i for i, lab in enumerate(labels) if "(no DP)" in lab]
        ax.legend([handles[i] for i in refs], [labels[i] for i in refs], fontsize=7,
                  loc="lower right", title="this panel's references", title_fontsize=7)
    handles, labels = axes[0].get_legend_handles_labels()
    curves = [i for i, lab in enumerate(labels) if "(no DP)" not in lab]
    fig.legend([handles[i] for i in curves], [labels[i] for i in curves], fontsize=7,
               loc="upper center", ncol=2, frameon=False, bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return "\n".join(f"{t} | {m} | " + ", ".join(
        f"{'-' if e is None else f'{e:g}'}: {v:.3f}" for e, v in d.items()) for t, m, d in rows)


if __name__ == "__main__":
    main()
