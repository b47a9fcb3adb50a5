"""FedCT variants (issue 17's pseudo-label weighting options) against FedAvg on Fashion-MNIST.

The issue's configuration is the default: iid, m = 5, 2,000 private examples per client,
|U| = 10,000, the paper's MLP 784-512-512-10, b = 50 local steps, R = 100 rounds, three
seeds. Each variant is ``fedavg``, ``fedct`` (today's defaults) or ``fedct[key=value;...]``
with fedct options (``fedlabels methods fedct``)::

    python benchmarks/fedct_ablation.py --seeds 0,1,2 --threads 1 \\
        --variants 'fedct,fedct[pseudo_warmup=25],fedavg' \\
        --out benchmarks/results/fedct_ablation_iid.jsonl

Each finished run appends one JSON line (variant, options, seed, final mean test accuracy,
the last consensus accuracy on U, communication, wall time) to ``--out``, so an interrupted
sweep keeps what it has; a variant and seed already in the file is skipped. At the end the
file's rows are summarised per variant (mean ± std over seeds, gap to FedAvg) as a markdown
table printed and written beside it (``.md``). Needs ``fedlabels fetch fashion_mnist`` once.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import fedlabels as fl
from fedlabels.core.errors import FedLabelsError
from fedlabels.core.files import write_atomic
from fedlabels.method.options import parse_flag_value

VARIANT = re.compile(r"^(fedct|fedavg)(?:\[(.*)\])?$")


def parse_variant(text: str) -> tuple[str, dict[str, Any]]:
    """``fedct[pseudo_weight=0.5;ties=abstain]`` -> ("fedct", {...}) (values read as the CLI's
    ``--opt KEY=VALUE`` reads them: numbers, booleans, none, or text)."""
    match = VARIANT.match(text.strip())
    if match is None:
        raise FedLabelsError(f"variant {text!r}: use fedavg, fedct or fedct[key=value;...].")
    options: dict[str, Any] = {}
    for item in filter(None, (match.group(2) or "").split(";")):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise FedLabelsError(f"variant {text!r}: {item!r} is not key=value.")
        options[key.strip()] = parse_flag_value(value.strip())
    return match.group(1), options


def summarise(rows: list[dict[str, Any]]) -> str:
    """Markdown: per variant (and config) the mean ± std accuracy over seeds, gap to FedAvg."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["config"], row["variant"]), []).append(row)
    fedavg = {cfg: np.mean([r["acc"] for r in g]) for (cfg, v), g in groups.items()
              if v == "fedavg"}
    lines = ["| config | variant | seeds | mean acc ± std | consensus acc on U | "
             "gap to FedAvg (points) | up B/client/round | down B/client/round |",
             "|---|---|---|---|---|---|---|---|"]
    for (cfg, variant), group in sorted(groups.items()):
        acc = np.array([r["acc"] for r in group])
        cons = [r["consensus_acc"] for r in group if r["consensus_acc"] is not None]
        gap = f"{100 * (fedavg[cfg] - acc.mean()):.2f}" if cfg in fedavg else "—"
        std = f" ± {acc.std(ddof=1):.4f}" if len(acc) > 1 else ""
        lines.append(
            f"| {cfg} | `{variant}` | {','.join(str(r['seed']) for r in group)} | "
            f"{acc.mean():.4f}{std} | {f'{np.mean(cons):.4f}' if cons else '—'} | {gap} | "
            f"{np.mean([r['up'] for r in group]):,.0f} | "
            f"{np.mean([r['down'] for r in group]):,.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default="fedct,fedavg")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--period", type=int, default=50)
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--per-client", type=int, default=2000)
    parser.add_argument("--unlabeled", type=int, default=10_000)
    parser.add_argument("--partition", default="iid", help="a partition spec (fedlabels run "
                        "--partition), e.g. dirichlet:100,0.01 for two-part Dirichlet")
    parser.add_argument("--model", default="mlp(hidden=512-512)")
    parser.add_argument("--eval-every", type=int, default=0,
                        help="evaluate every k rounds (0: only the last round)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="benchmarks/results/fedct_ablation_iid.jsonl")
    args = parser.parse_args()
    out = Path(args.out)
    variants = [v for v in re.split(r",(?![^\[]*\])", args.variants) if v]
    parsed = [(v, *parse_variant(v)) for v in variants]  # fail before any run
    config = (f"{args.partition} m={args.clients} n={args.per_client} U={args.unlabeled} "
              f"R={args.rounds} b={args.period}")
    if args.model != "mlp(hidden=512-512)":
        config += f" {args.model}"
    rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    done = {(r["config"], r["variant"], r["seed"]) for r in rows}
    for seed in (int(s) for s in args.seeds.split(",")):
        fed = fl.load_federation("fashion_mnist", clients=args.clients,
                                 unlabeled=args.unlabeled, private_per_client=args.per_client,
                                 partition=args.partition, seed=seed)
        for variant, method, options in parsed:
            if (config, variant, seed) in done:
                print(f"{config} {variant} seed {seed}: kept from {out}, not rerun "
                      "(give --out NEW to measure it again)", file=sys.stderr)
                continue
            t0 = time.process_time()
            res = fl.run(method, fed, model=args.model, rounds=args.rounds, period=args.period,
                         seed=seed, eval_every=args.eval_every or args.rounds, options=options,
                         threads=args.threads, progress=False)
            frame = res.to_frame()
            cons = (float(frame["consensus_accuracy"].iloc[-1])
                    if "consensus_accuracy" in frame else None)
            row = {"config": config, "variant": variant, "method": method, "options": options,
                   "seed": seed, "acc": res.summary_row()["mean_acc"], "consensus_acc": cons,
                   "up": res.mean_bytes_up_per_client_round(),
                   "down": float(frame["bytes_down_mean"].mean()),
                   "cpu_s": time.process_time() - t0}
            rows.append(row)
            out.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(out, "".join(json.dumps(r) + "\n" for r in rows))
            print(f"{config} {variant} seed {seed}: acc {row['acc']:.4f}, consensus "
                  f"{cons}, {row['cpu_s']:.0f} CPU-s", flush=True)
    table = summarise(rows)
    write_atomic(out.with_suffix(".md"), table)
    print(table)


if __name__ == "__main__":
    main()
