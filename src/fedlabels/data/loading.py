"""Federations from registered datasets (or ``csv:PATH:TARGET``) with their default sizes."""

from __future__ import annotations

from fedlabels.data.federation import Federation, make_federation
from fedlabels.data.registry import get_dataset
from fedlabels.errors import FedLabelsError


def load_federation(dataset: str, *, n_clients: int = 5, n_unlabeled: int | None = None,
                    n_private: int | None = None, private_per_client: int | None = None,
                    n_test: int | None = None, partition: str = "iid",
                    seed: int = 0) -> Federation:
    """Build a federation from a registered dataset (or ``csv:PATH:TARGET``).

    Sizes left as ``None`` take the dataset's defaults (``fedlabels datasets`` lists them).
    """
    info = get_dataset(dataset)
    raw = info.load()
    defaults = info.defaults
    if private_per_client is not None:
        if n_private is not None:
            raise FedLabelsError("give n_private or private_per_client, not both.")
        n_private = private_per_client * n_clients
    n_unlabeled = n_unlabeled if n_unlabeled is not None else defaults.get("n_unlabeled")
    n_private = n_private if n_private is not None else defaults.get("n_private")
    n_test = n_test if n_test is not None else defaults.get("n_test")
    if n_unlabeled is None:  # a user table: half of what is left after the test split
        n_rows = len(raw.y)
        n_test_eff = n_test if n_test is not None else max(1, round(0.2 * n_rows))
        n_unlabeled = max(1, (n_rows - n_test_eff) // 2)
    return make_federation(raw.X, raw.y, n_clients=n_clients, n_unlabeled=n_unlabeled,
                           n_private=n_private, n_test=n_test, X_test=raw.X_test,
                           y_test=raw.y_test, partition=partition, scale=info.scale,
                           seed=seed, name=dataset)
