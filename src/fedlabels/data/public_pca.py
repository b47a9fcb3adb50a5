"""A public feature projection: the top-K principal components of U, whitened.

With ``public_pca=K`` every feature vector (private, U, test, and new rows given to a saved
run's models) becomes ``(z - mean) @ V / s``: ``z`` the features after the federation's
z-scoring by U, ``mean`` U's mean, ``V`` (d, K) U's top-K principal directions and ``s``
the standard deviation of each component on U (``ddof=1``, as scikit-learn's
``PCA(whiten=True)``). It is fitted on U's features alone (U is public; its labels are
never read), so it costs no privacy, and DP-SGD at the clients then clips and noises
gradients of K whitened inputs instead of d raw ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError


@dataclass(frozen=True)
class PublicPCA:
    """U's top-K whitened principal components (float64 arrays)."""

    mean: np.ndarray  # (d,) U's mean of the (z-scored) features
    components: np.ndarray  # (d, K) orthonormal directions, largest |entry| positive
    scale: np.ndarray  # (K,) each component's std on U (1.0 for a component U lacks)
    explained_variance: float  # fraction of U's total variance the K components hold

    @property
    def n_components(self) -> int:
        return int(self.components.shape[1])

    def project(self, Z: np.ndarray) -> np.ndarray:
        """Rows of (z-scored) features -> the K whitened components, float64."""
        return ((np.asarray(Z, dtype=np.float64) - self.mean) @ self.components) / self.scale

    def feature_names(self) -> list[str]:
        return [f"pc{i + 1}" for i in range(self.n_components)]

    def record(self) -> dict[str, Any]:
        """The result's ``federation.public_pca``."""
        return {"components": self.n_components,
                "explained_variance": round(self.explained_variance, 6)}

    def to_dict(self) -> dict[str, Any]:
        return {"mean": self.mean.tolist(), "components": self.components.tolist(),
                "scale": self.scale.tolist(), "explained_variance": self.explained_variance}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PublicPCA:
        return cls(mean=np.asarray(data["mean"], dtype=np.float64),
                   components=np.asarray(data["components"], dtype=np.float64),
                   scale=np.asarray(data["scale"], dtype=np.float64),
                   explained_variance=float(data["explained_variance"]))


def check_public_pca(k: Any, n_public: int, n_features: int, text: bool) -> int:
    """``k`` checked against U: an int in ``[1, min(|U|, d)]``, numeric features only."""
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise FedLabelsError(f"public_pca must be an integer >= 1 (the number of U's principal "
                             f"components to keep), got {k!r}; leave it unset for none.")
    if text:
        raise FedLabelsError("public_pca projects numeric features and this dataset's feature "
                             "is text; leave public_pca unset for text datasets.")
    most = min(n_public, n_features)
    if k > most:
        raise FedLabelsError(f"public_pca = {k} is not possible: U has {n_public} rows of "
                             f"{n_features} features, so at most {most} components exist; set "
                             f"public_pca between 1 and {most}.")
    return int(k)


def fit_public_pca(Z_public: np.ndarray, k: int) -> PublicPCA:
    """The top-``k`` whitened principal components of U's feature rows ``Z_public``.

    Deterministic: numpy's SVD of centred U, each direction's sign fixed so that its
    largest-magnitude entry is positive. A component with (numerically) no variance on U
    keeps scale 1 rather than being divided by zero.
    """
    Z = np.asarray(Z_public, dtype=np.float64)
    n, d = Z.shape
    check_public_pca(k, n, d, text=False)
    mean = Z.mean(axis=0)
    _, s, vt = np.linalg.svd(Z - mean, full_matrices=False)
    V = vt[:k].T.copy()
    signs = np.sign(V[np.argmax(np.abs(V), axis=0), np.arange(k)])
    V *= np.where(signs == 0, 1.0, signs)
    scale = s[:k] / np.sqrt(max(n - 1, 1))
    tol = (s[0] if len(s) else 0.0) * max(n, d) * np.finfo(np.float64).eps
    scale[s[:k] <= tol] = 1.0
    total = float(np.sum(s**2))
    explained = float(np.sum(s[:k] ** 2) / total) if total > 0 else 0.0
    return PublicPCA(mean=mean, components=V, scale=scale, explained_variance=explained)
