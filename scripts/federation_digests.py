"""Print a digest of each registered dataset's federation (arrays, class and feature names),
to tell whether a change to how federations are built moves any figure.

Usage: ``PYTHONPATH=CHECKOUT/src python scripts/federation_digests.py > NAME.json`` under
two checkouts, then ``diff`` the two files: a line that differs is a federation (dataset,
seed) whose arrays, classes or features changed. Datasets that are not fetched are left out.
"""

from __future__ import annotations

import hashlib
import json
import warnings

import fedlabels as fl
from fedlabels.core.errors import DatasetNotFetchedError

DATASETS = {"breast_cancer": 5, "wine": 5, "digits": 5, "vehicle": 5, "dna": 5,
            "shuttle": 5, "letter": 5, "fashion_mnist": 2, "Ozone": 5, "Servo": 5,
            "diabetes": 5}  # name: seeds 0..N-1


def main() -> None:
    warnings.simplefilter("ignore")
    out = {}
    for name, seeds in DATASETS.items():
        for seed in range(seeds):
            try:
                fed = fl.load_federation(name, clients=5, seed=seed)
            except DatasetNotFetchedError:
                break
            what = [fed.fingerprint(), fed.class_names, list(fed.feature_names),
                    fed.n_classes]
            out[f"{name}/{seed}"] = hashlib.sha256(json.dumps(what).encode()).hexdigest()[:12]
    print(json.dumps(out, indent=0))


if __name__ == "__main__":
    main()
