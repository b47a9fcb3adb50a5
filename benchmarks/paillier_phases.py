"""Where Paillier SecureHamming spends its CPU: seconds per phase, measured (not counted).

Runs the message sequence of :mod:`fedlabels.secure.hamming_protocol` for m clients × n
random points (L bits, 2048-bit keys by default) in this one process, one client after
another, and reports CPU and wall seconds per phase: the key holders' key generation and
encryption (step 1), the evaluators' table products, masks and re-randomisations (step 2),
the holders' decryptions (step 3), and the server's combine; the result is checked against
the plaintext Hamming matrix. ``--profile`` adds cProfile's top functions.

    .venv/bin/python benchmarks/paillier_phases.py --clients 5 --points 500
    .venv/bin/python benchmarks/paillier_phases.py --clients 5 --points 1000 --profile

CPU seconds include every thread of the process (the big-integer work runs on
``FEDLABELS_CRYPTO_THREADS`` threads, default: the cores); on a loaded machine wall seconds
mean little.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import time
from collections import defaultdict
from typing import Any

import numpy as np

from fedlabels.propagation.core import hamming_matrix
from fedlabels.secure.channels import PeerChannels
from fedlabels.secure.hamming_protocol import HammingParty, server_hamming
from fedlabels.secure.keys import KeyPair

PHASES = {1: "holders: H_self, key generation, encryption",
          2: "evaluators: tables, products, masks, re-randomisation",
          3: "holders: decryption"}


def measure(clients: int, points: int, n_bits: int, key_bits: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    bits = {c: rng.integers(0, 2, (points, n_bits)).astype(np.uint8) for c in range(clients)}
    parties = {c: HammingParty("paillier", c, np.packbits(bits[c], axis=1), n_bits, key_bits,
                               insecure_small_keys=key_bits < 2048) for c in range(clients)}
    cpu: dict[str, float] = defaultdict(float)
    wall: dict[str, float] = defaultdict(float)
    peers = list(range(clients))
    sizes = {c: points for c in peers}
    keys = {c: KeyPair() for c in peers}  # the evaluators seal their ciphertexts
    channels = {c: PeerChannels(keys[c], c, 0, {p: keys[p].public for p in peers if p != c})
                for c in peers}

    def timed(step: int, cid: int, arrays: Any) -> Any:
        c0, w0 = time.process_time(), time.perf_counter()
        out = parties[cid].step(step, peers, sizes, arrays, channels[cid])
        cpu[PHASES[step]] += time.process_time() - c0
        wall[PHASES[step]] += time.perf_counter() - w0
        return out

    first = {c: timed(1, c, {}) for c in peers}

    def send(step: int, msgs: dict[int, Any]) -> dict[int, Any]:
        return {c: timed(step, c, msgs[c]) for c in sorted(msgs)}

    c0, w0 = time.process_time(), time.perf_counter()
    members, H = server_hamming("paillier", first, send, key_bits, n_bits, peers)
    server_cpu = time.process_time() - c0 - sum(cpu[PHASES[s]] for s in (2, 3))
    server_wall = time.perf_counter() - w0 - sum(wall[PHASES[s]] for s in (2, 3))
    cpu["server: relay and combine"], wall["server: relay and combine"] = server_cpu, server_wall
    allbits = np.packbits(np.concatenate([bits[c] for c in members]), axis=1)
    exact = bool(np.array_equal(H, hamming_matrix(allbits, allbits, n_bits)))
    return {"clients": clients, "points": points, "n_bits": n_bits, "key_bits": key_bits,
            "exact": exact, "cpu_s": dict(cpu), "wall_s": dict(wall),
            "cpu_total_s": sum(cpu.values()), "wall_total_s": sum(wall.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--points", type=int, default=500)
    parser.add_argument("--lsh-bits", type=int, default=1024)
    parser.add_argument("--key-bits", type=int, default=2048)
    parser.add_argument("--profile", action="store_true", help="print cProfile's top 25")
    args = parser.parse_args()
    profiler = cProfile.Profile() if args.profile else None
    if profiler:
        profiler.enable()
    record = measure(args.clients, args.points, args.lsh_bits, args.key_bits)
    if profiler:
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(25)
        print(out.getvalue())
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
