"""CPU seconds of Paillier SecureHamming by operation count (an estimate, not a run).

Counts the modular multiplications modulo N² of every step for m clients × n points
(L = 1024, 2048-bit keys): the key holders' encryptions, the evaluators' table products,
masks and re-randomisations, and the holders' decryptions (each in units of one
multiplication, measured here), for the code before and after the base-(L + 1) slots,
10-bit windows and batched decryption. The unit's seconds come from the quiet 5 × 1,000
run of docs/xclp.md (245.8 s, re-randomisation exponents of |N|/2 + 128 bits then), so
the estimates are for that quiet machine whatever the load now. That unit (about 4.2 µs)
proved 1.4-1.6x below a multiplication modulo N² timed directly (docs/xclp.md); for
measured seconds per phase use ``benchmarks/paillier_phases.py``.

    .venv/bin/python benchmarks/paillier_cost.py
"""

from __future__ import annotations

import argparse
import secrets
import time
from collections.abc import Callable

import gmpy2

from fedlabels.secure import paillier_hamming as ph

QUIET_5X1000_S = 245.8  # docs/xclp.md, scale benchmark part B (before issue 12)


def _per_call(f: Callable[[int], object], k: int) -> float:
    start = time.process_time()
    f(k)
    return (time.process_time() - start) / k


def _window(bits: int, uses: int, widest: int) -> int:
    return min(range(1, widest + 1), key=lambda w: -(-bits // w) * (2 ** w - 2 + uses))


def count(m: int, n: int, *, slots: int, rerand_bits: int, widest: int, decrypt: float,
          invert: float, L: int = 1024) -> dict[str, float]:
    """Multiplications per step for the whole run (all pairs)."""
    groups, pairs = -(-n // slots), m * (m - 1) // 2
    uses = n * groups  # result ciphertexts per pair
    w = _window(rerand_bits, uses, widest)
    table_rows = -(-rerand_bits // w)
    evaluation = pairs * (groups * (L // 8 * 255 + L * (invert + 1))  # subset tables
                          + table_rows * (2 ** w - 1)  # the re-randomisation table
                          + uses * (L // 8 + table_rows * (1 - 2 ** -w)))  # per ciphertext
    return {"encryption": m * groups * L * (-(-ph.encryption_bits(2048) // 8) + 2),
            "evaluation": evaluation, "decryption": pairs * uses * decrypt}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--points", type=int, default=2000)
    args = parser.parse_args()
    holder = ph.KeyHolder(2048)
    n2 = gmpy2.mpz(holder.n) ** 2
    cts = [holder.fixed.encrypt(secrets.randbelow(holder.n)) for _ in range(300)]

    def multiply(k: int) -> None:
        acc = cts[0]
        for i in range(k):
            acc = acc * cts[i % 300] % n2

    unit = min(_per_call(multiply, 20000) for _ in range(3))
    batched = min(_per_call(lambda k: holder.decrypt_many(cts[:k]), 300) for _ in range(2))
    one_by_one = min(_per_call(lambda k: [holder._private.raw_decrypt(int(c))
                                                    for c in cts[:k]], 300)
                     for _ in range(2))
    invert = _per_call(lambda k: [gmpy2.invert(c, n2) for c in cts[:k]], 300) / unit
    print(f"unit: {unit * 1e6:.2f} us here; decryption {batched / unit:.0f} units batched, "
          f"{one_by_one / unit:.0f} one by one (phe); inversion {invert:.1f}")
    old = dict(slots=186, widest=8, decrypt=one_by_one / unit, invert=invert)
    new = dict(slots=204, widest=10, decrypt=batched / unit, invert=invert)
    quiet = QUIET_5X1000_S / sum(count(5, 1000, rerand_bits=1152, **old).values())
    for name, kw in (("before", old), ("now", new)):
        ops = count(args.clients, args.points, rerand_bits=ph.rerandomisation_bits(2048), **kw)
        total = sum(ops.values())
        shares = ", ".join(f"{k} {v / total:.0%}" for k, v in ops.items())
        print(f"{name}: {args.clients} x {args.points}: {total / 1e6:.1f} M multiplications "
              f"({shares}) -> {total * quiet:.0f} CPU s on the quiet machine")


if __name__ == "__main__":
    main()
