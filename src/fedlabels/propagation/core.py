"""Plaintext label propagation over a SimHash kNN graph (XCLP, Algorithm 1 without crypto).

The pipeline, all vectorised:

1. :func:`lsh_projection` / :func:`lsh_bits` — SimHash: ``B = sign(Π Vᵀ)`` with a Gaussian
   ``Π ∈ R^{L×d}`` drawn from a shared seed, bits packed 8 per byte;
2. :func:`hamming_matrix` — Hamming distances through a ``±1`` matrix product
   (``h = (L − ⟨a, b⟩) / 2``, exact in float32 for L < 2^24);
3. :func:`knn_graph` — similarity ``cos(π h / L)`` (optionally raised to a power), the k
   largest per row (ties broken by index), ``W + Wᵀ``, zero diagonal,
   ``D^{-1/2} W D^{-1/2}``; computed block by block so 60,000 points never need an n×n array;
4. :func:`propagate` — ``Z = (I − αW)^{-1} Y`` by a multi-right-hand-side conjugate gradient
   (``I − αW`` is symmetric positive definite for α ∈ (0, 1)); never a dense inverse;
5. :func:`labels_and_confidence` — argmax labels and ``1 − entropy/log C`` confidences.

The secure protocols (:mod:`fedlabels.secure`) compute exactly the same ``H`` and feed it to
the same :func:`knn_graph_from_hamming`, so plaintext and secure graphs are identical.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from fedlabels.core.errors import FedLabelsError, FedLabelsWarning
from fedlabels.core.user_frames import warn_user
from fedlabels.propagation.knn import knn_from_bits, knn_from_hamming

if TYPE_CHECKING:
    import scipy.sparse as sp

# ----------------------------------------------------------------------------- validation


def check_params(n_points: int, k: int, alpha: float, n_bits: int) -> None:
    """Reject bad propagation settings with a message that says how to fix them."""
    if isinstance(n_bits, bool) or not isinstance(n_bits, int | np.integer) or n_bits < 1:
        raise FedLabelsError(f"the LSH length L (--lsh-bits) must be an integer >= 1, got "
                             f"{n_bits!r}; the XCLP paper uses 4096, 256-1024 work well.")
    if not 0.0 < float(alpha) < 1.0:
        raise FedLabelsError(f"alpha (--alpha) must lie strictly between 0 and 1, got "
                             f"{alpha!r}; 0.99 is the usual choice.")
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise FedLabelsError(f"k (--knn) must be an integer >= 1, got {k!r}.")
    if n_points <= k:
        raise FedLabelsError(f"k (--knn) = {k} must be smaller than the number of points "
                             f"in the graph ({n_points}); lower --knn or add data.")


def check_label_matrix(y: np.ndarray, n_classes: int) -> None:
    """``y`` uses -1 for unlabelled points; at least one point must be labelled."""
    if not np.any(y >= 0):
        raise FedLabelsError("no labelled point among the participating clients; label "
                             "propagation needs at least one (raise --labeled-fraction).")
    if np.any(y >= n_classes):
        raise FedLabelsError(f"labels must be < n_classes = {n_classes}, got {int(y.max())}.")


# ----------------------------------------------------------------------------- LSH


def seed_to_generator(seed: bytes | int) -> np.random.Generator:
    """A numpy generator from a 32-byte agreed seed (or an int, for plaintext runs)."""
    if isinstance(seed, bytes | bytearray):
        words = np.frombuffer(bytes(seed).ljust(32, b"\0")[:32], dtype="<u4")
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence(words.tolist())))
    return np.random.default_rng(int(seed))


def lsh_projection(seed: bytes | int, n_bits: int, n_features: int) -> np.ndarray:
    """The shared Gaussian projection ``Π ∈ R^{L×d}`` (float32), identical at every client."""
    if n_bits < 1:
        raise FedLabelsError(f"the LSH length L must be >= 1, got {n_bits}.")
    rng = seed_to_generator(seed)
    return rng.standard_normal((n_bits, n_features), dtype=np.float32)


def lsh_bits(V: np.ndarray, projection: np.ndarray) -> np.ndarray:
    """SimHash bits ``sign(Π v) > 0`` of each row of ``V``, packed: (n, ⌈L/8⌉) uint8."""
    V = np.ascontiguousarray(V, dtype=np.float32)
    if V.ndim != 2 or V.shape[1] != projection.shape[1]:
        raise FedLabelsError(f"features have shape {V.shape}, the projection expects "
                             f"{projection.shape[1]} columns.")
    return np.packbits(V @ projection.T > 0, axis=1)


def unpack_bits(packed: np.ndarray, n_bits: int) -> np.ndarray:
    """(n, ⌈L/8⌉) packed bits to an (n, L) uint8 0/1 array."""
    return np.unpackbits(packed, axis=1, count=n_bits)


def _signs(packed: np.ndarray, n_bits: int) -> np.ndarray:
    return unpack_bits(packed, n_bits).astype(np.float32) * 2.0 - 1.0


def hamming_matrix(a: np.ndarray, b: np.ndarray, n_bits: int) -> np.ndarray:
    """All Hamming distances between packed rows of ``a`` and ``b``: (n_a, n_b) int32."""
    sa, sb = _signs(a, n_bits), _signs(b, n_bits)
    return np.rint((n_bits - sa @ sb.T) * 0.5).astype(np.int32)


# ----------------------------------------------------------------------------- graph


@dataclass(frozen=True)
class GraphSpec:
    """Graph settings: k neighbours, LSH length L, similarity exponent."""

    k: int = 10
    n_bits: int = 1024
    power: float = 3.0


def _assemble(rows: np.ndarray, cols: np.ndarray, h: np.ndarray, n: int,
              spec: GraphSpec) -> sp.csr_matrix:
    import scipy.sparse as sp  # lazily: importing fedlabels must not load scipy

    sim = np.cos(np.pi * h.astype(np.float64) / spec.n_bits)
    sim = np.clip(sim, 0.0, None) ** spec.power  # negative similarities are not edges
    B = sp.csr_matrix((sim, (rows, cols)), shape=(n, n))
    W = (B + B.T).tocsr()
    W.setdiag(0.0)
    W.eliminate_zeros()
    deg = np.asarray(W.sum(axis=1)).ravel()
    deg[deg == 0] = 1.0
    inv = sp.diags(1.0 / np.sqrt(deg))
    return (inv @ W @ inv).tocsr()


def knn_graph_from_hamming(H: np.ndarray, spec: GraphSpec) -> sp.csr_matrix:
    """Normalised kNN graph from a full (n, n) Hamming matrix (what the server holds)."""
    n = H.shape[0]
    check_params(n, spec.k, 0.5, spec.n_bits)
    idx, h = knn_from_hamming(H, spec.k)
    return _assemble(np.repeat(np.arange(n), spec.k), idx.ravel(), h.ravel(), n, spec)


def knn_graph(packed: np.ndarray, spec: GraphSpec, block: int = 2048) -> sp.csr_matrix:
    """Normalised kNN graph from packed LSH bits, blockwise with a running top-k
    (:func:`~fedlabels.propagation.knn.knn_from_bits`; memory O(n·k + block·(block + L))).

    Gives exactly :func:`knn_graph_from_hamming` of ``hamming_matrix(packed, packed)``.
    """
    n = packed.shape[0]
    check_params(n, spec.k, 0.5, spec.n_bits)
    idx, h = knn_from_bits(packed, spec.k, spec.n_bits, block)
    return _assemble(np.repeat(np.arange(n), spec.k), idx.ravel(), h.ravel(), n, spec)


# ----------------------------------------------------------------------------- solve


def solve_cg(W: sp.spmatrix, B: np.ndarray, alpha: float, rtol: float = 1e-10,
             max_iter: int = 2000) -> np.ndarray:
    """Solve ``(I − αW) X = B`` for all columns of ``B`` at once (vectorised CG).

    ``I − αW`` is symmetric positive definite when ``W`` is the symmetric normalised
    adjacency (eigenvalues in [−1, 1]) and α ∈ (0, 1). Each column has its own step sizes;
    converged columns stop changing. Cost per iteration: one sparse × dense product.
    Warns (:class:`~fedlabels.core.errors.FedLabelsWarning`) if columns have not converged after
    ``max_iter`` iterations.
    """
    B = np.asarray(B, dtype=np.float64)
    squeeze = B.ndim == 1
    B2 = B[:, None] if squeeze else B
    X = np.zeros_like(B2)
    R = B2.copy()
    P = R.copy()
    rs = np.einsum("ij,ij->j", R, R)
    target = (rtol ** 2) * np.maximum(rs, 1e-300)
    for _ in range(max_iter):
        active = rs > target
        if not active.any():
            break
        AP = P - alpha * (W @ P)
        denom = np.einsum("ij,ij->j", P, AP)
        step = np.where(active, rs / np.where(denom > 0, denom, 1.0), 0.0)
        X += P * step
        R -= AP * step
        rs_new = np.einsum("ij,ij->j", R, R)
        beta = np.where(active, rs_new / np.where(rs > 0, rs, 1.0), 0.0)
        P = R + P * beta
        rs = rs_new
    unconverged = int(np.count_nonzero(rs > target))
    if unconverged:
        worst = float(np.sqrt(np.max(rs / np.maximum(target, 1e-300)))) * rtol
        warn_user(f"conjugate gradient stopped at its iteration limit ({max_iter}) with "
                  f"{unconverged} of {len(rs)} columns unconverged (relative residual up to "
                  f"{worst:.2g} > {rtol:g}); lower alpha or check the graph.", FedLabelsWarning)
    return X[:, 0] if squeeze else X


def one_hot(y: np.ndarray, n_classes: int) -> np.ndarray:
    """Zero-or-one-hot label matrix; rows with y = -1 (unlabelled) are zero."""
    Y = np.zeros((len(y), n_classes), dtype=np.float64)
    lab = np.flatnonzero(y >= 0)
    Y[lab, y[lab]] = 1.0
    return Y


BALANCE = ("none", "class")


def class_counts(y: np.ndarray, n_classes: int) -> np.ndarray:
    """Labelled points per class (``y`` = -1 for unlabelled points), int64."""
    y = np.asarray(y)
    return np.bincount(y[y >= 0], minlength=n_classes).astype(np.int64)


def balance_scores(Z: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Class-balanced scores: column c of ``Z`` divided by the labelled count of class c.

    ``(I − αW)^{-1} Y`` is linear in ``Y``, so this equals propagating the class-balanced
    label matrix ``Y[i, c] = 1/|L_c|`` (the XCLP code's recipe); a class with no labelled
    point keeps a zero column.
    """
    counts = np.asarray(counts, dtype=np.float64)
    scale = np.divide(1.0, counts, out=np.zeros_like(counts), where=counts > 0)
    return np.asarray(Z, dtype=np.float64) * scale


def class_loss_weights(counts: np.ndarray) -> np.ndarray:
    """Per-class loss weights ``(Σ counts / C) / counts_c`` (0 for an absent class)."""
    counts = np.asarray(counts, dtype=np.float64)
    mean = counts.sum() / max(len(counts), 1)
    return np.divide(mean, counts, out=np.zeros_like(counts), where=counts > 0)


def propagate(W: sp.spmatrix, y: np.ndarray, n_classes: int, alpha: float,
              balance: str = "none") -> np.ndarray:
    """Class scores ``Z = (I − αW)^{-1} Y`` (n, C); ``y`` holds -1 for unlabelled points.

    ``balance="class"`` divides each class column of ``Y`` by its labelled count.
    """
    check_label_matrix(y, n_classes)
    if not 0.0 < float(alpha) < 1.0:
        raise FedLabelsError(f"alpha must lie strictly between 0 and 1, got {alpha!r}.")
    Z = solve_cg(W, one_hot(y, n_classes), alpha)
    return balance_scores(Z, class_counts(y, n_classes)) if balance == "class" else Z


def labels_and_confidence(Z: np.ndarray, normalise: bool = False
                          ) -> tuple[np.ndarray, np.ndarray]:
    """Argmax labels and confidences ``1 − H(z/Σz)/log C`` (0 for rows with no score).

    ``normalise``: divide the confidences by their maximum (the XCLP code's recipe).
    """
    Zc = np.clip(np.asarray(Z, dtype=np.float64), 0.0, None)
    n_classes = Zc.shape[1]
    total = Zc.sum(axis=1, keepdims=True)
    has = total[:, 0] > 0
    P = np.divide(Zc, total, out=np.zeros_like(Zc), where=total > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.sum(np.where(P > 0, P * np.log(P), 0.0), axis=1)
    conf = np.clip(np.where(has, 1.0 - ent / np.log(max(n_classes, 2)), 0.0), 0.0, 1.0)
    top = float(conf.max()) if conf.size else 0.0
    if normalise and top > 0:
        conf = conf / top
    return Zc.argmax(axis=1).astype(np.int64), conf


# ----------------------------------------------------------------------------- pipelines


def label_propagation(V: np.ndarray, y: np.ndarray, n_classes: int, *, k: int = 10,
                      alpha: float = 0.99, n_bits: int = 1024, seed: bytes | int = 0,
                      power: float = 3.0, balance: str = "none"
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Plaintext LP on one data set: (labels, confidences, scores Z).

    ``balance="class"``: class-balanced label matrix and confidences divided by their maximum.

    Per-client LP is this function on one client's data; centralised XCLP is it on the
    concatenation of all participants' data (the secure protocols reproduce it exactly).
    """
    V = np.asarray(V)
    if len(V) == 0:
        raise FedLabelsError("label propagation got no data points; every participating "
                             "client needs at least one point.")
    check_params(len(V), k, alpha, n_bits)
    check_label_matrix(np.asarray(y), n_classes)
    spec = GraphSpec(k=k, n_bits=n_bits, power=power)
    bits = lsh_bits(V, lsh_projection(seed, n_bits, V.shape[1]))
    W = knn_graph(bits, spec)
    if balance not in BALANCE:
        raise FedLabelsError(f"balance must be one of {BALANCE}, got {balance!r}.")
    Z = propagate(W, np.asarray(y), n_classes, alpha, balance)
    labels, conf = labels_and_confidence(Z, normalise=balance == "class")
    return labels, conf, Z
