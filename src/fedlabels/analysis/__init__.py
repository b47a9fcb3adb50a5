"""Analyses of the algorithms that are not privacy guarantees (e.g. convergence bounds).

* :mod:`fedlabels.analysis.convergence` — Prop. 1 of Abourayya et al. (FedCT's convergence
  bound with a majority vote).
"""

from fedlabels.analysis.convergence import ConvergenceBound, convergence_bound, paper_figure_value

__all__ = ["ConvergenceBound", "convergence_bound", "paper_figure_value"]
