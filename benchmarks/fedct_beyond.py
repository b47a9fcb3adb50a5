"""FedCT's options that use U better, ablated against FedAvg and local-only training.

Each variant is ``fedavg``, ``local``, ``fedct`` (today's defaults) or
``fedct[key=value;...]`` with fedct options (``fedlabels methods fedct``). Settings per
``--setting``:

* ``tweets`` / ``movie_reviews``: frozen MiniLM, m = 10, |U| = 150, 2,000 private texts,
  500 test texts, T = 100 rounds of b = 5 steps (``benchmarks/text_fedct.py``'s setting);
* ``fashion``: Fashion-MNIST iid, m = 5, 2,000 private each, |U| = 10,000, the paper's MLP
  784-512-512-10, b = 50; ``--rounds`` 20 (T = 1,000, the reduced scale) or 100 (T = 5,000);
* ``fashion_cnn``: the same federation with the small CNN, ``cnn(arch=small)``, T = 1,000;
  ``--model`` replaces a setting's model (e.g. ``'cnn(arch=small,augment=true)'``) and
  ``--unlabeled`` its |U|; both are part of the setting's name in the results.

::

    python benchmarks/fedct_beyond.py --setting tweets --seeds 0,1,2 \\
        --variants 'fedct,fedct[warmup_steps=200],local,fedavg'

Each finished run appends one JSON line (setting, variant, options, seed, final mean test
accuracy, last consensus accuracy on U, bytes up and down per client and round, CPU
seconds) to ``--out`` (default ``benchmarks/results/fedct_beyond_<setting>.jsonl``); a run
already in the file is skipped. The summary (mean over seeds, 95 % t-interval with three
or more seeds, gap to FedAvg) is printed and written beside it (``.md``). Needs
``fedlabels fetch fashion_mnist tweets minilm``.
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
from scipy import stats

import fedlabels as fl
from fedlabels.core.errors import FedLabelsError
from fedlabels.core.files import write_atomic

VARIANT = re.compile(r"^(fedct|fedavg|local)(?:\[(.*)\])?$")
TEXT = {"dataset": None, "clients": 10, "unlabeled": 150, "private": 2000, "test": 500,
        "rounds": 100, "period": 5, "model": "minilm(mode=frozen,max_len=64,batch=16)"}
SETTINGS: dict[str, dict[str, Any]] = {
    "tweets": {**TEXT, "dataset": "tweets"},
    "movie_reviews": {**TEXT, "dataset": "movie_reviews"},
    "fashion": {"dataset": "fashion_mnist", "clients": 5, "unlabeled": 10_000,
                "per_client": 2000, "rounds": 20, "period": 50, "model": "mlp(hidden=512-512)"},
}
SETTINGS["fashion_cnn"] = {**SETTINGS["fashion"], "model": "cnn(arch=small)"}


def parse_variant(text: str) -> tuple[str, dict[str, Any]]:
    """``fedct[warmup_steps=200;quorum=0.8]`` -> ("fedct", {...}) (values as JSON)."""
    match = VARIANT.match(text.strip())
    if match is None:
        raise FedLabelsError(f"variant {text!r}: use fedavg, local, fedct or "
                             "fedct[key=value;...].")
    options: dict[str, Any] = {}
    for item in filter(None, (match.group(2) or "").split(";")):
        key, _, value = item.partition("=")
        try:
            options[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            options[key.strip()] = value.strip()
    return match.group(1), options


def interval(acc: np.ndarray) -> str:
    """Mean, and the 95 % t-interval's half-width with three or more seeds."""
    if len(acc) < 3:
        return f"{acc.mean():.4f}"
    half = stats.t.ppf(0.975, len(acc) - 1) * acc.std(ddof=1) / np.sqrt(len(acc))
    return f"{acc.mean():.4f} ± {half:.4f}"


def summarise(rows: list[dict[str, Any]]) -> str:
    """Markdown: per setting and variant, accuracy over seeds and the gap to FedAvg, paired
    by seed (the mean over the variant's seeds that FedAvg also ran)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["setting"], row["variant"]), []).append(row)
    fedavg = {(r["setting"], r["seed"]): r["acc"] for r in rows if r["variant"] == "fedavg"}
    lines = ["| setting | variant | seeds | mean acc (± 95 % CI) | consensus acc on U | "
             "FedAvg − variant (points) | up B/client/round | down B/client/round |",
             "|---|---|---|---|---|---|---|---|"]
    for (setting, variant), group in sorted(groups.items()):
        acc = np.array([r["acc"] for r in group])
        cons = [r["consensus_acc"] for r in group if r["consensus_acc"] is not None]
        paired = [fedavg[(setting, r["seed"])] - r["acc"] for r in group
                  if (setting, r["seed"]) in fedavg]  # FedAvg on the variant's seeds only
        gap = f"{100 * np.mean(paired):.2f}" if paired else "—"
        lines.append(
            f"| {setting} | `{variant}` | {','.join(str(r['seed']) for r in group)} | "
            f"{interval(acc)} | {f'{np.mean(cons):.4f}' if cons else '—'} | {gap} | "
            f"{np.mean([r['up'] for r in group]):,.0f} | "
            f"{np.mean([r['down'] for r in group]):,.0f} |")
    return "\n".join(lines) + "\n"


def load(setting: dict[str, Any], seed: int) -> Any:
    if "per_client" in setting:
        return fl.load_federation(setting["dataset"], clients=setting["clients"],
                                  unlabeled=setting["unlabeled"],
                                  private_per_client=setting["per_client"], seed=seed)
    return fl.load_federation(setting["dataset"], clients=setting["clients"],
                              unlabeled=setting["unlabeled"], private=setting["private"],
                              test=setting["test"], seed=seed)


def configure(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """The setting with the command line's overrides, and its name in the results (the
    setting and T, then each override; a setting's defaults keep their old names)."""
    setting = dict(SETTINGS[args.setting])
    if args.rounds:
        setting["rounds"] = args.rounds
    name = f"{args.setting} T={setting['rounds'] * setting['period']}"
    if args.private and "private" in setting:
        setting["private"] = args.private
        name += f" private={args.private}"
    if args.unlabeled:
        setting["unlabeled"] = args.unlabeled
        name += f" U={args.unlabeled}"
    if args.model:
        setting["model"] = args.model
        name += f" model={args.model}"
    return setting, name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setting", choices=sorted(SETTINGS), required=True)
    parser.add_argument("--variants", default="fedct,fedavg,local")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--rounds", type=int, default=None, help="default: the setting's")
    parser.add_argument("--private", type=int, default=None,
                        help="text: private texts in all (default 2,000; e.g. 3,500 for the "
                        "ceiling of |U| = 150 labelled correctly)")
    parser.add_argument("--model", default=None, help="default: the setting's")
    parser.add_argument("--unlabeled", type=int, default=None, help="|U|; default: the setting's")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1,
                        help="worker processes per run (the result is the same for every N)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    setting, name = configure(args)
    out = Path(args.out or f"benchmarks/results/fedct_beyond_{args.setting}.jsonl")
    variants = [v for v in re.split(r",(?![^\[]*\])", args.variants) if v]
    parsed = [(v, *parse_variant(v)) for v in variants]  # fail before any run
    rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    done = {(r["setting"], r["variant"], r["seed"]) for r in rows}
    for seed in (int(s) for s in args.seeds.split(",")):
        fed = load(setting, seed)
        for variant, method, options in parsed:
            if (name, variant, seed) in done:
                print(f"{name} {variant} seed {seed}: kept from {out}, not rerun "
                      "(give --out NEW to measure it again)", file=sys.stderr)
                continue
            t0 = time.process_time()
            res = fl.run(method, fed, model=setting["model"], rounds=setting["rounds"],
                         period=setting["period"], seed=seed, eval_every=setting["rounds"],
                         options=options, threads=args.threads, workers=args.workers,
                         device=args.device,
                         progress=False)
            frame = res.to_frame()
            cons = (float(frame["consensus_accuracy"].iloc[-1])
                    if "consensus_accuracy" in frame else None)
            row = {"setting": name, "variant": variant, "method": method, "options": options,
                   "seed": seed, "acc": res.final["mean_accuracy"], "consensus_acc": cons,
                   "up": res.mean_bytes_up_per_client_round(),
                   "down": float(frame["bytes_down_mean"].mean())
                   if "bytes_down_mean" in frame else 0.0,
                   "cpu_s": round(time.process_time() - t0, 1)}
            rows.append(row)
            out.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(out, "".join(json.dumps(r) + "\n" for r in rows))
            print(f"{name} {variant} seed {seed}: acc {row['acc']:.4f}, consensus {cons}, "
                  f"{row['cpu_s']:.0f} CPU-s", flush=True)
    table = summarise(rows)
    write_atomic(out.with_suffix(".md"), table)
    print(table)


if __name__ == "__main__":
    main()
