"""Shared fixtures: small federations from bundled data, an isolated dataset cache."""

from __future__ import annotations

import pytest
import torch

import fedlabels as fl

# Tiny test models gain nothing from intra-op threads, and spinning OpenMP threads slow
# everything down badly when the (2-core) machine is busy; one thread keeps tests fast.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Tests never see (or write) the user's real dataset cache."""
    monkeypatch.setenv("FEDLABELS_CACHE", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="session")
def breast_cancer_fed():
    """The FedCT paper's breast-cancer split: m = 5, |U| = 370, 85 private, 114 test."""
    return fl.load_federation("breast_cancer", n_clients=5, seed=0)
