"""Distillation on the public set: DD, FedMD, DS-FL and FedDF."""
