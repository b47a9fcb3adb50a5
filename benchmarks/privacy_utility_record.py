"""Record-level privacy-utility curves: DP-FedCT's mechanisms vs record-level DP-FedAvg.

For each total record-level (ε, δ) in ``--epsilons`` and each seed, on ``--dataset``
(fashion_mnist, m = 5, 2,000 private records per client by default):

* DP-FedCT with every mechanism in ``--mechanisms`` (``xor``: bitwise randomized response at
  the worst-case sensitivity 2|U| — the only formal s*; ``dpsgd``: DP-SGD at the clients; any
  other registered mechanism, e.g. ``subsample-aggregate``, with ``epsilon`` and ``delta``
  only), σ / the per-round ε calibrated from the total over the run;
* record-level DP-FedAvg (``dp-fedavg --opt level=record``: DP-SGD at the clients, the same
  accountant as ``dpsgd``), unless ``--no-fedavg``;
* non-private FedCT and local-only training as reference lines (``--references``);
* the canary audit's empirical ε lower bound (one-run estimator, ``--canaries`` held-out
  canaries in client 0, one more run each) for the DP rows at ``--audit-epsilons``.

Rows are appended to ``--out`` (JSON, written atomically after every row); a row already in
it is not re-run unless ``--overwrite`` (resumable). The figure (``--figure``) and a Markdown
table (``--out`` with ``.md``) are re-rendered from the JSON.

The docs' run (2 shared cores, scaled down; see docs/privacy.md §record-level)::

    nice -n 10 .venv/bin/python benchmarks/privacy_utility_record.py --seeds 0 \\
        --model "mlp(hidden=128)" --rounds 5 --period 20 --unlabeled 1000 --example-rate 0.25
    # the issue's scale: --seeds 0,1,2 --rounds 20 --period 50 --unlabeled 2000
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
from fedlabels.core.errors import FedLabelsError
from fedlabels.core.files import atomic_path
from fedlabels.learners import parse_model_spec
from fedlabels.method.options import parse_flag_value
from fedlabels.methods.fedct.dp_fedct_options import MECHANISMS

EPSILONS = (1.0, 2.0, 4.0, 8.0, 16.0)


def mechanism_specs(text: str) -> list[tuple[str, dict[str, Any]]]:
    """``xor,dpsgd[site_model=private;quorum=0.8]`` -> [(mechanism, extra options), ...]."""
    out = []
    for item in (m.strip() for m in text.split(",") if m.strip()):
        name, _, rest = item.partition("[")
        extra: dict[str, Any] = {}
        for pair in (p for p in rest.rstrip("]").split(";") if p):
            key, sep, value = pair.partition("=")
            if not sep:
                raise SystemExit(f"bad mechanism option {pair!r} in {item!r}: expected k=v")
            extra[key.strip()] = parse_flag_value(value.strip())  # typed as --opt types it
        if name not in MECHANISMS:
            raise SystemExit(f"unknown mechanism {name!r}; registered: {MECHANISMS}")
        out.append((name, extra))
    return out


FINETUNED = " + local fine-tune"  # appended to the DP-FedAvg row's label


def fedavg_label(args: argparse.Namespace) -> str:
    """DP-FedAvg's rows: named with their model where it is not the others' (--fedavg-model)."""
    return ("DP-FedAvg (record)" if not args.fedavg_model
            else f"DP-FedAvg (record, {args.fedavg_model})")


def row_model(method: str, args: argparse.Namespace) -> str:
    """The model spec a row trains: --fedavg-model for DP-FedAvg where given, else --model."""
    return args.fedavg_model if method == "dp-fedavg" and args.fedavg_model else args.model


def row_specs(args: argparse.Namespace) -> list[tuple[str, str, float | None, dict[str, Any]]]:
    """(label, method, ε, options) of every row, the reference first."""
    dpsgd = {"example_rate": args.example_rate, "example_clip": args.example_clip}
    names = {"fedct": "FedCT", "local": "local only", "fedavg": "FedAvg"}
    rows: list[tuple[str, str, float | None, dict[str, Any]]] = [
        (names.get(m, m), m, None, {}) for m in args.references.split(",") if m]
    for eps in (float(e) for e in args.epsilons.split(",") if e):
        base = {"epsilon": eps, "delta": args.delta}
        for mech, extra in mechanism_specs(args.mechanisms):
            label = f"DP-FedCT {mech}" + (
                f" ({', '.join(f'{k}={v}' for k, v in extra.items())})" if extra else "")
            rows.append((label, "dp-fedct", eps, {
                **base, "mechanism": mech, **(dpsgd if mech == "dpsgd" else {}), **extra}))
        if not args.no_fedavg:
            rows.append((fedavg_label(args), "dp-fedavg", eps,
                         {**base, "level": "record", **dpsgd}))
    return rows


def finetuned_accuracy(result: Any, fed: Any, steps: int) -> float:
    """Mean test accuracy after each client trains a copy of the final global model on its
    own private data for ``steps`` plain (non-private) steps: the model a DP-FedAvg site
    would keep for itself (never sent), the fair peer of DP-FedCT's ``site_model=private``."""
    import copy

    accs = []
    for model, client in zip(result.client_models, fed.clients, strict=True):
        mine = copy.deepcopy(model)
        mine.train_steps(client.X, client.y, steps)
        accs.append(float(np.mean(np.asarray(mine.predict(fed.X_test)) == fed.y_test)))
    return float(np.mean(accs))


def run_row(fed: Any, label: str, method: str, eps: float | None, options: dict[str, Any],
            seed: int, args: argparse.Namespace, audit: bool) -> dict[str, Any]:
    t = time.perf_counter()
    common = {"rounds": args.rounds, "period": args.period, "seed": seed}
    row: dict[str, Any] = {"label": label, "method": method, "epsilon": eps, "seed": seed,
                           "options": options}
    try:
        res = fl.run(method, fed, model=row_model(method, args), eval_every=args.rounds,
                     progress=False,
                     options=options, **common)
    except FedLabelsError as exc:  # e.g. dpsgd with a tree learner: say so in the table
        return {**row, "error": str(exc)}
    p = res.extra.get("privacy", {})
    if method == "dp-fedavg" and args.finetune_steps:
        row["accuracy_finetuned"] = finetuned_accuracy(res, fed, args.finetune_steps)
    row.update({"accuracy": res.final["mean_accuracy"], "accuracy_std": res.final["std_accuracy"],
                "epsilon_accounted": p.get("epsilon"), "accountant": p.get("accountant"),
                "noise_multiplier": p.get("noise_multiplier"),
                "flip_probability": p.get("flip_probability"),
                "guarantee": p.get("guarantee"), "neighbouring": p.get("neighbouring"),
                "consensus_accuracy": (res.rounds[-1].server or {}).get("consensus_accuracy"),
                "seconds": time.perf_counter() - t})
    if audit and eps is not None:
        from fedlabels.audit.canaries import epsilon_lower_bound_audit

        t = time.perf_counter()
        found = epsilon_lower_bound_audit(method, fed, parse_model_spec(row_model(method, args)),
                                          n_canaries=args.canaries, options=options,
                                          eval_every=args.rounds, **common)
        row.update({"epsilon_lower_bound": found["epsilon_lower_bound"],
                    "audit_correct": found["correct"], "audit_guesses": found["guesses"],
                    "audit_canaries": found["n_canaries"],
                    "audit_seconds": time.perf_counter() - t})
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="fashion_mnist")
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--private-per-client", type=int, default=2000,
                        help="0: the dataset's default split")
    parser.add_argument("--unlabeled", type=int, default=2000, help="0: the dataset's default")
    parser.add_argument("--model", default="mlp(hidden=128)")
    parser.add_argument("--fedavg-model", default=None,
                        help="DP-FedAvg's model spec (default: --model), e.g. "
                             "'mlp(hidden=128,lr=0.01)': DP-FedAvg tuned as DP-FedCT's "
                             "labeller is with --mechanisms 'dpsgd[labeller_lr=0.01]'")
    parser.add_argument("--partition", default="iid")
    parser.add_argument("--public-pca", type=int, default=0,
                        help="project features on U's top-K principal components (0: none)")
    parser.add_argument("--finetune-steps", type=int, default=0,
                        help="also report DP-FedAvg's global model fine-tuned on each "
                        "client's private data for this many plain steps (0: not)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--period", type=int, default=50)
    parser.add_argument("--epsilons", default=",".join(f"{e:g}" for e in EPSILONS))
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--mechanisms", default="xor,dpsgd")
    parser.add_argument("--no-fedavg", action="store_true")
    parser.add_argument("--references", default="fedct,local",
                        help="non-private reference methods (lines in the plot)")
    parser.add_argument("--example-rate", type=float, default=0.25,
                        help="DP-SGD's Poisson rate q (large batches: better signal-to-noise)")
    parser.add_argument("--example-clip", type=float, default=1.0)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--audit-epsilons", default="8", help="'' for no canary audit")
    parser.add_argument("--canaries", type=int, default=100)
    parser.add_argument("--out", default=None, help="default benchmarks/results/"
                        "privacy_record_<dataset>.json")
    parser.add_argument("--figure", default=None, help="default docs/privacy_record_<dataset>.png")
    parser.add_argument("--overwrite", action="store_true", help="re-run rows already in --out")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out or f"benchmarks/results/privacy_record_{args.dataset}.json")
    figure = Path(args.figure or f"docs/privacy_record_{args.dataset}.png")
    record: dict[str, Any] = {"config": {}, "rows": []}
    if out.exists():
        record = json.loads(out.read_text())
    audit_eps = {float(e) for e in args.audit_epsilons.split(",") if e}
    run_keys = ("dataset", "clients", "private_per_client", "unlabeled", "model", "rounds",
                "period", "delta")
    base_config = {k: getattr(args, k) for k in run_keys}
    if args.partition != "iid" or args.public_pca:  # rows of earlier runs have neither key
        base_config.update(partition=args.partition, public_pca=args.public_pca)
    for seed in (int(s) for s in args.seeds.split(",") if s):
        fed = fl.load_federation(args.dataset, clients=args.clients, seed=seed,
                                 unlabeled=args.unlabeled or None,
                                 private_per_client=args.private_per_client or None,
                                 partition=args.partition, public_pca=args.public_pca or None)
        for label, method, eps, options in row_specs(args):
            key = {"label": label, "epsilon": eps, "seed": seed}
            audit = eps in audit_eps
            # what the row's result depends on (a row of another configuration is kept apart)
            config = {**base_config, **{k: v for k, v in options.items()
                                        if k in ("example_rate", "example_clip")},
                      **({"canaries": args.canaries} if audit else {}),
                      **({"finetune_steps": args.finetune_steps}
                         if method == "dp-fedavg" and args.finetune_steps else {}),
                      **({"fedavg_model": args.fedavg_model}
                         if method == "dp-fedavg" and args.fedavg_model else {})}
            done = [r for r in record["rows"] if all(r.get(k) == v for k, v in key.items())
                    and r.get("config") == config]
            if done and not args.overwrite:
                continue
            record["rows"] = [r for r in record["rows"] if r not in done]
            row = run_row(fed, label, method, eps, options, seed, args, audit=audit)
            row["config"] = config
            record["rows"].append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "config"}), flush=True)
            with atomic_path(out) as tmp:
                tmp.write_text(json.dumps(record, indent=1, default=str))
    rows = [r for r in record["rows"] if all(r.get("config", {}).get(k) == v
                                             for k, v in base_config.items())
            and r["label"] in {spec[0] for spec in row_specs(args)}
            and r.get("config", {}).get("example_rate", args.example_rate) == args.example_rate]
    with atomic_path(out.with_suffix(".md")) as tmp:
        tmp.write_text(table(rows))
    plot(rows, figure, args)
    print(table(rows))


def _mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of the 95 % t-interval over seeds, t(0.975, n-1) · s / √n
    (0 with one seed). The normal 1.96 · s / √n it used covers about 81 % with 3 seeds."""
    from fedlabels.core.intervals import t_half_width

    a = np.asarray(values, dtype=float)
    return float(a.mean()), t_half_width(a) if len(a) > 1 else 0.0


def with_finetuned(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` plus one row per DP-FedAvg row that has a fine-tuned accuracy (no audit: the
    fine-tuned models never leave their sites)."""
    extra = [{**{k: v for k, v in r.items() if k not in ("epsilon_lower_bound",)},
              "label": r["label"] + FINETUNED, "accuracy": r["accuracy_finetuned"]}
             for r in rows if "accuracy_finetuned" in r]
    return rows + extra


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: accuracy (± 95 % t-interval over seeds) per method and ε; claimed ε /
    audit bound."""
    rows = with_finetuned(rows)
    labels = list(dict.fromkeys(r["label"] for r in rows))
    eps = sorted({r["epsilon"] for r in rows if r["epsilon"] is not None})
    lines = ["| method | " + " | ".join(f"ε = {e:g}" for e in eps) + " |",
             "|---|" + "---|" * len(eps)]
    for label in labels:
        mine = [r for r in rows if r["label"] == label]
        if all(r["epsilon"] is None for r in mine):
            continue
        cells = []
        for e in eps:
            here = [r for r in mine if r["epsilon"] == e]
            if not here:
                cells.append("–")
            elif "error" in here[0]:
                cells.append("not supported")
            else:
                m, h = _mean_ci([r["accuracy"] for r in here])
                cell = f"{m:.3f}" + (f" ± {h:.3f}" if len(here) > 1 else "")
                lb = [r["epsilon_lower_bound"] for r in here if "epsilon_lower_bound" in r]
                claimed = max(r["epsilon_accounted"] for r in here)
                cell += f" (ε̂ {claimed:.2f}" + (f", audit ≥ {max(lb):.2f})" if lb else ")")
                cells.append(cell)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    refs = [r for r in rows if r["epsilon"] is None and "accuracy" in r]
    for label in dict.fromkeys(r["label"] for r in refs):
        m, h = _mean_ci([r["accuracy"] for r in refs if r["label"] == label])
        n = sum(r["label"] == label for r in refs)
        lines.append(f"\nnon-private {label}: {m:.3f}" + (f" ± {h:.3f}" if n > 1 else "")
                     + f" ({n} seed(s))")
    errors = {r["label"]: r["error"] for r in rows if "error" in r}
    lines += [f"\n{k}: {v}" for k, v in errors.items()]
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], path: Path, args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = with_finetuned(rows)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, label in enumerate(dict.fromkeys(r["label"] for r in rows)):
        mine = [r for r in rows if r["label"] == label and "accuracy" in r]
        if not mine:
            continue
        if mine[0]["epsilon"] is None:
            ax.axhline(_mean_ci([r["accuracy"] for r in mine])[0], ls=":", color=f"C{i}",
                       label=f"{label} (non-private)")
            continue
        eps = sorted({r["epsilon"] for r in mine})
        stats = [_mean_ci([r["accuracy"] for r in mine if r["epsilon"] == e]) for e in eps]
        ax.errorbar(eps, [s[0] for s in stats], yerr=[s[1] for s in stats], fmt="o-",
                    color=f"C{i}", label=label, capsize=3)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(f"record-level ε (total over the run, δ = {args.delta:g})")
    ax.set_ylabel("mean client test accuracy\n(bars: 95 % t-interval over seeds)")
    seeds = sorted({r["seed"] for r in rows})
    pca = f", PCA-{args.public_pca} of U" if args.public_pca else ""
    ax.set_title(f"{args.dataset} ({args.partition}{pca}), m = {args.clients}, {args.model}, "
                 f"R = {args.rounds}, b = {args.period}, seeds {seeds}", fontsize=8)
    # below the axes: inside, "best" still covered curves where they cross
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, bbox_inches="tight")
    plt.close(fig)


if __name__ == "__main__":
    main()
