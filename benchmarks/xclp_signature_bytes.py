"""XCLP protocol bytes with and without the sites' identity signatures, side by side.

    .venv/bin/python benchmarks/xclp_signature_bytes.py --secure ot paillier --seed 0

Runs one-shot XCLP on breast_cancer (3 clients, lsh_bits=16, knn=3, labeled_fraction=0.3,
test_points=4, key_bits=512 with insecure_small_keys) twice per mode in one process: as the
simulator runs it (each site signs with its identity key) and with no trusted setup (sites
without identity keys), and prints the result's serialized protocol bytes up and down and
their difference (deterministic: byte counts do not depend on the secret randomness).
"""

from __future__ import annotations

import argparse
from typing import Any

from fedlabels import load_federation
from fedlabels.engines.inprocess import simulate
from fedlabels.learners import as_models
from fedlabels.methods import get_method


def xclp_bytes(secure: str, seed: int, signed: bool) -> tuple[int, int]:
    method = type(get_method("xclp"))()  # an instance of its own: the registry's untouched
    if not signed:  # sites without identity keys: no out-of-band setup
        method.trusted_setup = lambda settings, n_clients: None  # type: ignore[method-assign]
    options: dict[str, Any] = {"secure": secure, "lsh_bits": 16, "knn": 3,
                               "labeled_fraction": 0.3, "test_points": 4, "key_bits": 512,
                               "insecure_small_keys": True}
    fed = load_federation("breast_cancer", clients=3, seed=seed)
    result = simulate(method, fed, as_models("dt"), rounds=1, period=1, seed=seed,
                      progress=False, options=options)
    record = result.extra["xclp"]
    return int(record["bytes_up"]), int(record["bytes_down"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--secure", nargs="+", default=["ot", "paillier"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for secure in args.secure:
        up, down = xclp_bytes(secure, args.seed, signed=True)
        up0, down0 = xclp_bytes(secure, args.seed, signed=False)
        print(f"secure={secure}: signed {up:,} up / {down:,} down; unsigned {up0:,} / "
              f"{down0:,}; signatures add {up - up0:,} up, {down - down0:,} down")


if __name__ == "__main__":
    main()
