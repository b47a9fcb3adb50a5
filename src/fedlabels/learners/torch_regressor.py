"""The torch MLP as a regressor: one linear output trained on mean squared error."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.base import RegressorMixin
from torch import nn

from fedlabels.core.errors import FedLabelsError
from fedlabels.learners.torch_mlp import TorchMLPClassifier


class TorchMLPRegressor(RegressorMixin, TorchMLPClassifier):
    """The torch MLP with one linear output trained on mean squared error.

    Same parameters as :class:`~fedlabels.learners.torch_mlp.TorchMLPClassifier`
    (``n_classes`` is fixed to 1 output); ``predict`` returns the output itself.
    """

    _target_dtype = np.float32
    #: the network learns ``(y - CENTER) * SCALE``: targets of a regression federation lie
    #: in [0, 1] (its public range), which this maps to about [-2, 2], the scale a freshly
    #: initialised network outputs and Adam's step size suit (the same map at every client,
    #: so FedAvg averages models of one output scale)
    CENTER, SCALE = 0.5, 4.0

    def _losses(self) -> tuple[Any, Any]:
        mean, per = nn.MSELoss(), nn.MSELoss(reduction="none")
        c, k = self.CENTER, self.SCALE
        return (lambda out, y: mean(out[:, 0], (y - c) * k)), (
            lambda out, y: per(out[:, 0], (y - c) * k))

    def _initialise(self, n_features: int, n_classes: int) -> None:
        super()._initialise(n_features, 1)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The network's output, in batches under ``eval()`` / ``no_grad``."""
        if not hasattr(self, "model_"):
            raise FedLabelsError("this TorchMLPRegressor is not fitted yet; call fit first.")
        self._resident()
        X = np.ascontiguousarray(X, dtype=np.float32)
        self.model_.eval()
        out = np.empty(len(X), dtype=np.float32)
        step = int(self.predict_batch_size)
        with torch.no_grad():
            for start in range(0, len(X), step):
                out[start : start + step] = self.model_(
                    torch.from_numpy(X[start : start + step]))[:, 0].numpy()
        return out / self.SCALE + self.CENTER

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        raise FedLabelsError("a regressor has no class probabilities.")
