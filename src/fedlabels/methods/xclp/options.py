"""Options of the XCLP family: the graph, the labelled fraction, the secure protocol.

Each class holds exactly what its methods read:

* :class:`LPOptions` — label propagation itself (graph, α, labelled fraction, LSH seed);
* :class:`PerClientLPOptions` — ``perclient-lp``: LP plus the test points per client and
  the input features (``features``);
* :class:`XCLPProtocolOptions` — what the XCLP protocol core reads: LP plus ``secure``,
  ``key_bits`` and ``insecure_small_keys``;
* :class:`XCLPOptions` — ``xclp``: the protocol plus the test points per client and the
  input features;
* :class:`FedAvgXCLPOptions` — ``fedavg-xclp``: the protocol plus client sampling, warm-up and
  the propagation variant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedlabels.core.errors import FedLabelsError
from fedlabels.method.options import Interval, MethodOptions, option
from fedlabels.propagation.core import GraphSpec

SECURE_MODES = ("none", "ot", "paillier")
BALANCE = ("none", "class")  # = propagation.core.BALANCE
PROPAGATION = ("cross", "local", "none")
FEATURES = ("raw", "federation")
#: the longest SimHash: 16 times the XCLP paper's 4096 (a float32 projection of L x features)
MAX_LSH_BITS = 65536


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def _test_points() -> Any:
    return option(None, "test points per client added to its graph and labelled (its "
                  "'new data'); None: its whole share of the test set",
                  kind=int, interval=Interval(0, None), nullable=True)


def _features() -> Any:
    return option("raw", "graph features: raw (the data as loaded: a federation's z-scoring "
                  "undone with U's public mean and std) or federation (as every method gets "
                  "them: z-scored with U's statistics where the data set scales, e.g. "
                  "digits); raw suits features in one unit (pixels), federation tables in "
                  "mixed units", kind=str, choices=FEATURES, convert=_lower)


@dataclass(frozen=True)
class LPOptions(MethodOptions):
    """Label propagation over a SimHash kNN graph."""

    lsh_bits: int = option(1024, "SimHash length L (the XCLP paper uses 4096; at most 65536, "
                           "whose projection alone is 256 kB per feature)", kind=int,
                           interval=Interval(1, MAX_LSH_BITS), flag=True)
    knn: int = option(10, "neighbours k kept per point", kind=int,
                      interval=Interval(1, None), flag=True)
    alpha: float = option(0.99, "propagation parameter alpha", kind=float,
                          interval=Interval(0.0, 1.0, "neither"), flag=True)
    power: float = option(3.0, "edge weight = max(cos(pi h / L), 0) ** power", kind=float,
                          interval=Interval(0.0, None, "neither"))
    labeled_fraction: float = option(
        0.1, "fraction of each client's private data that keeps its labels (seeded); the "
        "rest is its unlabelled data", kind=float, interval=Interval(0.0, 1.0, "right"),
        flag=True)
    lsh_seed: int = option(0, "LSH seed where no seed is agreed (secure=none, local "
                           "propagation); secure modes agree on a random one", kind=int,
                           interval=Interval(0, None))
    balance: str = option("class", "label matrix: none (one-hot Y, Algorithm 1) or class "
                          "(each class column divided by its labelled count, confidences "
                          "divided by their maximum, per-class loss weights: the XCLP code's "
                          "recipe; the counts come from one more secure sum)", kind=str,
                          choices=BALANCE, convert=_lower)

    @property
    def graph(self) -> GraphSpec:
        return GraphSpec(k=self.knn, n_bits=self.lsh_bits, power=self.power)


@dataclass(frozen=True)
class PerClientLPOptions(LPOptions):
    """``perclient-lp``: each client propagates alone on its data and test share."""

    test_points: int | None = _test_points()
    features: str = _features()


@dataclass(frozen=True)
class XCLPProtocolOptions(LPOptions):
    """What the XCLP protocol (client and server core) reads."""

    secure: str = option("none", "SecureHamming variant: ot, paillier, or none (plaintext "
                         "LSH bits go to the server: a baseline, not private)", kind=str,
                         choices=SECURE_MODES, convert=_lower, flag=True)
    # 2048 = secure.paillier_hamming.MIN_KEY_BITS (not imported: the secure extra is optional)
    key_bits: int = option(2048, "Paillier modulus size in bits (secure=paillier); under "
                           "2048 only with insecure_small_keys", kind=int,
                           interval=Interval(256, None))
    insecure_small_keys: bool = option(
        False, "INSECURE, tests only: allow Paillier keys under 2048 bits (key_bits >= 256); "
        "recorded in the result's options", kind=bool)
    group_size: int | None = option(
        None, "client groups: the server partitions the participating clients (seeded) into "
        "groups of at most this many (sizes as equal as possible), each running XCLP "
        "independently; None: one joint graph over all participants", kind=int,
        interval=Interval(2, None), nullable=True)

    def check(self) -> None:
        if self.key_bits % 8:
            raise FedLabelsError(f"key_bits must be a multiple of 8, got {self.key_bits}.")
        if self.secure == "paillier":
            from fedlabels.secure.paillier_hamming import check_key_bits

            check_key_bits(self.key_bits, self.insecure_small_keys)


@dataclass(frozen=True)
class XCLPOptions(XCLPProtocolOptions):
    """``xclp``: one-shot XCLP over the clients' data and test shares."""

    test_points: int | None = _test_points()
    features: str = _features()


@dataclass(frozen=True)
class FedAvgXCLPOptions(XCLPProtocolOptions):
    """``fedavg-xclp``: FedAvg with XCLP pseudo-labels (Algorithm 2)."""

    client_fraction: float = option(1.0, "fraction tau of the clients sampled per round",
                                    kind=float, interval=Interval(0.0, 1.0, "right"))
    warmup_rounds: int = option(2, "rounds of FedAvg on labelled data only before "
                                "pseudo-labelling starts", kind=int, interval=Interval(0, None))
    propagation: str = option("cross", "pseudo-labels from cross (XCLP), local (per-client "
                              "LP: FedAvg+perclientLP) or none (FedAvg on labelled data)",
                              kind=str, choices=PROPAGATION, convert=_lower)
