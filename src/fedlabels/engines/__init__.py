"""Engines run a method's roles over a grid: the in-process simulator, and Flower."""

from fedlabels.engines.inprocess import InProcessGrid, simulate
from fedlabels.engines.runner import CommMeter, RunPlan, derive_seeds, plan_run, run_rounds

__all__ = ["CommMeter", "InProcessGrid", "RunPlan", "derive_seeds", "plan_run", "run_rounds",
           "simulate"]
