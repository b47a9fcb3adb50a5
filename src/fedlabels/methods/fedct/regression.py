"""FedCT for regression: clients share b-bit quantised predictions on U, the server forms a
median or trimmed-mean consensus, clients train on D_i plus the pseudo-targets on U.

The same exchange as classification FedCT (:mod:`fedlabels.methods.fedct.fedct`): each round
the training message carries the previous consensus, the client trains on D_i ∪ P and
replies with its predictions h_t^i(U). What changes is what travels and how it is combined:

* targets are reals mapped to ``[0, 1]`` by the federation's public target range, so a
  prediction is quantised over ``[0, 1]`` to ``bits`` bits (:mod:`fedlabels.consensus_regression`)
  and bit-packed (``fedct.predictions``, ``predictions``);
* the consensus of the replies that arrived is their coordinate-wise median or trimmed
  mean (option ``target_consensus``), broadcast quantised at the same ``bits``;
* nothing is abstained on: P is all of U with the consensus as targets.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from fedlabels.comm import Message
from fedlabels.consensus_regression import (
    aggregate_function,
    dequantise,
    pack_levels,
    quantise,
    unpack_levels,
)
from fedlabels.core.errors import FedLabelsError
from fedlabels.core.metrics import rmse
from fedlabels.method.base import ClientRole, Grid, ServerRole, Settings, TrainingData
from fedlabels.method.blocks import decode_labels
from fedlabels.method.message_config import own_count

DEFAULT_BITS = 8
DEFAULT_TRIM = 0.2


def regression_options(options: Any) -> tuple[int, str, float]:
    """(bits, consensus, trim) of FedCT options, with the regression defaults filled in."""
    return (options.bits or DEFAULT_BITS, options.target_consensus,
            DEFAULT_TRIM if options.target_trim is None else options.target_trim)


def check_task_options(options: Any, settings: Settings) -> None:
    """Regression options only on a regression task, the quorum only on classification."""
    given = [name for name, unset in (("bits", None), ("target_consensus", "median"),
                                      ("target_trim", None)) if getattr(options, name) != unset]
    if settings.task != "regression":
        if given:
            raise FedLabelsError(f"fedct option(s) {', '.join(given)} apply to a regression "
                                 "task only; drop them (or use a regression dataset).")
        return
    for name in ("quorum", "robust"):
        value = getattr(options, name, None)
        if value not in (None, "none"):
            raise FedLabelsError(f"fedct option {name} applies to classification (a vote of "
                                 "labels); on a regression task use target_consensus "
                                 "median|trimmed-mean.")
    if options.target_trim is not None and options.target_consensus != "trimmed-mean":
        raise FedLabelsError("target_trim applies only with target_consensus trimmed-mean.")


class FedCTRegressionClient(ClientRole):
    """Client i: trains on D_i ∪ (U, consensus) and shares its quantised predictions on U."""

    state_attrs: ClassVar[tuple[str, ...]] = ("pseudo_y",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bits = regression_options(self.settings.options)[0]
        self.pseudo_y: np.ndarray | None = None  # the consensus on all of U (unit scale)
        self.handlers["fedct.train"] = self.train
        self._warn_coarse_levels()

    def _warn_coarse_levels(self) -> None:
        """Warn (locally, from this client's own targets) when one quantisation level is
        wider than the spread of the targets: every release then rounds to about the same
        level and the consensus teaches nothing (a declared range far wider than the data)."""
        y = np.asarray(self.data.y, dtype=np.float64)
        step = 1.0 / ((1 << self.bits) - 1)
        if len(y) > 1 and float(y.std()) < step:
            from fedlabels.core.errors import FedLabelsWarning
            from fedlabels.core.user_frames import warn_user

            lo, hi = self.settings.target_range or (0.0, 1.0)
            warn_user(FedLabelsWarning(
                f"fedct at {self.bits} bits: one level of the target range [{lo:g}, {hi:g}] "
                f"is {(hi - lo) * step:.4g} of the target's units, wider than the spread of "
                "a client's targets, so its releases cannot tell them apart; declare a "
                "tighter --target-range or raise --bits."))

    def training_data(self) -> TrainingData:
        if self.pseudo_y is None:
            return TrainingData(self.data.X, self.data.y)
        return TrainingData(self.data.X, self.data.y, self.public, self.pseudo_y)

    def train(self, message: Message) -> Message:
        if "consensus" in message.arrays:  # a truncated array read as level 0 unchecked
            levels = decode_labels(message.arrays, "consensus", len(self.public),
                                   1 << self.bits, item="level")
            self.pseudo_y = dequantise(levels, self.bits)
        d = self.training_data()
        self.train_on(d.X, d.y, own_count(message.config, "steps", self.cid,
                                          self.settings.period), d.X_aux, d.y_aux)
        levels = quantise(self.predict(self.public), self.bits)
        return Message("fedct.predictions",
                       arrays={"predictions": pack_levels(levels, self.bits)})


class FedCTRegressionServer(ServerRole):
    """Collects quantised predictions, forms and broadcasts their median / trimmed mean."""

    state_attrs: ClassVar[tuple[str, ...]] = ("targets",)

    def __init__(self, settings: Settings, n_public: int,
                 truth_public: np.ndarray | None = None) -> None:
        self.settings = settings
        self.n_public = n_public
        self.bits, name, trim = regression_options(settings.options)
        self.aggregate = aggregate_function(name, trim)
        lo, hi = settings.target_range or (0.0, 1.0)
        self.span = float(hi - lo)  # RMSE of unit-scale values -> original units
        self.targets: np.ndarray | None = None  # consensus levels on U
        self.truth_public = truth_public

    def train_message(self, rnd: int) -> Message:
        arrays = {} if self.targets is None else {
            "consensus": pack_levels(self.targets, self.bits)}
        return Message("fedct.train", arrays=arrays,
                       config={"round": rnd, "steps": self.settings.period})

    def collect_predictions(self, replies: dict[int, Message]) -> np.ndarray:
        """The (m, |U|) matrix of the replying clients' dequantised predictions."""
        return np.stack([dequantise(unpack_levels(replies[c].arrays["predictions"],
                                                  self.n_public, self.bits), self.bits)
                         for c in sorted(replies)])

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        message = self.train_message(rnd)
        replies = grid.exchange({cid: message for cid in grid.client_ids}, rnd)
        if not replies:  # nothing arrived: the consensus stays
            return {}
        new = quantise(self.aggregate(self.collect_predictions(replies)), self.bits)
        values = dequantise(new, self.bits)
        metrics = {"consensus_change_rmse": float("nan") if self.targets is None else
                   self.span * rmse(dequantise(self.targets, self.bits), values)}
        if self.truth_public is not None:  # diagnostic only: the true targets of U
            metrics["consensus_rmse"] = self.span * rmse(self.truth_public, values)
        self.targets = new
        return metrics

    def final_arrays(self) -> dict[str, np.ndarray]:
        """The last consensus on U, unit scale."""
        return {} if self.targets is None else {
            "targets": dequantise(self.targets, self.bits)}
