"""Our Table 1: accuracy (ACC) and membership-inference vulnerability (VUL) on Fashion-MNIST.

m = 5 iid clients, a reduced configuration that fits a shared 2-core machine (see
docs/audit.md): 500 private images per client, |U| = 20,000 (+ the attacker's query set under
forged-u), the official test split divided into non-members, ghost members, attacker data,
population points and the evaluation set, the torch MLP 784-256-256-10, 20 rounds of b = 50
local steps. Every method is audited under each threat model asked for (``--threats``,
default forged-u and fixed-u) with every attack; VUL is the strongest attack's mean AUC over
the 5 clients at the worst recorded round, with its 95 % bootstrap interval, next to the null
VUL of ghost members (records no client trained on, same attacks and views).

Usage::

    nice -n 5 python benchmarks/audit_table1.py --out results/audit_table1 --seed 0
    python benchmarks/audit_table1.py --methods fedct,local --rounds 5 --out /tmp/t1
    nice -n 5 python benchmarks/audit_table1.py --lower-bound ...   # + DP canary ε_lb
    python benchmarks/audit_table1.py --lower-bound --threats forged-u --variant
        "dpsgd-e8=dp-fedct:mechanism=dpsgd,site_model=private,epsilon=8"   # (one line)

One row per (method, threat model): ``<method>_<threat>_seed<s>.json`` (the full result) and
its ROC plot. A variant (``--variant TAG=METHOD:key=value,...``, repeatable) is a method with
options of its own, saved as ``<TAG>_<threat>_seed<s>.json``; with variants and no
``--methods``, only the variants run. A row whose JSON exists is read back, not re-run
(resumable; ``--overwrite`` re-runs). ``table1_seed<s>.md`` is rewritten after every row.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import fedlabels as fl
from fedlabels.audit import audit_federation, auditable_methods
from fedlabels.audit.adversaries import THREATS, audit_view
from fedlabels.audit.report import plot_roc
from fedlabels.core.errors import FedLabelsError
from fedlabels.core.files import write_atomic
from fedlabels.learners import parse_model_spec
from fedlabels.method.options import parse_flag_value
from fedlabels.methods import METHODS, get_method

# privacy budgets of the DP methods (each needs one); the table states them
METHOD_OPTIONS: dict[str, dict[str, float]] = {
    "dp-fedct": {"epsilon_per_round": 1.0},  # pure ε per round (k-ary randomized response)
    "dp-fedavg": {"epsilon": 8.0},  # total ε budget of the run, δ = 1e-5
    "dp-pate": {"epsilon": 8.0},  # total ε budget of GNMax over all queries
    "fredy": {"epsilon_per_query": 0.2},  # nominal ε per query of the Laplace noisy max
}


_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class Row:
    """What one table row audits: ``method`` with ``options``, saved under ``tag``."""

    tag: str
    method: str
    options: dict[str, Any] = field(default_factory=dict)
    variant: bool = False

    @property
    def label(self) -> str:
        """The method column: the method and its options."""
        opts = ", ".join(f"{k}={v}" for k, v in self.options.items())
        return self.method + (f" ({opts})" if opts else "")


def plain_row(name: str) -> Row:
    """A registered method with its Table 1 options (:data:`METHOD_OPTIONS`)."""
    return Row(name, name, dict(METHOD_OPTIONS.get(name, {})))


def parse_variant(spec: str) -> Row:
    """``TAG=METHOD:key=value,key=value`` (options optional) -> a validated :class:`Row`.

    Values are typed as ``--opt`` types them; the method's own validation rejects unknown
    or inapplicable options. The tag names the result files, so it may not be a method's
    name (the plain rows keep theirs).
    """
    tag, eq, rest = spec.partition("=")
    tag, (method, _, opts_text) = tag.strip(), rest.partition(":")
    method = method.strip()
    if not eq or not tag or not method or ":" in tag:
        raise FedLabelsError(f"--variant {spec!r}: use TAG=METHOD:key=value,key=value.")
    if not _TAG.fullmatch(tag) or tag in METHODS:
        raise FedLabelsError(f"--variant tag {tag!r} must be letters, digits, '.', '_', '-' "
                             "and not a method's name (it names the result files).")
    impl = get_method(method)
    if method not in auditable_methods():
        raise FedLabelsError(f"--variant {tag!r}: method {method!r} cannot be audited; "
                             f"auditable: {', '.join(sorted(auditable_methods()))}.")
    options: dict[str, Any] = {}
    for item in filter(None, (t.strip() for t in opts_text.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not eq or not key:
            raise FedLabelsError(f"--variant {tag!r}: option {item!r} is not key=value.")
        if key in options:
            raise FedLabelsError(f"--variant {tag!r}: option {key!r} is given twice.")
        options[key] = parse_flag_value(value)
    impl.parse_options(options)  # the method's own errors, before anything runs
    return Row(tag, method, options, variant=True)


def rows_to_run(methods: str | None, variants: list[str]) -> list[Row]:
    """The plain methods (``None``: all, unless variants are given) then the variants."""
    extra = [parse_variant(v) for v in variants]
    tags = [r.tag for r in extra]
    twice = sorted({t for t in tags if tags.count(t) > 1})
    if twice:
        raise FedLabelsError(f"--variant tag(s) {', '.join(twice)} given more than once.")
    if methods is None:
        methods = "" if extra else "all"
    names = ([m for m in METHODS if m in auditable_methods()] if methods == "all"
             else [m.strip() for m in methods.split(",") if m.strip()])
    return [plain_row(n) for n in names] + extra


def uses_u(method: str) -> bool:
    """Whether the method's audit view involves U (else fixed-u and forged-u coincide)."""
    return audit_view(method, "forged-u").queries_in_public


def _ci(v: Any) -> str:
    return f" [{v[0]:.3f}, {v[1]:.3f}]" if v else ""


def _num(v: Any) -> str:
    return "-" if v is None else f"{v:.3f}"


def row_of(label: str, threat: str, data: dict[str, Any], seconds: float | None) -> dict:
    """The table row of one result JSON (``label``: the method column)."""
    p = data["extra"]["privacy"] if "extra" in data else data["privacy"]
    final = data.get("final") or {}
    return {"method": label,
            "threat": threat, "view": p["threat_model"].get("key"),
            "acc": final.get("mean_accuracy"), "vul": p["vul"], "vul_ci": p.get("vul_ci"),
            "attack": p.get("strongest_attack"), "worst_view": p.get("worst_view"),
            "null": p.get("null_vul"), "null_ci": p.get("null_vul_ci"),
            "tpr1": p.get("tpr_at_1pct_fpr"),
            "tpr1_ci": (p.get("tpr_ci") or {}).get("tpr_at_1pct_fpr"),
            "epsilon": p.get("epsilon"), "eps_lower": p.get("epsilon_lower_bound"),
            "seconds": seconds if seconds is not None else p["audit"]["seconds"].get("total")}


def table(rows: list[dict]) -> str:
    head = ("| method | threat model | view | ACC | VUL [95 % CI] (attack, view) | "
            "null VUL [95 % CI] | TPR @ 1 % FPR [95 % CI] | claimed ε | ε lower bound | "
            "audit time (s) |")
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        how = (f" ({r['attack']}, {r['worst_view']})" if r["attack"]
               else " (by construction)")
        eps_low = r["eps_lower"]
        if isinstance(eps_low, dict):
            eps_low = eps_low.get("value", eps_low.get("epsilon"))
        lines.append(
            f"| {r['method']} | {r['threat']} | {r['view']} | {_num(r['acc'])} | "
            f"{r['vul']:.3f}{_ci(r['vul_ci'])}{how} | {_num(r['null'])}{_ci(r['null_ci'])} | "
            f"{_num(r['tpr1'])}{_ci(r['tpr1_ci'])} | {_num(r['epsilon'])} | "
            f"{_num(eps_low) if not isinstance(eps_low, str) else eps_low} | "
            f"{'-' if r['seconds'] is None else format(r['seconds'], '.0f')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", default=None,
                        help="comma-separated, or 'all' = every auditable registered method "
                             "(the default, unless --variant is given)")
    parser.add_argument("--variant", action="append", default=[],
                        metavar="TAG=METHOD:KEY=VALUE,...",
                        help="also audit METHOD with these options, saved under TAG "
                             "(repeatable), e.g. 'dp-fedct-dpsgd-e8=dp-fedct:mechanism=dpsgd,"
                             "epsilon=8'")
    parser.add_argument("--threats", default="forged-u,fixed-u",
                        help=f"comma-separated, from {', '.join(THREATS)}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--period", type=int, default=50)
    parser.add_argument("--per-client", type=int, default=500)
    parser.add_argument("--unlabeled", type=int, default=20_000)
    parser.add_argument("--model", default="mlp(hidden=256-256)")
    parser.add_argument("--public-pca", type=int, default=0,
                        help="project the features on U's top-K principal components (0: no)")
    parser.add_argument("--members", type=int, default=250)
    parser.add_argument("--population", type=int, default=500)
    parser.add_argument("--refs", type=int, default=4)
    parser.add_argument("--views", type=int, default=3)
    parser.add_argument("--mia-attacks", default=None,
                        help="membership-inference attacks, comma-separated (default all)")
    parser.add_argument("--out", default="results/audit_table1")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--overwrite", action="store_true", help="re-run rows that exist")
    parser.add_argument("--lower-bound", action="store_true",
                        help="also run the canary audit of each DP method and each variant "
                             "(forged-u rows) for privacy.epsilon_lower_bound "
                             "(audit.canaries, one more run)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    try:
        todo = rows_to_run(args.methods, args.variant)
    except FedLabelsError as exc:
        raise SystemExit(str(exc)) from None
    threats = [t.strip() for t in args.threats.split(",")]
    bad = [t for t in threats if t not in THREATS]
    if bad:
        raise SystemExit(f"unknown threat model(s) {bad}; choose from {', '.join(THREATS)}")
    out = Path(args.out)
    rows = []
    for row in todo:
        name, tag = row.method, row.tag
        for threat in threats:
            path = out / f"{tag}_{threat}_seed{args.seed}.json"
            same = out / f"{tag}_forged-u_seed{args.seed}.json"
            if threat == "fixed-u" and not uses_u(name) and same.exists():
                path = same  # U plays no role in this view: the forged-u run is the row
            if path.exists() and not args.overwrite:  # resume: this row is done
                label = threat if path != same or threat == "forged-u" else \
                    "fixed-u (= forged-u: U plays no role)"
                rows.append(row_of(row.label, label, json.loads(path.read_text()), None))
                write_atomic(out / f"table1_seed{args.seed}.md", table(rows))
                continue
            fed = fl.load_federation("fashion_mnist", clients=5, unlabeled=args.unlabeled,
                                     private_per_client=args.per_client, seed=args.seed,
                                     public_pca=args.public_pca or None)
            t0 = time.perf_counter()
            try:
                result, _ = audit_federation(
                    name, fed, parse_model_spec(args.model), rounds=args.rounds,
                    period=args.period, seed=args.seed, eval_every=args.rounds,
                    n_members=args.members, n_population=args.population, n_refs=args.refs,
                    views=args.views, options=row.options, threat=threat,
                    attacks=args.mia_attacks, progress=False,
                    config={"benchmark": "audit_table1", **vars(args), "threat": threat})
            except FedLabelsError as exc:  # a method that cannot run this setup: say so
                print(json.dumps({"method": row.label, "threat": threat, "error": str(exc)}),
                      flush=True)
                continue
            if args.lower_bound and threat == "forged-u" and (row.variant
                                                              or name in METHOD_OPTIONS):
                from fedlabels.audit.canaries import (
                    add_epsilon_lower_bound,
                    epsilon_lower_bound_audit,
                )

                add_epsilon_lower_bound(result, epsilon_lower_bound_audit(
                    name, fed, parse_model_spec(args.model), rounds=args.rounds,
                    period=args.period, seed=args.seed, eval_every=args.rounds,
                    options=row.options))
            seconds = time.perf_counter() - t0
            result.save_json(path, overwrite=True)
            plot_roc(result.extra["privacy"], path.with_suffix(".roc.png"),
                     title=f"{row.label} on fashion_mnist ({threat})")
            rows.append(row_of(row.label, threat, json.loads(path.read_text()), seconds))
            print(json.dumps(rows[-1]), flush=True)
            write_atomic(out / f"table1_seed{args.seed}.md", table(rows))


if __name__ == "__main__":
    main()
