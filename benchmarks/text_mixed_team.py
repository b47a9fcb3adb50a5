"""Mixed teams on text (issue 18): one client with a transformer, the others with TF-IDF.

Client 0 runs ``--transformer`` (default ``minilm(mode=frozen)``), clients 1..m-1 run
``--classic`` (default ``tfidf``). For every |U| in ``--us`` and seed in ``--seeds`` it runs

- ``local``: every client alone on its private data (the same models, same rounds);
- ``fedct``: FedCT with the mixed team (clients share only hard labels on U);
- ``fedct-classic``: FedCT with every client on ``--classic`` (is the transformer needed?);
- ``centralized``: ``--classic`` on all private data pooled (a reference ceiling).

and writes every run (per-client test accuracy, the consensus accuracy on U, bytes uploaded
per client per communication round, wall time) to ``--out`` (default
``benchmarks/results/text_mixed_<dataset>.json``) with a summary per configuration (mean and
std over seeds of the transformer client's and the classic clients' accuracy). A run already
in ``--out`` (same configuration and seed) is skipped, so an interrupted sweep resumes.

The paper's text setting is m = 10, |U| = 150, b = 5, T = 100: ``--clients 10 --us 150
--period 5 --rounds 100``. Needs ``fedlabels fetch tweets minilm`` (or the dataset given).

Usage::

    nice -n 10 python benchmarks/text_mixed_team.py --dataset tweets --us 150,1000 \\
        --seeds 0,1,2 --rounds 20 --period 25 --private-per-client 200
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import fedlabels as fl
from fedlabels.core.files import write_atomic
from fedlabels.learners import parse_model_spec

RESULTS = Path(__file__).parent / "results"
RUNS = ("local", "fedct", "fedct-classic", "centralized")


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",")]


def _option(text: str) -> tuple[str, Any]:
    key, _, value = text.partition("=")
    low = value.strip().lower()
    if low in ("true", "false"):
        return key.strip(), low == "true"
    try:
        return key.strip(), float(value) if "." in value else int(value)
    except ValueError:
        return key.strip(), value.strip()


def team(args: argparse.Namespace, label: str) -> str:
    """The model spec string of a run: one spec per client."""
    if label in ("fedct-classic", "centralized"):
        return args.classic
    n_t = args.transformer_clients
    return ",".join([args.transformer] * n_t + [args.classic] * (args.clients - n_t))


def run_key(cfg: dict[str, Any]) -> str:
    return json.dumps(cfg, sort_keys=True)


def one_run(args: argparse.Namespace, label: str, u: int, seed: int) -> dict[str, Any]:
    fed = fl.load_federation(args.dataset, clients=args.clients, unlabeled=u,
                             private_per_client=args.private_per_client, test=args.test,
                             seed=seed)
    method = {"fedct-classic": "fedct"}.get(label, label)
    started = time.perf_counter()
    res = fl.run(method, fed, model=team(args, label), rounds=args.rounds, period=args.period,
                 seed=seed, eval_every=args.rounds, progress=False, threads=args.threads,
                 options=args.opt if method == "fedct" else None)
    accs = list(res.final["client_accuracies"]) if res.final else []
    consensus = [r.server.get("consensus_accuracy") for r in res.rounds
                 if "consensus_accuracy" in r.server]
    return {"accuracies": accs, "consensus_accuracy": consensus[-1] if consensus else None,
            "bytes_up_per_client_round": res.mean_bytes_up_per_client_round(),
            "wall_seconds": time.perf_counter() - started,
            "client_sizes": [len(c) for c in fed.clients], "n_test": len(fed.y_test)}


def transformer_clients(model: str) -> int:
    """How many leading clients of a mixed team run the transformer (0: one model for all)."""
    specs = [str(s) for s in parse_model_spec(model)]
    if len(specs) == 1 or specs[0] == specs[-1]:
        return 0
    return next(i for i, s in enumerate(specs) if s != specs[0])


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and std over seeds, per configuration: transformer client(s), classic clients."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault(run_key({k: v for k, v in r["config"].items() if k != "seed"}),
                          []).append(r)
    rows = []
    for key, rs in sorted(groups.items()):
        cfg = json.loads(key)
        row: dict[str, Any] = {**cfg, "seeds": sorted(r["config"]["seed"] for r in rs)}
        acc = np.array([r["accuracies"] for r in rs])
        n_t = transformer_clients(cfg["model"])
        parts = {"transformer": acc[:, :n_t], "classic": acc[:, n_t:]} if n_t else {
            "classic": acc}
        for name, a in parts.items():
            per_seed = a.mean(axis=1)
            row[f"{name}_mean"] = float(per_seed.mean())
            row[f"{name}_std"] = float(per_seed.std(ddof=1)) if len(rs) > 1 else 0.0
        cons = [r["consensus_accuracy"] for r in rs if r["consensus_accuracy"] is not None]
        row["consensus_accuracy"] = float(np.mean(cons)) if cons else None
        row["bytes_up_per_client_round"] = float(np.mean(
            [r["bytes_up_per_client_round"] for r in rs]))
        row["wall_seconds"] = float(np.mean([r["wall_seconds"] for r in rs]))
        rows.append(row)
    return rows


def markdown(summary: list[dict[str, Any]]) -> str:
    """The summary as a markdown table (accuracy %, mean ± std over seeds)."""
    def cell(row: dict[str, Any], part: str) -> str:
        if f"{part}_mean" not in row:
            return "–"
        return f"{100 * row[part + '_mean']:.1f} ± {100 * row[part + '_std']:.1f}"

    lines = ["| team | run | \\|U\\| | transformer client | classic clients (mean) | "
             "consensus on U | bytes up / client / round | seeds |",
             "|---|---|---|---|---|---|---|---|"]
    for row in sorted(summary, key=lambda r: (r["model"], r["unlabeled"],
                                              RUNS.index(r["label"]), "options" in r)):
        specs = row["model"].split(",")
        team_text = f"all {specs[0]}" if len(specs) == 1 else ", ".join(
            f"{specs.count(m)} × {m}" for m in dict.fromkeys(specs))
        cons = row["consensus_accuracy"]
        run = row["label"] + "".join(f" {k}={v}" for k, v in (row.get("options") or {}).items())
        lines.append(f"| {team_text} | {run} | {row['unlabeled']} | "
                     f"{cell(row, 'transformer')} | {cell(row, 'classic')} | "
                     f"{'–' if cons is None else f'{100 * cons:.1f}'} | "
                     f"{row['bytes_up_per_client_round']:.0f} | "
                     f"{','.join(map(str, row['seeds']))} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="tweets")
    p.add_argument("--clients", type=int, default=10)
    p.add_argument("--us", type=_ints, default=[150, 1000], help="|U| values")
    p.add_argument("--seeds", type=_ints, default=[0, 1, 2])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--period", type=int, default=25)
    p.add_argument("--private-per-client", type=int, default=200)
    p.add_argument("--test", type=int, default=None, help="test-set size (dataset default)")
    p.add_argument("--transformer", default="minilm(mode=frozen)")
    p.add_argument("--transformer-clients", type=int, default=1)
    p.add_argument("--classic", default="tfidf")
    p.add_argument("--runs", default=",".join(RUNS), help=f"subset of {', '.join(RUNS)}")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default 1)")
    p.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                   help="a FedCT option for the fedct runs (repeatable), e.g. balanced=true")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--table", action="store_true",
                   help="print the markdown table of --out's summary and run nothing")
    args = p.parse_args()
    args.opt = dict(_option(o) for o in args.opt)
    labels = args.runs.split(",")
    if set(labels) - set(RUNS):
        raise SystemExit(f"unknown runs {sorted(set(labels) - set(RUNS))}; use {RUNS}")
    out = args.out or RESULTS / f"text_mixed_{args.dataset}.json"
    data = json.loads(out.read_text()) if out.exists() else {"runs": []}
    if args.table:
        print(markdown(summarise(data["runs"])))
        return
    done = {run_key(r["config"]) for r in data["runs"]}
    for seed in args.seeds:
        for u in args.us:
            for label in labels:
                cfg = {"label": label, "dataset": args.dataset, "clients": args.clients,
                       "unlabeled": u, "seed": seed, "rounds": args.rounds,
                       "period": args.period, "private_per_client": args.private_per_client,
                       "test": args.test, "model": team(args, label)}
                if args.opt and label.startswith("fedct"):
                    cfg["options"] = args.opt
                if run_key(cfg) in done:
                    print(f"{label} |U|={u} seed={seed}: kept from {out}, not rerun "
                          "(give --out NEW to measure it again)", file=sys.stderr)
                    continue
                rec = one_run(args, label, u, seed)
                data["runs"].append({"config": cfg, **rec})
                done.add(run_key(cfg))
                accs = rec["accuracies"]
                print(f"{label:14s} |U|={u:5d} seed={seed} acc[0]={accs[0]:.3f} "
                      f"mean={np.mean(accs):.3f} ({rec['wall_seconds']:.0f}s)", flush=True)
                data["summary"] = summarise(data["runs"])
                write_atomic(out, json.dumps(data, indent=1))
    for row in data.get("summary", []):
        print(json.dumps(row))


if __name__ == "__main__":
    main()
