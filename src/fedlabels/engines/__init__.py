"""Engines run a method's roles: the in-process simulator here, Flower later."""

from fedlabels.engines.inprocess import CommMeter, InProcessGrid, simulate

__all__ = ["CommMeter", "InProcessGrid", "simulate"]
