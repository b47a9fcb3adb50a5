"""Coverage of the audit's 95 % intervals on synthetic scores with a known AUC (docs/audit.md,
"Statistics"): each VUL interval (``bootstrap_vul_ci``) and the interval of a difference of
two VULs (``vul_difference``; and, for comparison, the MOVER / Newcombe-style interval built
from the two intervals' ends).

Members of a client score N(δ, 1), non-members N(0, 1): each AUC is Φ(δ/√2). An audit is a
list of views (one δ each; several views of δ = 0 are a maximum over null attack / views),
three clients sharing one non-member sample. Scenarios (``--scenarios``):

* ``strong-vs-null4``: audit A one view δ = 1; audit B four null views; independent samples;
* ``single-single``: δ = 1 against δ = 0.3, one view each, independent;
* ``shared``: δ = 0.6 against four null views, the *same* non-members (audits with one seed);
* ``near1``: δ = 3 against δ = 2.2, 30 / 40 / 50 members, 40 non-members;
* ``near1-small``: δ = 3.5 against δ = 1.5, 15 / 20 / 25 members, 20 non-members;
* ``paired``: two attacks on the *same* candidates (one plan): score = a latent per record
  shared by both + δ (1 and 0.6) for members + independent noise of sd 0.5, so each AUC is
  Φ(δ / √2.5); ``bootstrap_vul_difference(..., paired=True)`` against ``vul_difference``.

    nice -n 10 python benchmarks/audit_interval_coverage.py --reps 400 --seed 0
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from scipy.stats import norm

from fedlabels.privacy.attacks import (
    bootstrap_vul_ci,
    bootstrap_vul_difference,
    roc_auc,
    vul_difference,
)

#: scenario -> (audit A's views, audit B's views, member counts, non-members, shared)
SCENARIOS = {
    "strong-vs-null4": ((1.0,), (0.0,) * 4, (60, 100, 140), 100, False),
    "single-single": ((1.0,), (0.3,), (60, 100, 140), 100, False),
    "shared": ((0.6,), (0.0,) * 4, (60, 100, 140), 100, True),
    "near1": ((3.0,), (2.2,), (30, 40, 50), 40, False),
    "near1-small": ((3.5,), (1.5,), (15, 20, 25), 20, False),
}


def _audit(rng: np.random.Generator, deltas: tuple[float, ...], sizes: tuple[int, ...],
           non: np.ndarray, seed: int, n_boot: int) -> dict[str, object]:
    views = {f"v{i}": {c: (rng.normal(d, 1, n), non) for c, n in enumerate(sizes)}
             for i, d in enumerate(deltas)}
    ci = bootstrap_vul_ci({"a": views}, n_boot=n_boot, seed=seed, fpr_targets=())["vul_ci"]
    points = [np.mean([roc_auc(np.r_[m, x], np.r_[np.ones(len(m)), np.zeros(len(x))])
                       for m, x in per.values()]) for per in views.values()]
    return {"vul": float(max(points)), "vul_ci": ci}


def _mover(a: dict, b: dict) -> list[float]:
    d = a["vul"] - b["vul"]
    (la, ua), (lb, ub) = a["vul_ci"], b["vul_ci"]
    return [d - float(np.hypot(a["vul"] - la, ub - b["vul"])),
            d + float(np.hypot(ua - a["vul"], b["vul"] - lb))]


def coverage(name: str, reps: int, seed: int, n_boot: int) -> dict[str, float]:
    da, db, sizes, n_non, shared = SCENARIOS[name]
    truth_a = float(norm.cdf(max(da) / np.sqrt(2)))
    truth_b = float(norm.cdf(max(db) / np.sqrt(2)))
    rng = np.random.default_rng(np.random.SeedSequence([seed, sum(map(ord, name))]))
    hits = {"a": 0, "b": 0, "difference": 0, "mover": 0}
    widths = []
    for r in range(reps):
        non_a = rng.standard_normal(n_non)
        non_b = non_a if shared else rng.standard_normal(n_non)
        a = _audit(rng, da, sizes, non_a, r, n_boot)
        b = _audit(rng, db, sizes, non_b, r if shared else 10**6 + r, n_boot)
        d = vul_difference(a, b)
        lo_m, hi_m = _mover(a, b)
        hits["a"] += a["vul_ci"][0] <= truth_a <= a["vul_ci"][1]
        hits["b"] += b["vul_ci"][0] <= truth_b <= b["vul_ci"][1]
        hits["difference"] += d["ci"][0] <= truth_a - truth_b <= d["ci"][1]
        hits["mover"] += lo_m <= truth_a - truth_b <= hi_m
        widths.append(d["ci"][1] - d["ci"][0])
    return {**{k: v / reps for k, v in hits.items()}, "difference_width": float(np.mean(widths)),
            "truth_a": truth_a, "truth_b": truth_b, "reps": reps}


def paired_coverage(reps: int, seed: int, n_boot: int) -> dict[str, float]:
    sizes, n_non, deltas, s = (60, 100, 140), 100, (1.0, 0.6), 0.5
    truth = float(np.subtract(*norm.cdf(np.array(deltas) / np.sqrt(2 * (1 + s * s)))))
    rng = np.random.default_rng(np.random.SeedSequence([seed, sum(map(ord, "paired"))]))
    hits = {"paired": 0, "difference": 0}
    widths: dict[str, list[float]] = {"paired": [], "difference": []}
    for r in range(reps):
        latent_non = rng.standard_normal(n_non)
        latent = {c: rng.standard_normal(n) for c, n in enumerate(sizes)}
        audits, entries = [], []
        for d in deltas:
            non = latent_non + s * rng.standard_normal(n_non)
            views = {"v": {c: (latent[c] + d + s * rng.standard_normal(n), non)
                           for c, n in enumerate(sizes)}}
            audits.append({"a": views})
            point = np.mean([roc_auc(np.r_[m, x], np.r_[np.ones(len(m)), np.zeros(len(x))])
                             for m, x in views["v"].values()])
            entries.append({"vul": float(point), "vul_ci": bootstrap_vul_ci(
                {"a": views}, n_boot=n_boot, seed=r, fpr_targets=())["vul_ci"]})
        for name, ci in (("paired", bootstrap_vul_difference(*audits, paired=True,
                                                             n_boot=n_boot, seed=r)["ci"]),
                         ("difference", vul_difference(*entries)["ci"])):
            hits[name] += ci[0] <= truth <= ci[1]
            widths[name].append(ci[1] - ci[0])
    return {"paired": hits["paired"] / reps, "paired_width": float(np.mean(widths["paired"])),
            "difference": hits["difference"] / reps,
            "difference_width": float(np.mean(widths["difference"])), "truth": truth,
            "reps": reps}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenarios", default=",".join((*SCENARIOS, "paired")))
    p.add_argument("--reps", type=int, default=400)
    p.add_argument("--n-boot", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    for name in args.scenarios.split(","):
        if name not in (*SCENARIOS, "paired"):
            raise SystemExit(f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)}, "
                             "paired")
        out = (paired_coverage(args.reps, args.seed, args.n_boot) if name == "paired"
               else coverage(name, args.reps, args.seed, args.n_boot))
        print(json.dumps({"scenario": name, **{k: round(v, 4) for k, v in out.items()}}),
              flush=True)


if __name__ == "__main__":
    main()
