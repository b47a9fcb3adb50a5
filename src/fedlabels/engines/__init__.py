"""Engines run a method's roles over a grid: the in-process simulator, and Flower."""

from fedlabels.engines.inprocess import InProcessGrid, simulate

__all__ = ["InProcessGrid", "simulate"]
