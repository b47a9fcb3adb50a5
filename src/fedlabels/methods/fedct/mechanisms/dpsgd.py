"""dpsgd: each client trains with DP-SGD and shares the plain hard labels of its DP model.

Per round a client takes ``period`` DP-SGD steps (:mod:`fedlabels.learners.dpsgd`: Poisson
rate q, per-example clip C, noise σC, all from its secret generator) on its private data,
each mixed with a plain minibatch of the pseudo-labelled U, and releases its hard labels on U
without further noise. What is covered, for one record of one client (added or removed):

* every DP-SGD step is a subsampled Gaussian mechanism on that client's private data; its
  steps in all rounds compose adaptively, accounted with PLD / RDP over the steps it took;
* the model after any step, hence its labels on U, is post-processing of those steps;
* the consensus on U is a function of all clients' releases (each post-processing of a DP
  model) and of U (public); training on it touches private data only through DP-SGD steps,
  which are accounted. So the client's whole transcript is (ε, δ)-DP for its records,
  against the server and the other clients (no trust in the server is needed).

Not covered: the evaluation replies (test accuracy) and, under partial participation, the
stand-in model of a client not yet selected (trained without DP, used only to evaluate).

``site_model`` says which model a site keeps for its own predictions. ``dp`` (default): the
DP-SGD model itself, so the site's model is covered and may be released. ``private``: the
site also trains its own model as FedCT does (all its private data and the consensus on U,
no noise), which is evaluated and never sent (not protected, like the models of the other
DP-FedCT mechanisms); the labels it shares come from a separate DP-SGD model trained on
the private data alone (not on the consensus, so the vote is one of independent DP models
and cannot reinforce its own mistakes), and the guarantee of the transcript is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fedlabels.comm import Message, pack_labels
from fedlabels.method.base import Grid, Settings
from fedlabels.method.dpsgd_client import dpsgd_round_config
from fedlabels.methods.fedct.mechanisms.base import CLIENTS_ENFORCE, LabelMechanism
from fedlabels.privacy.dpsgd_accounting import (
    RECORD_ADD_REMOVE,
    DPSGDRoundEvent,
    account_dpsgd,
    dpsgd_noise,
    sigma_calibrated_by,
    sigma_source,
)

if TYPE_CHECKING:
    from fedlabels.methods.fedct.dp_fedct import DPFedCTClient, DPFedCTServer
    from fedlabels.privacy.gaussian_calibration import GaussianCalibration

DPSGD_AGAINST = ("the server and the other clients (everything a client sends), and anyone "
                 "who sees the consensus or the clients' labels")
DPSGD_ASSUMPTIONS = (
    "the client runs DP-SGD honestly with noise and Poisson sample from its own OS entropy",
    "every local step that can influence what the client sends is a DP-SGD step on its "
    "private data and is accounted; the labels on U, the consensus and training on the "
    "pseudo-labelled U are post-processing (site_model=private: the site's own model, "
    "trained without DP, never influences what is sent)",
    "evaluation replies (test accuracy) are outside the guarantee",
)

#: what each value of the ``site_model`` option means for the result (``privacy.site_model``)
SITE_MODELS = {
    "dp": "dp: each site's model is its DP-SGD model (the one whose labels it shares), so it "
          "is covered by the guarantee and may be released",
    "private": "private: each site also trains its own model on all its private data and the "
               "consensus on U without DP (what is evaluated); it never leaves the site and "
               "is not protected; the shared labels come from a separate DP-SGD model trained "
               "on the private data alone",
}


def planned_dpsgd_rounds(rounds: int, period: int, sigma: float, options: Any) -> list[Any]:
    """The events of ``rounds`` rounds of ``period`` DP-SGD steps of one client: what a
    server's ledger checks a run's plan with before round 1."""
    return [DPSGDRoundEvent(sigma, options.example_rate, options.example_clip,
                            ((0, period),))] * rounds


class DPSGDMechanism(LabelMechanism):
    """Labels of a DP-SGD-trained model; (ε, δ) over all local steps of each client."""

    name = "dpsgd"
    summary = ("dpsgd: clients train with DP-SGD (Poisson sampling, per-example clipping, "
               "Gaussian noise) and share their models' hard labels on U")
    uses_sensitivity = False
    calibrates_at_build = True  # σ from noise_multiplier, or from ε over the planned steps

    def __init__(self) -> None:
        self.sigma: float | None = None  # calibrated from the options (deterministic)
        self.calibration: GaussianCalibration | None = None

    def release(self, client: DPFedCTClient, message: Message,
                noise: dict[str, Any]) -> Message:
        from fedlabels.methods.fedct.fedct import decode_consensus

        n_classes = client.settings.n_classes
        if self.site_model(client, message) == "private":
            # the DP-SGD model learns from the private data alone, never from the consensus:
            # the vote stays one of independent DP models and cannot feed its own mistakes
            # back (measured: it collapses at small ε otherwise, docs/privacy.md §7d). It
            # trains first, so that a refused round (dpsgd_train's checks) trains nothing.
            dp_model = client.release_learner()
            client.dpsgd_train(message, learner=dp_model)
            client.receive_and_train(message)  # the site's own model: never sent, not DP
            client.finetune_site_model(message)
            labels = np.asarray(dp_model.predict(client.public)).astype(np.int64)
            return Message("dpfedct.dpsgd_labels",
                           arrays={"labels": pack_labels(labels, n_classes)})
        if "consensus" in message.arrays:
            client.set_pseudo_labels(decode_consensus(message.arrays, len(client.public),
                                                      n_classes))
        d = client.training_data()
        client.dpsgd_train(message, d.X_aux, d.y_aux, d.aux_index)
        return Message("dpfedct.dpsgd_labels", arrays={
            "labels": pack_labels(client.local_labels(), n_classes)})

    @staticmethod
    def site_model(client: DPFedCTClient, message: Message) -> str:
        """The client's own ``site_model``; a message that says otherwise is refused (the
        DP-SGD parameters are checked by :meth:`DPSGDClient.check_dpsgd_round`)."""
        from fedlabels.core.errors import ParameterRefusal

        mine = client.options.site_model
        asked = message.config.get("site_model", "dp")
        if asked != mine:
            raise ParameterRefusal(f"client {client.cid}: the server asked for site_model = "
                                 f"{asked!r} but this client's options say {mine!r}; refusing "
                                 "to train.", named=f"the site's site_model is {mine!r}")
        return str(mine)

    def calibrate(self, server: DPFedCTServer, grid: Grid | None) -> None:
        if self.sigma is not None:
            return
        opts, settings = server.options, server.settings
        # σ given (noise_multiplier), or calibrated from the total ε over every planned step
        self.sigma, self.calibration = dpsgd_noise(opts.noise_multiplier, opts.epsilon,
                                                   server.delta, opts.example_rate,
                                                   settings.rounds * settings.period)
        server.ledger.calibrated_by = sigma_calibrated_by(self.calibration)
        server.ledger.check_plan(planned_dpsgd_rounds(settings.rounds, settings.period,
                                                      self.sigma, opts),
                                 f"{settings.rounds} round(s)")

    def round_config(self, server: DPFedCTServer) -> dict[str, Any]:
        assert self.sigma is not None
        return {"mechanism": self.name, "site_model": server.options.site_model,
                **dpsgd_round_config(self.sigma, server.options)}

    def collect(self, server: DPFedCTServer, replies: dict[int, Message],
                config: dict[str, Any]) -> np.ndarray:
        return server.consensus(server.collect_votes(replies))

    def round_events(self, server: DPFedCTServer, config: dict[str, Any],
                     cids: Sequence[int], replies: dict[int, Message] | None) -> list[Any]:
        period = server.settings.period
        return [DPSGDRoundEvent(float(config["noise_multiplier"]), float(config["example_rate"]),
                                float(config["example_clip"]),
                                tuple((cid, period) for cid in sorted(cids)))]

    def privacy(self, server: DPFedCTServer) -> dict[str, Any]:
        return {
            "mechanism": self.summary,
            **account_dpsgd(server.events, server.delta),  # per client; ε: the ledger's
            **server.ledger.spent().to_dict(),
            "noise_multiplier": self.sigma,
            "noise_multiplier_source": sigma_source(server.options.epsilon, self.calibration),
            "calibrated_by": server.ledger.calibrated_by,  # the server's ledger: given or whom
            "calibration": None if self.calibration is None else self.calibration.to_dict(),
            "example_rate": server.options.example_rate,
            "example_clip": server.options.example_clip,
            "site_model": SITE_MODELS[server.options.site_model],
            "target": server.ledger.target_view("round", server.settings.rounds,
                                                len(server.events), CLIENTS_ENFORCE),
            "rounds_accounted": len(server.events),
            "guarantee": "formal",
            "guarantee_against": DPSGD_AGAINST,
            "neighbouring": RECORD_ADD_REMOVE,
            "composition": "adaptive, over every DP-SGD step each client took in all rounds",
            "unit": "per client (one record of it), over the whole run; the worst client",
            "assumptions": list(DPSGD_ASSUMPTIONS),
            "threat_model": "the server and the other clients see each client's labels on U "
                            "every round (post-processing of its DP-SGD model)",
        }

    def refusal(self, settings: Settings, learners: list[Any]) -> str | None:
        from fedlabels.core.errors import FedLabelsError
        from fedlabels.learners.dpsgd import check_dpsgd_learner

        for cid, learner in enumerate(learners):
            try:
                check_dpsgd_learner(learner, f"client {cid}")
            except FedLabelsError as exc:
                return str(exc)
        return None
