"""``fedlabels bound ...``: the paper's bounds from the command line.

* ``fedlabels bound convergence --clients M --unlabeled N --c C --t0 T0`` — Prop. 1;
* ``fedlabels bound sensitivity --unlabeled N --stability-rate R --delta D`` — the Prop. 2
  heuristic (not a bound: Prop. 2 bounds an expected loss change, not label changes).
"""

from __future__ import annotations

import argparse
from typing import Any


def cmd_bound_convergence(args: argparse.Namespace) -> int:
    from fedlabels.analysis.convergence import convergence_bound, paper_figure_value

    b = convergence_bound(args.clients, args.unlabeled, args.c, args.t0)
    print(f"Prop. 1: delta <= |U| (4c)^(m/2) zeta(m/2, t0+1) with m={b.clients}, "
          f"|U|={b.n_unlabeled}, c={b.c:g}, t0={b.t0}")
    print(f"  delta bound              = {b.delta:.6g}"
          + ("   (>= 1: vacuous, no guarantee)" if b.vacuous else ""))
    print(f"  convergence probability >= {b.convergence_probability:.6g}")
    print(f"  paper's Fig. 2 quantity (1 - (4c)^(m/2) zeta(m/2, t0+1), no |U|) = "
          f"{paper_figure_value(args.clients, args.c, args.t0):.4f}")
    return 0


def cmd_bound_sensitivity(args: argparse.Namespace) -> int:
    from fedlabels.privacy.sensitivity import prop2_sensitivity

    s = prop2_sensitivity(args.unlabeled, args.stability_rate, args.delta)
    print(f"Prop. 2 heuristic: {s.labels} of |U|={args.unlabeled} labels, i.e. s* = "
          f"{s.bits} bits of the one-hot matrix (stability rate {args.stability_rate:g}, "
          f"quantile 1 - {args.delta:g}); not a bound: Prop. 2 bounds an expected loss "
          "change, not label changes on U, so a DP guarantee with it is conditional")
    return 0


def add_bound_parser(sub: Any) -> None:
    """Add ``bound convergence`` and ``bound sensitivity`` to the ``fedlabels`` parser."""
    p = sub.add_parser("bound", help="evaluate the paper's Prop. 1 (convergence bound) and "
                                     "the Prop. 2 sensitivity heuristic")
    bsub = p.add_subparsers(dest="bound", required=True)
    c = bsub.add_parser("convergence", help="Prop. 1: probability that FedCT's consensus "
                                            "stops changing after round t0")
    c.add_argument("--clients", type=int, required=True, help="number of clients m (>= 3)")
    c.add_argument("--unlabeled", type=int, required=True, help="|U|")
    c.add_argument("--c", type=float, required=True, help="rate c in a_t >= 1 - c/t")
    c.add_argument("--t0", type=int, required=True, help="round t0 (>= 2c)")
    c.set_defaults(func=cmd_bound_convergence)
    s = bsub.add_parser("sensitivity", help="Prop. 2 heuristic: a sensitivity estimate from a "
                                            "stability rate (not a bound)")
    s.add_argument("--unlabeled", type=int, required=True, help="|U|")
    s.add_argument("--stability-rate", type=float, required=True,
                   help="on-average-replace-one stability rate eps(n) in (0, 1)")
    s.add_argument("--delta", type=float, default=1e-3,
                   help="the binomial quantile's failure probability in (0, 1)")
    s.set_defaults(func=cmd_bound_sensitivity)
