"""xor and kary: randomized response on the client's hard labels, calibrated to s*.

* ``xor`` — the XOR mechanism with independent bits (bitwise randomized response) on the
  |U| x C one-hot matrix, flip probability f = 1 / (1 + e^{ε/s*}); C bits per row, bit-packed.
  The server forms the consensus from per-class bit counts (debiased, random tie-break).
* ``kary`` — k-ary randomized response per label with ε₁ = ε / s*_labels; ceil(log2 C) bits
  per label, the consensus is the plurality of the noisy votes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fedlabels.comm import Message, pack_labels
from fedlabels.core.errors import FedLabelsError
from fedlabels.core.randomness import numpy_generator
from fedlabels.method.base import Grid
from fedlabels.method.blocks import broadcast
from fedlabels.method.message_config import real
from fedlabels.methods.fedct.mechanisms.base import (
    CLIENTS_ENFORCE,
    LabelMechanism,
    refuse_less_noise,
)
from fedlabels.privacy.events import RECORD_LEVEL, Sensitivity

if TYPE_CHECKING:
    from fedlabels.methods.fedct.dp_fedct import DPFedCTClient, DPFedCTServer


def _estimate_sensitivity(server: DPFedCTServer, grid: Grid) -> Sensitivity:
    opts = server.options
    config: dict[str, Any] = {
        "neighbours": opts.sensitivity_neighbours, "relation": opts.sensitivity_relation,
        "steps": (server.settings.period if opts.sensitivity_steps is None
                  else opts.sensitivity_steps),
        "model": opts.sensitivity_model}
    message = Message("dpfedct.sensitivity", config=config, category="control")
    replies = broadcast(grid, message, 0)
    per_client = {cid: int(r.config["bits"]) for cid, r in sorted(replies.items())}
    bits = min(max(per_client.values()), 2 * server.n_public)
    return Sensitivity(bits, "empirical", server.n_public, formal=False, details={
        **config, "per_client_bits": per_client,
        "per_client_mean_changed_labels": {
            cid: float(r.config["mean_changed_labels"]) for cid, r in replies.items()},
        "estimated_at": "before round 1, fresh learners trained on private data only",
        "note": "s* = max over clients of a sample maximum over neighbours: an estimate, "
                "not a bound; the estimate itself is computed from private data and "
                "released without noise"})


def label_round_epsilon(target: float, delta: float, rounds: int, mechanism: str,
                        sensitivity: Sensitivity, n_classes: int) -> float:
    """DP-FedCT's per-round ε calibrated from a total (ε, δ) over ``rounds``.

    xor: the largest pure per-round ε whose exact composition stays within the target;
    kary: the largest whose exact k-ary composition does (or RDP's, if ever tighter; at
    least ε / rounds, basic composition's)."""
    from fedlabels.privacy.accounting import (
        calibrate_kary_round_epsilon,
        calibrate_xor_round_epsilon,
    )

    if mechanism == "xor":
        return calibrate_xor_round_epsilon(target, delta, rounds, sensitivity.bits)
    return calibrate_kary_round_epsilon(target, delta, rounds, sensitivity.labels, n_classes)


class _RandomizedResponse(LabelMechanism):
    """What xor and kary share: s*, the per-round ε, the guarantee."""

    def own_epsilon_round(self, client: DPFedCTClient) -> tuple[float, Sensitivity]:
        """(ε per round, s*) from the client's own options and plan (its own s* estimate
        with ``empirical``): what the server computes, never read from a message."""
        opts = client.options
        sens = client.sensitivity_of_options()
        if opts.epsilon_per_round is not None:
            return float(opts.epsilon_per_round), sens
        eps = label_round_epsilon(opts.epsilon, opts.delta, client.settings.rounds,
                                  self.name, sens, client.settings.n_classes)
        return eps, sens

    def calibrate(self, server: DPFedCTServer, grid: Grid | None) -> None:
        """(ε per round, s*): estimated (if empirical) and calibrated before round 1; with a
        total budget the run refuses to start if its planned rounds would exceed it."""
        from fedlabels.privacy.validation import check_sensitivity_bits

        if server.sensitivity is None:
            assert grid is not None  # a restored server has its s*
            server.sensitivity = _estimate_sensitivity(server, grid)
        if server.epsilon_round is None:
            check_sensitivity_bits(server.sensitivity.bits, server.n_public)
            rounds = server.settings.rounds
            if server.options.epsilon_per_round is not None:
                server.epsilon_round = server.options.epsilon_per_round
            else:
                assert server.options.epsilon is not None  # DPFedCTOptions.check: one of two
                server.epsilon_round = label_round_epsilon(
                    server.options.epsilon, server.delta, rounds, self.name,
                    server.sensitivity, server.settings.n_classes)
            # refused beyond a total ε; kept as the plan either way (a dry run's statement)
            planned = self.round_events(server, self.round_config(server), [], None)
            server.ledger.check_plan(planned * rounds, f"{rounds} round(s)")

    def privacy(self, server: DPFedCTServer) -> dict[str, Any]:
        from fedlabels.privacy.sensitivity import sensitivity_guarantee

        spent = server.ledger.spent()
        mech = ({k: v for k, v in self.round_config(server).items() if k != "mechanism"}
                if server.epsilon_round is not None and server.sensitivity is not None
                else {})
        sens = server.sensitivity.to_dict() if server.sensitivity is not None else None
        assumptions = [
            *RR_ASSUMPTIONS,
            "the guarantee holds only if every client's true Hamming sensitivity is at most "
            f"s* = {sens['bits'] if sens else '?'} bits (source: "
            f"{sens['source'] if sens else '?'}; 1 changed label = 2 bits)",
        ]
        if sens and sens["source"] == "prop2":
            assumptions.append("s* is the Prop. 2 heuristic: Prop. 2 bounds an expected loss "
                               "change, not prediction changes on U, and gives no supremum "
                               "over neighbours")
        if sens and sens["source"] != "worst":
            assumptions.append("s* is not a proven bound; the (ε, δ) below is conditional "
                               "on it")
        else:
            assumptions.append("s* = 2|U| holds for any two datasets of a client: the whole "
                               "dataset of each client is protected, not just one record")
        guarantee = (sensitivity_guarantee(server.sensitivity)
                     if server.sensitivity is not None else {})
        return {
            "mechanism": self.summary,
            **spent.to_dict(),
            "epsilon_per_round": server.epsilon_round,
            "target": server.ledger.target_view("round", server.settings.rounds,
                                                len(server.events), CLIENTS_ENFORCE),
            "rounds_accounted": len(server.events),
            **mech,
            "sensitivity": sens,
            "neighbouring": RECORD_LEVEL,
            **guarantee,
            "unit": "per client, over the whole run",
            "assumptions": assumptions,
            "threat_model": "a server, also one that deviates from the protocol, observing "
                            "every client's noisy labels",
        }


#: what every randomized-response guarantee assumes, besides the sensitivity (stated per run)
RR_ASSUMPTIONS = (
    "honest clients that draw their noise from their own OS entropy; the server may deviate "
    "from the protocol (each client takes its mechanism, noise and number of releases from "
    "its own options and refuses other requests) but does not collude with clients",
    "each client's label releases are protected under the stated neighbouring relation; the "
    "consensus, the vote and training on pseudo-labels are post-processing",
    "the clients' final models never leave the clients and are not protected",
)


#: a flip probability from which on the default mechanism refuses to run: each bit is then
#: within 5 points of a coin toss, and the clients would train on noise
NOISE_FLIP_PROBABILITY = 0.45


def _choose_mechanism(server: Any) -> str:
    """What the refusal of a noise-only default recommends: DP-SGD, with the user's model
    where DP-SGD trains it (else what to change), and that its ε protects one record where
    ``worst``'s protected the client's whole dataset; text learners cannot take it, so for
    them the randomized responses with less noise per label."""
    run_anyway = "--epsilon, fewer --rounds or a smaller U (--unlabeled, or fewer rows in --public)"
    if getattr(server, "text_learners", False):
        return ("On text DP-SGD's mlp does not apply (it takes numeric features): choose "
                "--mechanism xor or --mechanism kary explicitly, with a larger " + run_anyway
                + " (docs/privacy.md, Defaults).")
    flag, why, python = _DPSGD_MODEL[getattr(server, "dpsgd_model", "mlp")]
    sensitivity = getattr(server, "sensitivity", None)
    weaker = ("; at the same ε it protects one record of each client (record-level, one "
              "record added or removed), not each client's whole dataset as xor with "
              "--sensitivity worst does" if getattr(sensitivity, "source", "") == "worst"
              else "")
    return ("Choose the mechanism: recommended --mechanism dpsgd --opt site_model=private "
            f"--quorum 0.8 --opt labeller_lr=0.01{flag} (docs/privacy.md, Defaults; {why}; in "
            f"Python: fl.run(..., {python}quorum=0.8) with options 'mechanism': 'dpsgd', "
            f"'site_model': 'private', 'labeller_lr': 0.01){weaker}; or --mechanism xor "
            "(options 'mechanism': 'xor') to run it anyway, with a larger " + run_anyway + ".")


#: the model of the recommended dpsgd run, by what DP-SGD makes of the clients' models
#: (learners.dpsgd.dpsgd_fit): (the flag, why, fl.run's keyword)
_DPSGD_MODEL = {
    "yours": ("", "your --model as given: DP-SGD trains it", ""),
    "no-batch-norm": (" --model 'cnn(arch=small)'", "or another network without batch "
                      "normalisation or a loss of its own: DP-SGD needs per-example gradients "
                      "of cross-entropy", "model='cnn(arch=small)', "),
    "mlp": (" --model 'mlp(hidden=128)'", "DP-SGD trains torch networks only",
            "model='mlp(hidden=128)', "),
}


class XorMechanism(_RandomizedResponse):
    """Bitwise randomized response on the one-hot rows."""

    name = "xor"
    summary = "xor: bitwise randomized response on one-hot rows"

    def own_noise(self, client: DPFedCTClient) -> dict[str, Any]:
        from fedlabels.privacy.mechanisms import flip_probability

        eps, sens = self.own_epsilon_round(client)
        return {"flip_probability": flip_probability(eps, sens.bits)}

    def client_noise(self, client: DPFedCTClient, config: Mapping[str, Any]) -> dict[str, Any]:
        f = real(config, "flip_probability", client.cid)  # f and 1 - f protect alike
        refuse_less_noise(client, "flip_probability", min(f, 1.0 - f),
                          client.own_noise()["flip_probability"], noisier_above=True)
        return {"flip_probability": f}

    def calibrate(self, server: DPFedCTServer, grid: Grid | None) -> None:
        """As for every randomized response; then, if xor is only the default (no
        ``mechanism`` given), refuse a total budget at which its labels would be noise (a
        per-round ε is an expert's explicit choice)."""
        from fedlabels.privacy.mechanisms import flip_probability

        super().calibrate(server, grid)
        assert server.epsilon_round is not None and server.sensitivity is not None
        f = flip_probability(server.epsilon_round, server.sensitivity.bits)
        if f >= NOISE_FLIP_PROBABILITY and server.options.epsilon is not None \
                and not getattr(server.options, "mechanism_chosen", True):
            raise FedLabelsError(
                f"dp-fedct's default mechanism xor would flip each label bit with "
                f"probability {f:.4f} (a pure ε of {server.epsilon_round:.3g} per round, "
                f"the bound of one round's s* = {server.sensitivity.bits:g} bits; "
                f"{server.settings.rounds} round(s) at that pure ε compose to the (ε, δ) "
                f"total --epsilon {server.options.epsilon:g} at δ = "
                f"{server.delta:g} by the exact accountant, though their sum is "
                f"{server.epsilon_round * server.settings.rounds:.4g}): the shared labels "
                "would be noise and "
                "only hurt the clients' models. " + _choose_mechanism(server))

    def release(self, client: DPFedCTClient, message: Message,
                noise: dict[str, Any]) -> Message:
        from fedlabels.privacy.mechanisms import one_hot, pack_rows, xor_release

        client.receive_and_train(message)
        f = noise["flip_probability"]
        client.charge(self.release_event(client, noise))
        noisy = xor_release(one_hot(client.local_labels(), client.settings.n_classes), f,
                            client.noise_rng)
        return Message("dpfedct.bits", arrays={"bits": pack_rows(noisy)})

    def release_event(self, client: DPFedCTClient, noise: Mapping[str, Any]) -> Any:
        from fedlabels.privacy.events import XorEvent

        f, bits = noise["flip_probability"], client.sensitivity_bits()
        c, kept = client.settings.n_classes, min(f, 1.0 - f)  # f and 1 - f protect alike
        if not kept > 0.0:
            raise FedLabelsError(f"client {client.cid}: refusing a noiseless release (flip "
                                 f"probability {f!r}).")
        return XorEvent(bits * math.log((1 - kept) / kept), bits, kept,
                        len(client.public) * c)

    def round_config(self, server: DPFedCTServer) -> dict[str, Any]:
        from fedlabels.privacy.mechanisms import flip_probability

        assert server.epsilon_round is not None and server.sensitivity is not None
        return {"mechanism": "xor",
                "flip_probability": flip_probability(server.epsilon_round,
                                                     server.sensitivity.bits)}

    def collect(self, server: DPFedCTServer, replies: dict[int, Message],
                config: dict[str, Any]) -> np.ndarray:
        from fedlabels.privacy.mechanisms import bit_count_consensus, unpack_rows

        assert server.epsilon_round is not None and server.sensitivity is not None
        n, c = server.n_public, server.settings.n_classes
        f = config["flip_probability"]
        noisy = np.stack([unpack_rows(replies[cid].arrays["bits"], n, c)
                          for cid in sorted(replies)])
        if server._rng is None:
            server._rng = numpy_generator()
        return bit_count_consensus(noisy, f, server._rng, server.options.quorum)

    def round_events(self, server: DPFedCTServer, config: dict[str, Any],
                     cids: Sequence[int], replies: dict[int, Message] | None) -> list[Any]:
        from fedlabels.privacy.events import XorEvent

        assert server.epsilon_round is not None and server.sensitivity is not None
        return [XorEvent(server.epsilon_round, server.sensitivity.bits,
                         config["flip_probability"], server.n_public * server.settings.n_classes)]


class KaryMechanism(_RandomizedResponse):
    """k-ary randomized response per label."""

    name = "kary"
    summary = "k-ary randomized response"

    def own_noise(self, client: DPFedCTClient) -> dict[str, Any]:
        eps, sens = self.own_epsilon_round(client)
        return {"epsilon_per_label": eps / sens.labels}

    def client_noise(self, client: DPFedCTClient, config: Mapping[str, Any]) -> dict[str, Any]:
        return {"epsilon_per_label": refuse_less_noise(
            client, "epsilon_per_label", real(config, "epsilon_per_label", client.cid),
            client.own_noise()["epsilon_per_label"], noisier_above=False)}

    def release(self, client: DPFedCTClient, message: Message,
                noise: dict[str, Any]) -> Message:
        from fedlabels.privacy.mechanisms import kary_release

        client.receive_and_train(message)
        n_classes = client.settings.n_classes
        client.charge(self.release_event(client, noise))
        noisy_labels = kary_release(client.local_labels(), noise["epsilon_per_label"],
                                    n_classes, client.noise_rng)
        return Message("dpfedct.labels", arrays={"labels": pack_labels(noisy_labels,
                                                                       n_classes)})

    def release_event(self, client: DPFedCTClient, noise: Mapping[str, Any]) -> Any:
        from fedlabels.privacy.events import KaryRREvent

        n_classes, n = client.settings.n_classes, len(client.public)
        eps_label, labels = noise["epsilon_per_label"], math.ceil(client.sensitivity_bits() / 2)
        return KaryRREvent(labels * eps_label, labels, eps_label, n_classes, n)

    def round_config(self, server: DPFedCTServer) -> dict[str, Any]:
        assert server.epsilon_round is not None and server.sensitivity is not None
        return {"mechanism": "kary",
                "epsilon_per_label": server.epsilon_round / server.sensitivity.labels}

    def collect(self, server: DPFedCTServer, replies: dict[int, Message],
                config: dict[str, Any]) -> np.ndarray:
        # the plurality (or qualified majority) of the noisy votes, as in FedCT
        return server.consensus(server.collect_votes(replies))

    def round_events(self, server: DPFedCTServer, config: dict[str, Any],
                     cids: Sequence[int], replies: dict[int, Message] | None) -> list[Any]:
        from fedlabels.privacy.events import KaryRREvent

        assert server.epsilon_round is not None and server.sensitivity is not None
        return [KaryRREvent(server.epsilon_round, server.sensitivity.labels,
                            config["epsilon_per_label"], server.settings.n_classes,
                            server.n_public)]
