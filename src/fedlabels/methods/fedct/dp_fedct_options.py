"""DP-FedCT's declared options: the run's (ε, δ) budget, the mechanism and the sensitivity s*.

A module of its own so that ``dp_fedct.py`` holds only the roles and the method.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.limits import MAX_NEIGHBOURS, MAX_PARTS
from fedlabels.method.dpsgd_client import (
    DPSGD_OPTIONS,
    example_clip_option,
    example_rate_option,
    one_of_sigma_and_epsilon,
)
from fedlabels.method.options import (
    DP_SCALE,
    POSITIVE,
    PROBABILITY,
    STEPS,
    STEPS_OR_NONE,
    Interval,
    delta_option,
    option,
)
from fedlabels.methods.fedct.fedct import VoteOptions

MECHANISMS = ("xor", "kary", "dpsgd", "subsample-aggregate")
SENSITIVITY_SOURCES = ("worst", "empirical", "prop2")  # or a number of bits
#: the options that only one way of getting s* reads
_ONLY_WITH = {"prop2": ("stability_rate", "sensitivity_delta"),
              "empirical": ("sensitivity_neighbours", "sensitivity_relation",
                            "sensitivity_model", "sensitivity_steps"),
              "a number of bits": ("sensitivity_note",)}


def _sensitivity_spec(value: Any) -> Any:
    """A keyword in lower case, or a number of bits (numeric text becomes a float)."""
    if not isinstance(value, str):
        return value
    key = value.strip().lower()
    try:
        return float(key)
    except ValueError:
        return key


@dataclass(frozen=True)
class DPFedCTOptions(VoteOptions):
    epsilon: float | None = option(
        None, "total (ε, δ) budget of the whole run per client; the per-round ε is "
        "calibrated from it over the run's rounds (xor: exact accountant; kary: the "
        "tightest of its exact accountant and RDP) and every release is checked against "
        "it; give this or "
        "epsilon_per_round (dpsgd: or noise_multiplier)", kind=float, interval=DP_SCALE,
        nullable=True, flag=True)
    epsilon_per_round: float | None = option(
        None, "pure ε of one round's label release per client (no run target: the total is "
        "whatever the rounds compose to); give this or epsilon", kind=float,
        interval=DP_SCALE, nullable=True, flag=True)
    noise_multiplier: float | None = option(
        None, "dpsgd: DP-SGD's noise multiplier σ (noise std σ·C on each step's sum of "
        "clipped example gradients, each client adding its own; no run target: ε is what "
        "the steps spend); give this or epsilon", kind=float, interval=DP_SCALE,
        nullable=True, flag=True)
    delta: float = delta_option("δ of the (ε, δ) of the composition over rounds")
    mechanism: str = option(  # None becomes "xor" (__post_init__)
        None, "xor: bitwise randomized response on the one-hot rows; kary: k-ary randomized "
        "response per label; dpsgd: clients train with DP-SGD and share their DP models' "
        "labels; subsample-aggregate: each client's k teachers on disjoint parts of its data "
        "vote, the noisy argmax (GNMax) is shared; none: xor, unless at the run's total "
        "--epsilon its labels would be noise (flip probability >= 0.45): then the run asks "
        "for a choice "
        "(docs/privacy.md, Defaults)", kind=str, choices=MECHANISMS, nullable=True, flag=True)
    example_clip: float = example_clip_option("dpsgd")
    example_rate: float = example_rate_option("dpsgd")
    site_model: str = option(
        "dp", "dpsgd: which model a client keeps for its own predictions (what is "
        "evaluated). dp: its DP-SGD model, whose labels it shares (releasable). private: a "
        "second model trained as FedCT trains (all its private data and the consensus on U, "
        "without DP); never sent and not protected, while the shared labels come from a "
        "DP-SGD model trained on the private data alone", kind=str, choices=("dp", "private"))
    # the site's own model (dpsgd, site_model=private; fedlabels.methods.fedct.site_model)
    pseudo_weight: float = option(
        1.0, "site_model=private: loss weight of each consensus-labelled example of U in the "
        "site's own model (a private example weighs 1)", kind=float,
        interval=Interval(0.0, 100.0, "right"))
    pseudo_warmup: int = option(
        0, "site_model=private: rounds over which that weight ramps linearly from 0 to "
        "pseudo_weight (0: no ramp)", kind=int, interval=Interval(0, None))
    pseudo_filter: str = option(
        "none", "site_model=private: which consensus labels the site's own model trains on. "
        "none: every label the vote kept; agree: only those its own model predicts too",
        kind=str, choices=("none", "agree"))
    own_confidence: float | None = option(
        None, "site_model=private: where the consensus has no label (or pseudo_filter drops "
        "it), the site's own model labels U itself where its top class probability is at "
        "least this (self-training; none: never)", kind=float,
        interval=Interval(0.0, 1.0, "right"), nullable=True)
    finetune_steps: int = option(
        0, "site_model=private: plain steps of the site's own model on its private data "
        "alone after the last round's training (0: none)", kind=int,
        interval=STEPS_OR_NONE)
    labeller_lr: float | None = option(
        None, "site_model=private: Adam learning rate of the DP-SGD model whose labels a "
        "client shares (it trains apart from the site's own model; none: the model spec's "
        "own, e.g. mlp's 0.001). For mlp at ε = 8: 0.01 (docs/beyond_paper.md, DP)",
        kind=float, interval=Interval(0.0, 1.0, "right"), nullable=True)
    teachers: int = option(
        50, "subsample-aggregate: k teachers per client, each trained on one of k disjoint "
        "parts of its private data (at most 1,000,000: one per record at most)", kind=int,
        interval=Interval(2, MAX_PARTS))
    teacher_steps: int | None = option(
        None, "subsample-aggregate: training steps of each (fresh) torch teacher per round; "
        "none: period", kind=int, interval=STEPS, nullable=True)
    label_queries: int | None = option(
        100, "subsample-aggregate: points of U each client labels per round (a seeded "
        "subset, at most |U|; earlier rounds' consensus kept elsewhere; σ grows with the "
        "labels released over the run); none: all of U", kind=int,
        interval=Interval(1, None), nullable=True)
    data_dependent: bool = option(
        False, "subsample-aggregate: clients also send the data-dependent RDP of their votes "
        "(reported beside the guarantee; not itself DP, sent outside it)", kind=bool)
    sensitivity: str | float = option(
        "worst", "Hamming sensitivity s* in bits: worst (2|U|: formal, protects a client's "
        "whole dataset), empirical (estimated before round 1), prop2 (a heuristic from "
        "stability_rate) or a number of bits in (0, 2|U|]; all but worst make the guarantee "
        "conditional on s*",
        kind=(str, float), interval=POSITIVE, flag=True, convert=_sensitivity_spec)
    stability_rate: float | None = option(
        None, "prop2 (heuristic): the learner's on-average-replace-one stability rate ε(n)",
        kind=float,
        interval=PROBABILITY, nullable=True)
    sensitivity_delta: float | None = option(
        None, "prop2 (heuristic): the binomial quantile's failure probability; none: delta",
        kind=float, interval=PROBABILITY, nullable=True)
    sensitivity_neighbours: int = option(
        50, "empirical: records per client whose neighbouring datasets are retrained (at "
        "most its number of records, and 100,000: each is a retraining)", kind=int,
        interval=Interval(1, MAX_NEIGHBOURS))
    sensitivity_relation: str = option(
        "both", "empirical: a neighbour removes one record (remove), replaces its label "
        "(replace), or both neighbours of each record are measured (both)",
        kind=str, choices=("remove", "replace", "both"))
    sensitivity_model: str = option(
        "", "empirical: the model spec to estimate with; empty: each client's own learner",
        kind=str)
    sensitivity_steps: int | None = option(
        None, "empirical: training steps of a torch learner; none: period", kind=int,
        interval=STEPS, nullable=True)
    sensitivity_note: str = option(
        "", "where a given number of bits came from (kept in the result)", kind=str)

    def __post_init__(self) -> None:
        # whether the mechanism was chosen or is the default xor (which refuses a budget at
        # which its labels would be noise; methods/fedct/mechanisms/randomized_response.py)
        object.__setattr__(self, "mechanism_chosen", self.mechanism is not None)
        if self.mechanism is None:
            object.__setattr__(self, "mechanism", "xor")

    def given(self) -> dict[str, Any]:
        given = super().given()
        if not getattr(self, "mechanism_chosen", True):
            given.pop("mechanism", None)
        return given

    def check(self) -> None:
        super().check()
        self._check_trained_mechanisms()
        if self.mechanism != "dpsgd" and (self.epsilon is None) == \
                (self.epsilon_per_round is None):
            raise FedLabelsError("dp-fedct needs exactly one of epsilon (the total (ε, δ) "
                                 "budget of the run, e.g. --epsilon 8) and epsilon_per_round "
                                 "(pure ε of each round's release, e.g. --epsilon-per-round 1); "
                                 "in Python: fl.run(..., options={'epsilon': 8}).")
        unused = [n for n in (*SITE_MODEL_OPTIONS, *LABELLER_OPTIONS) if n in self.given()]
        if unused and self.site_model != "private":
            raise FedLabelsError(f"dp-fedct option(s) {', '.join(unused)} shape the site's own "
                                 "model or its separate DP-SGD labeller and apply only with "
                                 f"--opt site_model=private; got site_model {self.site_model!r}.")
        source = self.sensitivity
        if isinstance(source, str) and source not in SENSITIVITY_SOURCES:
            raise FedLabelsError(f"dp-fedct option sensitivity must be worst, empirical, prop2 "
                                 f"or a number of bits, got {source!r}.")
        if source == "prop2" and self.stability_rate is None:
            raise FedLabelsError("sensitivity prop2 needs the learner's stability rate: "
                                 "--opt stability_rate=0.01 (and --opt sensitivity_delta=1e-3; "
                                 "default: delta).")
        used = source if isinstance(source, str) else "a number of bits"
        given = self.given()
        for needs, names in _ONLY_WITH.items():
            unused = [n for n in names if n in given and needs != used]
            if unused:
                raise FedLabelsError(f"dp-fedct option(s) {', '.join(unused)} apply only with "
                                     f"sensitivity {needs}; got sensitivity {source!r}.")
        if self.sensitivity_model:
            from fedlabels.learners import parse_model_spec

            if len(parse_model_spec(self.sensitivity_model)) != 1:
                raise FedLabelsError(f"dp-fedct option sensitivity_model must be one model "
                                     f"spec, got {self.sensitivity_model!r}.")


    def _check_trained_mechanisms(self) -> None:
        """dpsgd and subsample-aggregate need a total ε and no s*; their options only them."""
        given = self.given()
        for mechanism, (own, why) in _TRAINED_MECHANISMS.items():
            if self.mechanism != mechanism:
                unused = [n for n in own if n in given]
                if unused:
                    raise FedLabelsError(f"dp-fedct option(s) {', '.join(unused)} apply only "
                                         f"with --mechanism {mechanism}; got mechanism "
                                         f"{self.mechanism!r}.")
                continue
            sigma = " or --noise-multiplier σ" if mechanism == "dpsgd" else ""
            if self.epsilon_per_round is not None or (self.epsilon is None and not sigma):
                raise FedLabelsError(f"dp-fedct --mechanism {mechanism} needs the total budget "
                                     f"--epsilon (σ is calibrated to the whole run){sigma}, "
                                     "not --epsilon-per-round.")
            if sigma:
                one_of_sigma_and_epsilon("dp-fedct --mechanism dpsgd", self.noise_multiplier,
                                         self.epsilon)
            unused = [n for n in _SENSITIVITY_OPTIONS if n in given]
            if unused:
                raise FedLabelsError(f"dp-fedct option(s) {', '.join(unused)} do not apply to "
                                     f"--mechanism {mechanism} ({why}); drop them.")


_SA_ONLY = ("teachers", "teacher_steps", "label_queries", "data_dependent")
#: options that shape only the site's own (private, never sent) model
SITE_MODEL_OPTIONS = ("pseudo_weight", "pseudo_warmup", "pseudo_filter", "own_confidence",
                      "finetune_steps")
#: options of the separate DP-SGD model whose labels a site_model=private client shares
LABELLER_OPTIONS = ("labeller_lr",)
#: mechanisms that train the shared labels' models privately: their own options, and why
#: they have no label sensitivity s*
_TRAINED_MECHANISMS = {
    "dpsgd": ((*DPSGD_OPTIONS, "noise_multiplier", "site_model", *SITE_MODEL_OPTIONS,
               *LABELLER_OPTIONS),
              "it has no label sensitivity s*: DP-SGD clips "
                                              "each example's gradient instead"),
    "subsample-aggregate": (_SA_ONLY, "its sensitivity is one teacher vote, L2 √2, not s*"),
}
_SENSITIVITY_OPTIONS = ("sensitivity", *sorted({n for names in _ONLY_WITH.values()
                                                for n in names}))

#: what every DP-FedCT guarantee assumes, besides the sensitivity (stated per run)


def planned_sensitivity(opts: DPFedCTOptions, n_public: int) -> Any:
    """s* as these options fix it (``worst``, ``prop2`` or a number of bits); None for
    ``empirical``, which needs the clients' data. Server and clients compute it alike."""
    from fedlabels.privacy.sensitivity import resolve_sensitivity

    delta = opts.delta if opts.sensitivity_delta is None else opts.sensitivity_delta
    return resolve_sensitivity(opts.sensitivity, n_public, stability_rate=opts.stability_rate,
                               delta=delta, note=opts.sensitivity_note)
