"""Cryptographic protocols of XCLP: seed agreement, SecureHamming (OT / Paillier), SecureRowSums.

Requires the ``secure`` extra (``phe``, ``gmpy2``, ``cryptography``).
"""

from fedlabels.secure.keys import KeyPair, SecureProtocolError, open_sealed, prg_uint64, seal
from fedlabels.secure.seed import SeedAgreement

__all__ = ["KeyPair", "SecureProtocolError", "SeedAgreement", "open_sealed", "prg_uint64",
           "seal"]
