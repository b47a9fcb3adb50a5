"""What a reader must know before trusting a run's figure: an interrupted or extended run,
accuracy within noise of the majority-class baseline, or below the local-only reference;
and what the run disclosed that the user may not have chosen to (a regression target range
taken from the data).

Each function returns plain sentences; the CLI prints them as warnings and the report
shows them beside the table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fedlabels.core.class_names import shown_names_of

if TYPE_CHECKING:
    from fedlabels.results.run_result import RunResult


def rounds_status(res: RunResult) -> str | None:
    """``interrupted after round 1 of 12`` / ``extended from 10 to 20 rounds`` / ``None``
    for a run that ran the rounds it planned."""
    planned = res.config.get("rounds")
    done = res.rounds[-1].round if res.rounds else 0
    stopped_early = "rounds_run" in res.extra  # a one-shot method: said why in the result
    if res.extra.get("interrupted") or (isinstance(planned, int) and done < planned
                                        and not stopped_early):
        return f"interrupted after round {done} of {planned}"
    resumed = (res.extra.get("provenance") or {}).get("resumed") or []
    extended = [r for r in resumed if r.get("rounds_planned", 0)
                > r.get("rounds_planned_before", 0)]
    if extended:
        return (f"extended from {extended[0]['rounds_planned_before']} to "
                f"{extended[-1]['rounds_planned']} rounds")
    return None


def majority_baseline(res: RunResult) -> dict[str, Any] | None:
    """The majority-class baseline's test accuracy and its 95 % half-width: from the run's
    ``clinical`` entry, else estimated from the training class counts and the test size."""
    clinical = res.extra.get("clinical") or {}
    names = shown_names_of(res.federation)
    recorded = clinical.get("baseline")
    if isinstance(recorded, dict) and isinstance(recorded.get("class"), int) and all(
            isinstance(recorded.get(k), int | float) for k in ("accuracy", "half_width_95")):
        base = dict(recorded)  # else (a damaged entry: a KeyError was raised) estimated
        if base["class"] < len(names):
            base["name"] = names[base["class"]]
        return base
    counts = [sum(col) for col in zip(*(res.federation.get("client_class_counts") or []),
                                      strict=True)]
    n_test = res.federation.get("n_test")
    if not counts or not sum(counts) or not n_test:
        return None
    k = max(range(len(counts)), key=counts.__getitem__)
    p = counts[k] / sum(counts)
    return {"class": k, "name": names[k] if k < len(names) else str(k), "accuracy": p,
            "half_width_95": 1.96 * math.sqrt(max(p * (1 - p), 1e-12) / n_test),
            "estimated": True}


def training_mean_baseline(res: RunResult) -> dict[str, Any] | None:
    """A regression run's constant predictor of the pooled private training targets' mean:
    its ``mean``, test ``rmse`` and ``r2`` as the run recorded them (``clinical.baseline``);
    ``None`` for a classification run and for a result without it (one written before
    2026-11-29)."""
    if res.federation.get("task") != "regression":
        return None
    recorded = (res.extra.get("clinical") or {}).get("baseline")
    if isinstance(recorded, dict) and all(isinstance(recorded.get(k), int | float)
                                          and not isinstance(recorded.get(k), bool)
                                          for k in ("mean", "rmse", "r2")):
        return dict(recorded)
    return None


def _confusion_matrices(clinical: dict[str, Any]) -> np.ndarray | None:
    """The clients' confusion matrices of a ``clinical`` entry (clients, C, C), or ``None``
    where it has none or a damaged one."""
    matrices = clinical.get("confusion_matrices") or []
    if not matrices:
        return None
    try:
        cms = np.asarray(matrices, dtype=float)
    except (TypeError, ValueError):
        return None
    return cms if cms.ndim == 3 and cms.shape[1] == cms.shape[2] else None


def constant_balanced_accuracy(res: RunResult) -> float | None:
    """The balanced accuracy every constant answer (the majority class's included) scores on
    the run's test set: 1/C for its C classes present, from the clients' confusion matrices
    (``None`` without them, or for fewer than two classes)."""
    cms = _confusion_matrices(res.extra.get("clinical") or {})
    if cms is None:
        return None
    present = int((cms[0].sum(axis=1) > 0).sum())
    return 1.0 / present if present >= 2 else None


def balanced_above_chance(clinical: dict[str, Any] | None
                          ) -> tuple[float, float, float] | None:
    """(mean balanced accuracy, its 95 % half-width, chance) where the clients' mean
    balanced accuracy lies clearly above chance, 1/C for the C classes of the test set
    (what any constant answer scores, the majority class's included), else ``None``.
    The half-width is Wald's of a mean of C recalls, each over its class's test rows
    (the clients' mean recall of each class, from their confusion matrices)."""
    clinical = clinical or {}
    ba = ((clinical.get("metrics") or {}).get("balanced_accuracy") or {}).get("mean")
    cms = _confusion_matrices(clinical)
    if not isinstance(ba, int | float) or cms is None:
        return None
    support = cms[0].sum(axis=1)  # every client is scored on the same test set
    present = support > 0
    if present.sum() < 2:
        return None
    recalls = (np.diagonal(cms, axis1=1, axis2=2)[:, present] / support[present]).mean(axis=0)
    c = int(present.sum())
    half = 1.96 * math.sqrt(float(np.sum(recalls * (1 - recalls) / support[present]))) / c
    chance = 1.0 / c
    return (float(ba), half, chance) if ba - half > chance else None


def classes_imbalanced(res: RunResult) -> bool:
    """Whether the run's majority class is clearly commoner than 1/C of its C classes: the
    majority-class baseline's accuracy less its 95 % half-width above 1/C (the test set's
    classes, from the confusion matrices; else the training classes')."""
    base = majority_baseline(res)
    chance = constant_balanced_accuracy(res)
    if chance is None:
        counts = [sum(col) for col in zip(*(res.federation.get("client_class_counts") or []),
                                          strict=True)]
        present = sum(1 for n in counts if n)
        chance = 1.0 / present if present >= 2 else None
    return (base is not None and chance is not None
            and float(base["accuracy"]) - float(base["half_width_95"]) > chance)


def chance_warning(accuracy: float | None, baseline: dict[str, Any] | None,
                   clinical: dict[str, Any] | None = None,
                   imbalanced: bool | None = None) -> str | None:
    """A sentence when ``accuracy`` is not clearly above the majority-class baseline; it
    says the models learnt next to nothing only where the balanced accuracy of the run's
    ``clinical`` entry is not clearly above chance either (on imbalanced classes a model
    that finds the rare class scores below the majority class's accuracy). Its advice is
    worded by ``imbalanced`` (:func:`classes_imbalanced`; ``None``: not known)."""
    if accuracy is None or baseline is None:
        return None
    base, half = float(baseline["accuracy"]), float(baseline["half_width_95"])
    if accuracy > base + half:
        return None
    how = "below" if accuracy < base - half else "within noise of"
    source = " (estimated from the training classes)" if baseline.get("estimated") else ""
    text = (f"mean accuracy {accuracy:.3f} is {how} the majority-class baseline {base:.3f} "
            f"± {half:.3f}{source}, which always answers {baseline.get('name')!r}")
    learnt = balanced_above_chance(clinical)
    if learnt is None:
        return f"{text}: the models learnt next to nothing"
    ba, ba_half, chance = learnt
    trade = (", and trade accuracy on the commonest class for the others" if how == "below"
             else "")
    if imbalanced is False:
        advice = ("the classes are balanced, so balanced accuracy reads as accuracy does, "
                  "with an interval of the models' own recalls")
    else:
        advice = ("on imbalanced classes " if imbalanced else "") + (
            "judge them by balanced accuracy, AUROC, sensitivity and specificity")
    return (f"{text}, but their balanced accuracy {ba:.3f} ± {ba_half:.3f} is above chance, "
            f"{chance:.3f}: they learnt{trade}; {advice} (--metric balanced_accuracy; "
            "Python: result.clinical)")


def learnt_next_to_nothing(res: RunResult) -> bool:
    """Whether the run's caveats say its models learnt next to nothing: its mean accuracy
    not clearly above the majority-class baseline nor its balanced accuracy above chance
    (:func:`chance_warning`), or a regression run's RMSE not below the training mean's."""
    final = res.final or {}
    if res.federation.get("task") == "regression":
        return regression_warning(final.get("mean_rmse"), final.get("mean_r2"),
                                  training_mean_baseline(res)) is not None
    clinical = res.extra.get("clinical")
    return (chance_warning(final.get("mean_accuracy"), majority_baseline(res), clinical)
            is not None and balanced_above_chance(clinical) is None)


def regression_warning(rmse: float | None, r2: float | None,
                       baseline: dict[str, Any] | None) -> str | None:
    """A sentence when the mean test RMSE is not below the training-mean baseline's (the
    line ``fedlabels plot`` and the report draw: :func:`training_mean_baseline`); for a
    result without it (written before 2026-11-29), when the mean R² is ≤ 0, no better than
    the test targets' own mean."""
    if baseline is None:
        if r2 is None or r2 > 0:
            return None
        return f"mean R² {r2:.3f} ≤ 0: no better than predicting the test targets' own mean"
    if rmse is None or rmse < baseline["rmse"]:
        return None
    return (f"mean RMSE {rmse:.4g} is not below the training-mean baseline's "
            f"{baseline['rmse']:.4g} (R² {baseline['r2']:.3f}), which always predicts the mean "
            f"of the pooled private training targets, {baseline['mean']:.4g}: the models "
            "learnt next to nothing")


def run_warnings(res: RunResult) -> list[str]:
    """Every caveat of one run, as sentences."""
    out = []
    status = rounds_status(res)
    if status is not None:
        out.append(f"{status}: the figures are those of the last evaluated round"
                   if status.startswith("interrupted") else status)
    final = res.final or {}
    if res.federation.get("task") == "regression":
        for line in (regression_warning(final.get("mean_rmse"), final.get("mean_r2"),
                                        training_mean_baseline(res)),
                     table_range_warning(res.federation)):
            if line:
                out.append(line)
    else:
        for line in (chance_warning(final.get("mean_accuracy"), majority_baseline(res),
                                    res.extra.get("clinical"), classes_imbalanced(res)),
                     absent_class_warning(res.federation)):
            if line:
                out.append(line)
    line = delta_warning(res.extra.get("privacy") or {}, res.federation)
    if line:
        out.append(line)
    for line in (lost_clients_warning(res), declined_evaluation_warning(res),
                 site_ledgers_warning(res), undecoded_rounds_warning(res)):
        if line:
            out.append(line)
    return out


def site_ledgers_warning(res: RunResult) -> str | None:
    """A sentence when the Flower sites' own ledgers (``privacy.site_ledgers``: reported by
    the sites, not verified by the coordinator) disagree with the coordinator's accounting
    or a site reported nothing."""
    block = (res.extra.get("privacy") or {}).get("site_ledgers") or {}
    flags = block.get("disagreements") or []
    if not flags:
        return None
    return ("the sites' own ledgers (reported by the sites, not verified by the coordinator) "
            "disagree with the coordinator's privacy figures: " + "; ".join(map(str, flags)))


#: partitions that split by label: a client without a class is what they were asked for
LABEL_SKEW_PARTITIONS = ("dirichlet", "shards")


#: classes an absent-class warning describes (the most often absent first); the rest are
#: named, up to ABSENT_NAMED more, and counted
ABSENT_SHOWN = 3
ABSENT_NAMED = 5
#: longest class name shown in it (a longer one is cut, with …)
ABSENT_NAME_CHARS = 24


def absent_class_warning(federation: dict[str, Any]) -> str | None:
    """A sentence when a partition that does not split by label (iid, quantity, a site
    column) left clients without any example of a class (a rare class, small clients): a
    client's own model cannot predict it, which the accuracy alone does not show. The
    :data:`ABSENT_SHOWN` classes absent at the most clients are described, a few more named
    and the rest counted, so 26 classes make one short line (it was 1.5 kB)."""
    counts = federation.get("client_class_counts") or []
    partition = str(federation.get("partition") or "")
    if not counts or partition.partition(":")[0] in LABEL_SKEW_PARTITIONS:
        return None
    table = np.asarray(counts)
    if table.ndim != 2 or not (table == 0).any():
        return None
    names = shown_names_of(federation)

    def name(c: int) -> str:
        text = names[c] if c < len(names) else str(c)
        return repr(text if len(text) <= ABSENT_NAME_CHARS
                    else text[:ABSENT_NAME_CHARS - 1] + "…")

    lacking = (table == 0).sum(axis=0)  # clients without each class; the worst first:
    absent = sorted(map(int, np.flatnonzero(lacking)), key=lambda c: (-lacking[c], c))
    parts = [f"{name(c)} at {int(lacking[c])} of {len(table)} clients "
             f"({int(table[:, c].sum())} example(s) in all their data)"
             for c in absent[:ABSENT_SHOWN]]
    rest = absent[ABSENT_SHOWN:]
    if rest:
        named = ", ".join(name(c) for c in rest[:ABSENT_NAMED])
        more = len(rest) - ABSENT_NAMED
        parts.append(f"also absent: {named}{f', … ({more} more)' if more > 0 else ''}")
    which = ("a class is" if len(absent) == 1
             else f"{len(absent)} of {table.shape[1]} classes are")
    return (f"{which} absent from clients' data (partition {partition or '?'}): "
            f"{'; '.join(parts)}; a client's own model cannot predict a class it never "
            "saw, only what the others teach it can (fewer clients or more data per client "
            "avoid it)")


def table_range_warning(federation: dict[str, Any]) -> str | None:
    """A sentence when a regression run's target range was taken from the table (no
    ``--target-range``): the range is public to every party, so it discloses the smallest
    and largest target, which may be private clients' records."""
    bounds = federation.get("target_range")
    if federation.get("target_range_source") != "table" or not bounds:
        return None
    lo, hi = bounds
    return (f"the target range [{lo:g}, {hi:g}] was taken from the data (its smallest and "
            "largest target, test rows included) and is shared with every party, so it "
            "discloses those two targets; declare a documented range with --target-range "
            "LO,HI (Python: target_range=(LO, HI))")


def sites_declining_evaluation(res: RunResult) -> int:
    """How many Flower sites declined evaluation (node config ``evaluate=false``) in the
    round where most did; 0 when none did."""
    return int(max((r.server.get("evaluation_declined", 0) for r in res.rounds), default=0))


def declined_evaluation_warning(res: RunResult) -> str | None:
    """A sentence when Flower sites declined evaluation (node config ``evaluate=false``):
    the accuracy is the other sites', or there is none."""
    declined = sites_declining_evaluation(res)
    if not declined:
        return None
    total = res.federation.get("n_clients") or res.config.get("clients")
    if res.final is None:
        return (f"every site ({declined}) declined evaluation (node config evaluate=false): "
                "the run has no accuracy")
    of = f" of {total}" if isinstance(total, int) else ""
    return (f"{declined}{of} site(s) declined evaluation (node config evaluate=false): the "
            "accuracy is the other sites'")


def undecoded_rounds_warning(res: RunResult) -> str | None:
    """A sentence when rounds of a run under secure aggregation (DP-FedAvg ``aggregation
    secure``) decoded no sum, so the global model did not move in them: the group that
    answered was below ``min_group``, or members dropped out in every attempt or once the
    clients' ``retries`` were spent."""
    privacy = res.extra.get("privacy") or {}
    decoded = privacy.get("decoded_group_per_round")
    if not isinstance(decoded, list) or all(decoded):
        return None
    skipped = [i + 1 for i, size in enumerate(decoded) if not size]
    shown = ", ".join(map(str, skipped[:8])) + (", ..." if len(skipped) > 8 else "")
    which = f"round{'s' if len(skipped) > 1 else ''} {shown}"
    return (f"{len(skipped)} of {len(decoded)} rounds ({which}) decoded no sum under "
            "secure aggregation, so the global model did not change in them: fewer clients "
            f"answered than min_group = {privacy.get('min_group')}, or a member dropped out "
            "in every attempt or once the clients' retried attempts (retries = "
            f"{privacy.get('retries', 0)}) were spent; a smaller --opt min_group lets smaller "
            "groups through (each client's noise share grows to keep ε), --opt retries=A "
            "lets A rounds be retried after a dropout (each a release)")


def lost_clients_warning(res: RunResult) -> str | None:
    """A sentence when a run lost clients (a deployment's site that left, a client of any
    engine whose reply was malformed): the final figures are the others'."""
    lost = res.extra.get("lost") or (res.extra.get("deployment") or {}).get("lost") or {}
    if not lost:
        return None
    total = res.federation.get("n_clients") or res.config.get("clients")
    which = ", ".join(f"client {cid} in round {info.get('round', '?')}"
                      for cid, info in sorted(lost.items(), key=lambda kv: int(kv[0])))
    left = f"{total - len(lost)} of {total}" if isinstance(total, int) else "the remaining"
    return (f"lost {which}: the final figures are those of the {left} clients left (the "
            "bytes per client count the lost ones' rounds as zero)")


def delta_warning(privacy: dict[str, Any], federation: dict[str, Any]) -> str | None:
    """A sentence when a run's δ is not below 1/n, n the units its neighbouring relation
    counts (the smallest client's records; the clients): an (ε, δ) guarantee then allows
    releasing one of them in the clear."""
    delta = privacy.get("delta")
    relation = str(privacy.get("neighbouring") or "")
    if privacy.get("guarantee") not in ("formal", "conditional") or not delta:
        return None
    if relation.startswith("record-level") and federation.get("client_sizes"):
        n, units = min(federation["client_sizes"]), "records of the smallest client"
    elif relation.startswith("client-level") and federation.get("n_clients"):
        n, units = federation["n_clients"], "clients"
    else:
        return None
    if float(delta) * n < 1:
        return None
    return (f"δ = {float(delta):g} is not below 1/n = 1/{n} ({n} {units}): an (ε, δ) "
            "guarantee with such a δ allows a mechanism that publishes one of them in the "
            "clear; choose δ well below 1/n (the default is 1e-5)")


def below_reference(accuracy: float | None, reference: float | None, what: str, *,
                    n_test: int | None = None,
                    differences: Sequence[float] | None = None) -> str | None:
    """A sentence when a collaborative run is below its local-only reference.

    It says the clients were made worse only when the gap is beyond noise: the 95 %
    interval of the difference lies below 0. With two or more ``differences`` (run minus
    reference, paired by seed) that is the t-interval of their mean; else, with the test
    set's size ``n_test``, the two accuracies' binomial (Wald) interval, unpaired, so wide
    where the two share a test set. Without either the gap is stated without that claim.
    """
    from fedlabels.core.intervals import normal_quantile, t_half_width

    if accuracy is None or reference is None or accuracy >= reference:
        return None
    head = f"mean accuracy {accuracy:.3f} is below the local-only reference {reference:.3f} " \
           f"({what})"
    if differences is not None and len(differences) >= 2:
        d = np.asarray(differences, dtype=float)
        half = t_half_width(d)
        gap, how = float(d.mean()), f"over {d.size} paired seeds"
    elif n_test:
        half = float(normal_quantile(0.975) * math.sqrt(
            (accuracy * (1 - accuracy) + reference * (1 - reference)) / n_test))
        gap, how = accuracy - reference, f"binomial, {n_test} test records"
    else:
        return f"{head}: collaborating did not help here (no measure of noise)"
    interval = f"95 % interval of the difference [{gap - half:+.3f}, {gap + half:+.3f}], {how}"
    if gap + half < 0:
        return f"{head}: collaborating made the clients worse ({interval})"
    return f"{head}, within noise ({interval}): no evidence that collaborating helped"
