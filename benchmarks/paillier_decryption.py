"""Paillier decryption with OpenSSL's constant-time powers against gmpy2's, side by side.

The same ciphertexts under one 2048-bit key are decrypted by ``KeyHolder.decrypt_many``
with each backend of :mod:`fedlabels.secure.modexp` in turn, ``--repeats`` times,
alternating; prints the CPU milliseconds per decryption of each round and the ratio of the
best ones, and checks that both give the same plaintexts.

    .venv/bin/python benchmarks/paillier_decryption.py
"""

from __future__ import annotations

import argparse
import secrets
import time

from fedlabels.secure import modexp
from fedlabels.secure import paillier_hamming as ph


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ciphertexts", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if modexp.backend() != "openssl":
        raise SystemExit("no shared libcrypto in this Python: only gmpy2 is available")
    holder = ph.KeyHolder(2048)
    cts = [holder.fixed.encrypt(secrets.randbelow(holder.n)) for _ in range(args.ciphertexts)]
    openssl = modexp._libcrypto
    backends = {"openssl": openssl, "gmpy2": lambda: None}
    ms: dict[str, list[float]] = {name: [] for name in backends}
    plain: dict[str, list[int]] = {}
    try:
        for _ in range(args.repeats):
            for name, lib in backends.items():
                modexp._libcrypto = lib  # type: ignore[assignment]
                start = time.process_time()
                plain[name] = holder.decrypt_many(cts)
                ms[name].append((time.process_time() - start) / len(cts) * 1e3)
    finally:
        modexp._libcrypto = openssl
    if plain["openssl"] != plain["gmpy2"]:
        raise SystemExit("the backends disagree")
    for name, values in ms.items():
        print(f"{name}: {', '.join(f'{v:.2f}' for v in values)} ms CPU per decryption")
    print(f"gmpy2 / openssl (best of {args.repeats}): {min(ms['gmpy2']) / min(ms['openssl']):.2f}x")


if __name__ == "__main__":
    main()
