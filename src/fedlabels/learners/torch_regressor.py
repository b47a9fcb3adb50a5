"""The torch MLP as a regressor: one linear output trained on mean squared error."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.base import RegressorMixin
from sklearn.utils.metaestimators import available_if
from torch import nn

from fedlabels.core.errors import FedLabelsError
from fedlabels.learners.sk_inputs import predict_input
from fedlabels.learners.torch_mlp import TorchMLPClassifier


class TorchMLPRegressor(RegressorMixin, TorchMLPClassifier):
    """The torch MLP with one linear output trained on mean squared error.

    Same parameters as :class:`~fedlabels.learners.torch_mlp.TorchMLPClassifier`
    (``hidden_layer_sizes``, ``learning_rate``, ``batch_size``, ``max_steps``,
    ``weight_decay``, ``predict_batch_size``, ``warm_start``, ``random_state``;
    ``n_classes`` is fixed to 1 output); ``predict`` returns the output itself. Fitted, it
    has ``n_outputs_`` (1) and, as scikit-learn's regressors, no ``classes_``.
    """

    _target_dtype = np.float32
    _has_classes = False  # one output, n_outputs_ = 1; no classes_ (scikit-learn's way)
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

    def _fit_targets(self, y: np.ndarray, warm: bool
                     ) -> tuple[np.ndarray, int, np.ndarray | None]:
        return np.asarray(y, dtype=np.float32), 1, None

    def predict(self, X: Any) -> np.ndarray:
        """The network's output, in batches under ``eval()`` / ``no_grad``."""
        X = predict_input(self, X)
        self._resident()
        self.model_.eval()
        out = np.empty(len(X), dtype=np.float32)
        step = self.predict_step()
        with torch.no_grad():
            for start in range(0, len(X), step):
                out[start : start + step] = self.model_(
                    torch.from_numpy(X[start : start + step]))[:, 0].numpy()
        return out / self.SCALE + self.CENTER

    @available_if(lambda self: False)  # a regressor has none: hasattr says so, as sklearn's
    def predict_proba(self, X: Any) -> np.ndarray:
        raise FedLabelsError("a regressor has no class probabilities.")
