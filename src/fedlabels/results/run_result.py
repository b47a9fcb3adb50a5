"""Run results: per-round records, the JSON/CSV they are written to, and summary rows.

Files are written atomically (temporary file in the same directory, then ``os.replace``), so an
interrupted write never leaves a truncated result behind.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast, overload

import numpy as np

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.files import (
    PICKLED_MODELS,
    RUN_SIBLINGS,
    refuse_special_file,
    write_atomic,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    import pandas as pd

    from fedlabels.data.federation import IntLike
    from fedlabels.data.preprocessing import Preprocessing


class PredictProba(Protocol):
    """What :attr:`RunResult.predict_proba` is: ``predict_proba(X_raw, client=None)``."""

    def __call__(self, X_raw: Any, client: IntLike | None = None) -> np.ndarray: ...


@dataclass
class RoundRecord:
    """What happened in one communication round."""

    round: int
    # the schedule's steps so far, round × period, for iterative learners (a method's extra
    # steps, e.g. FedCT's warm-up, and rounds a client sat out are not counted); None else
    local_steps: int | None
    accuracies: list[float] | None
    server: dict[str, float]
    bytes_up: list[int]
    bytes_down: list[int]
    seconds: float
    # partial participation (runs/participation.py): the clients selected this round and
    # those whose reply reached the server; None: every client took part
    participants: list[int] | None = None
    replied: list[int] | None = None
    # regression: per-client test RMSE (original units) and R²; accuracies None
    rmse: list[float] | None = None
    r2: list[float] | None = None

    @property
    def evaluated(self) -> bool:
        """Whether the clients were evaluated this round (either task)."""
        return self.accuracies is not None or self.rmse is not None

    def accuracy_stats(self) -> dict[str, float] | None:
        if self.accuracies is None:
            return None
        a = np.asarray(self.accuracies)
        return {"mean": float(a.mean()), "std": float(a.std()), "min": float(a.min()),
                "max": float(a.max())}

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["accuracy"] = self.accuracy_stats()
        return out


class _ModelsOnFirstUse:
    """:attr:`RunResult.client_models`: a list, or (a run read by ``fl.load_run``) the
    function that decodes the models from its file, called when the attribute is first
    read; its list is then kept. A failed decoding raises each time, keeping the function."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = f"_{name}"

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> _ModelsOnFirstUse: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> list[Any]: ...

    def __get__(self, obj: object | None, owner: type | None = None
                ) -> list[Any] | _ModelsOnFirstUse:
        if obj is None:
            return self
        value = obj.__dict__[self.slot]
        if isinstance(value, _Decode):
            value = obj.__dict__[self.slot] = value.decode()
        return cast("list[Any]", value)

    def __set__(self, obj: object, value: Iterable[Any]) -> None:
        given: object = value
        obj.__dict__[self.slot] = [] if given is self else \
            value if isinstance(value, list) else list(value)

    def defer(self, obj: object, decode: Callable[[], list[Any]]) -> None:
        obj.__dict__[self.slot] = _Decode(decode)


@dataclass(frozen=True)
class _Decode:
    decode: Callable[[], list[Any]]


@dataclass
class RunResult:
    """The outcome of one run of one method (what :func:`fedlabels.run` returns and
    :func:`fedlabels.load_run` reads back).

    ``method``, ``dataset`` and ``seed`` name the run; ``config`` is its recorded
    configuration, ``federation`` the federation's summary (sizes, ``class_names``, ...),
    ``models`` each client's model spec, ``rounds`` a :class:`RoundRecord` per round,
    ``communication`` the bytes moved, ``wall_seconds`` its duration, and ``extra`` the
    result JSON's other entries (``privacy``, ``clinical``, ``provenance``, ...: read them
    as :attr:`privacy`, :attr:`clinical`, or :meth:`to_dict`). Kept in memory only, not in
    the JSON: ``client_models`` (the clients' final models), ``feature_names`` and
    ``preprocessing`` (raw rows to model inputs), which :meth:`predict` uses; a run read
    by ``load_run`` has them from its models file, its ``client_models`` decoded when first
    used (:meth:`decode_models_on_use`).
    """

    method: str
    dataset: str
    seed: int
    config: dict[str, Any]
    federation: dict[str, Any]
    models: list[str]
    rounds: list[RoundRecord]
    communication: dict[str, Any]
    wall_seconds: float
    extra: dict[str, Any] = field(default_factory=dict)
    # the clients' final models (in-process runs only; not written to JSON)
    client_models: _ModelsOnFirstUse = field(default=_ModelsOnFirstUse(), repr=False,
                                             compare=False)
    # the federation's feature names, for inspecting those models (not written to JSON)
    feature_names: Sequence[str] = field(default_factory=list, repr=False, compare=False)
    # raw features -> model inputs (fedlabels.results.predict; not written to JSON)
    preprocessing: Preprocessing | None = field(default=None, repr=False, compare=False)

    def decode_models_on_use(self, decode: Callable[[], list[Any]]) -> None:
        """Have :attr:`client_models` be ``decode()``, called when it is first read
        (``predict``, ``predict_proba``, ``score``, ``save`` or the attribute itself), not
        now: ``fl.load_run`` gives a run's figures without building its models."""
        type(self).client_models.defer(self, decode)

    def __getstate__(self) -> dict[str, Any]:
        """What ``pickle`` and ``copy`` take: the models decoded first (a function to decode
        them pickled as no object: a result of ``load_run`` could not be pickled)."""
        self.client_models  # noqa: B018 -- decoded now
        return dict(self.__dict__)

    def __repr__(self) -> str:
        """One line: what ran and how it ended (no arrays, no per-round records)."""
        f = self.final or {}
        if "mean_accuracy" in f:
            outcome = f"mean accuracy {f['mean_accuracy']:.4f}"
        elif "mean_rmse" in f:
            outcome = f"mean RMSE {f['mean_rmse']:.4g}, R² {f['mean_r2']:.3f}"
        else:
            outcome = "not evaluated"
        privacy = self.privacy
        eps = dp_epsilon(privacy)
        if eps is not None:  # a DP run: its guarantee
            outcome += (f"; ε = {eps:.4g}, δ = {privacy.get('delta', 0.0):g}, "
                        f"{privacy.get('guarantee', 'none')}")
        rounds = len(self.rounds)
        return (f"RunResult({self.method!r} on {self.dataset!r}, seed {self.seed}, "
                f"{rounds} round{'' if rounds == 1 else 's'}, {outcome})")

    @property
    def privacy(self) -> dict[str, Any]:
        """What the run guarantees, as the result JSON's ``privacy``: ``guarantee``
        (``formal``, ``conditional`` or ``none``, with ``reason``), whom it holds against
        (``guarantee_against``), the ``neighbouring`` relation and, for a DP run,
        ``epsilon`` and ``delta``; ``{}`` for a result that records none.
        :func:`privacy_line` writes it as ``fedlabels run`` prints it."""
        return dict(self.extra.get("privacy") or {})

    @property
    def clinical(self) -> dict[str, Any]:
        """The clients' final models on the test set, as the result JSON's ``clinical``
        (``metrics``, ``confusion_matrices``, ``baseline``, ...; docs/usage.md, 'Clinical
        metrics'); for a regression run only ``baseline``, the training-mean predictor's
        ``mean``, ``rmse`` and ``r2``; ``{}`` where none was recorded (a Flower deployment)."""
        return dict(self.extra.get("clinical") or {})

    @property
    def final_record(self) -> RoundRecord | None:
        """The last evaluated round (``None`` if a run was stopped before its first one)."""
        return next((r for r in reversed(self.rounds) if r.evaluated), None)

    @property
    def mean_accuracy(self) -> float:
        """The clients' mean test accuracy in the last evaluated round (``final``'s
        ``mean_accuracy``, typed ``float``); a one-line error for a run with none: not
        evaluated yet, or a regression (``final["mean_rmse"]``)."""
        from fedlabels.core.errors import FedLabelsError

        final = self.final
        if final is None:
            raise FedLabelsError(f"{self.method} on {self.dataset} has no evaluated round, so "
                                 "no accuracy; result.final is None.")
        if "mean_accuracy" not in final:
            raise FedLabelsError(f"{self.method} on {self.dataset} is a regression run: it has "
                                 "no accuracy; see result.final['mean_rmse'] and ['mean_r2'].")
        return float(final["mean_accuracy"])

    @property
    def final(self) -> dict[str, Any] | None:
        """Accuracies of the last evaluated round; ``None`` when nothing was evaluated."""
        rec = self.final_record
        if rec is None:
            return None
        if rec.rmse is not None:  # regression: RMSE (original units) and R²
            rmse, r2 = np.asarray(rec.rmse), np.asarray(rec.r2)
            return {"round": rec.round, "mean_rmse": float(rmse.mean()),
                    "std_rmse": float(rmse.std()), "mean_r2": float(r2.mean()),
                    "std_r2": float(r2.std()), "client_rmse": list(rec.rmse),
                    "client_r2": list(rec.r2 or [])}
        stats = rec.accuracy_stats() or {}
        out = {"round": rec.round, "mean_accuracy": stats["mean"],
               "std_accuracy": stats["std"], "min_accuracy": stats["min"],
               "max_accuracy": stats["max"], "client_accuracies": list(rec.accuracies or [])}
        bad = set((self.extra.get("malicious") or {}).get("clients") or [])
        if bad:  # --malicious: the honest clients' accuracy (clients are in id order)
            honest = [a for c, a in enumerate(rec.accuracies or []) if c not in bad]
            out["honest_mean_accuracy"] = float(np.mean(honest)) if honest else None
        return out

    def predict(self, X_raw: Any, client: IntLike | None = None) -> np.ndarray:
        """Labels the clients' final models give ``X_raw``, raw rows laid out like the
        training data (the majority vote of all clients, or ``client``'s model; for a
        regression run the targets in their units, the median over the clients); see
        :mod:`fedlabels.results.predict`.
        """
        from fedlabels.results.predict import predict

        self._check_models()
        return predict(self.client_models, self.preprocessing, X_raw, client)

    @property
    def predict_proba(self) -> PredictProba:
        """``predict_proba(X_raw, client=None)``: per row, the share of the clients whose
        final model votes for each class, columns in the order of :attr:`classes_` (rows sum
        to 1; with ``client``, that client's vote: a 1 in its class's column). These are vote
        shares, not calibrated probabilities: with 5 clients they are multiples of 0.2. As
        in scikit-learn, :meth:`predict` is ``classes_[predict_proba(X).argmax(axis=1)]``,
        a tie going to the first class of ``classes_``. A regression run has none (an
        ``AttributeError``, so ``hasattr`` says so)."""
        if self._is_regression():
            raise AttributeError("a regression run has no predict_proba; result.predict(X) "
                                 "gives its targets.")
        return self._predict_proba

    def _predict_proba(self, X_raw: Any, client: IntLike | None = None) -> np.ndarray:
        from fedlabels.results.predict import predict_proba

        self._check_models()
        return predict_proba(self.client_models, self.preprocessing, X_raw, client)

    def score(self, X_raw: Any, y: Any, sample_weight: Any = None,
              client: IntLike | None = None) -> float:
        """As scikit-learn's ``score``: the accuracy of :meth:`predict` on ``X_raw`` against
        the labels ``y`` (a regression run: R², ``r2_score``'s, 1.0 or 0.0 for a constant
        ``y`` as it gives), weighted by ``sample_weight``; ``client`` as in :meth:`predict`."""
        from fedlabels.results.scores import accuracy, r2

        pred = self.predict(X_raw, client)
        return r2(y, pred, sample_weight) if self._is_regression() else \
            accuracy(y, pred, sample_weight)

    def _is_regression(self) -> bool:
        prep = self.preprocessing
        return self.federation.get("task") == "regression" or (
            prep is not None and prep.target_range is not None)

    def _check_models(self) -> None:
        note = self.extra.get("no_models")
        if note and not self.client_models:
            raise FedLabelsError(f"cannot predict: {note}.")

    @property
    def classes_(self) -> np.ndarray:
        """The class labels, as :meth:`predict` returns them and in the order of the class
        codes (sorted, as scikit-learn's ``classes_``): ints for int labels, strings for
        strings (``federation["class_names"]`` holds them as text); for
        ``confusion_matrix(y, result.predict(X), labels=result.classes_)``. A regression
        run has none, and a run read without its models file lacks the labels' type:
        both an ``AttributeError``, so ``hasattr`` says so."""
        prep = self.preprocessing
        if self._is_regression():
            raise AttributeError("a regression run has no classes_; it predicts targets.")
        if prep is None or not prep.class_names:
            raise AttributeError("classes_ needs the run's preprocessing: read the run with "
                                 "its models file, fl.load_run(PATH) (not models=False); "
                                 "federation['class_names'] holds the labels as text.")
        return prep.class_values()

    @property
    def n_features_in_(self) -> int:
        """The number of raw columns :meth:`predict` takes, as scikit-learn's: a DataFrame's
        columns as trained (before one-hot encoding; not a ``column:NAME`` partition's), an
        array's columns. A text or image-file run, and one read without its models file,
        have none: an ``AttributeError``, so ``hasattr`` says so."""
        prep = self._input_preprocessing("n_features_in_")
        return len(prep.columns) if prep.columns is not None else len(prep.feature_names)

    @property
    def feature_names_in_(self) -> np.ndarray:
        """The raw column names :meth:`predict` matches a DataFrame's by, as
        scikit-learn's: for a run trained on a DataFrame or a table; none (an
        ``AttributeError``) for one on an array, as an estimator fitted on one has none."""
        prep = self._input_preprocessing("feature_names_in_")
        if prep.columns is None:
            raise AttributeError("feature_names_in_: this run was trained on an array, "
                                 "whose columns have no names (n_features_in_ counts them).")
        return np.asarray(prep.columns, dtype=object)

    def _input_preprocessing(self, attr: str) -> Preprocessing:
        prep = self.preprocessing
        if prep is None:
            raise AttributeError(f"{attr} needs the run's preprocessing: read the run with "
                                 "its models file, fl.load_run(PATH) (not models=False).")
        if prep.text or prep.image is not None:
            raise AttributeError(f"a run on {'text' if prep.text else 'image files'} has no "
                                 f"{attr}: its inputs are not columns.")
        return prep

    def bytes_up_per_round(self) -> list[list[int]]:
        """Protocol bytes uploaded: one list over rounds per client."""
        return [list(col) for col in zip(*(r.bytes_up for r in self.rounds), strict=True)]

    def bytes_down_per_round(self) -> list[list[int]]:
        """Protocol bytes downloaded: one list over rounds per client."""
        return [list(col) for col in zip(*(r.bytes_down for r in self.rounds), strict=True)]

    def communication_rounds(self) -> int:
        """Rounds in which any protocol bytes moved (up or down); rounds that exchanged
        nothing (a one-shot method's student steps, re-evaluations) are not counted."""
        return sum(1 for r in self.rounds if any(r.bytes_up) or any(r.bytes_down))

    def mean_bytes_up_per_client_round(self) -> float:
        """Mean protocol bytes a client uploaded per communication round (0 if none)."""
        ups = np.asarray([r.bytes_up for r in self.rounds
                          if any(r.bytes_up) or any(r.bytes_down)], dtype=float)
        return float(ups.mean()) if ups.size else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The whole result as its JSON holds it (what :meth:`save_json` writes)."""
        comm = dict(self.communication)
        comm["bytes_up_per_round"] = self.bytes_up_per_round()
        comm["bytes_down_per_round"] = self.bytes_down_per_round()
        comm["communication_rounds"] = self.communication_rounds()
        comm["mean_bytes_up_per_client_per_round"] = self.mean_bytes_up_per_client_round()
        return _clean({
            "method": self.method,
            "dataset": self.dataset,
            "seed": self.seed,
            "config": self.config,
            "models": self.models,
            "federation": self.federation,
            "wall_seconds": self.wall_seconds,
            "final": self.final,
            "communication": comm,
            "rounds": [r.to_dict() for r in self.rounds],
            **self.extra,
        })

    def summary_row(self) -> dict[str, Any]:
        """One line of a table: accuracies (or RMSE and R²), the clinical metrics' means and
        ranges over clients when recorded, bytes, wall time, and the run's caveats."""
        from fedlabels.results.caveats import (
            rounds_status,
            run_warnings,
            sites_declining_evaluation,
        )

        f = self.final or {}  # no evaluation yet: accuracies None
        row = {"method": self.method, "dataset": self.dataset, "seed": self.seed,
               "mean_acc": f.get("mean_accuracy"), "min_acc": f.get("min_accuracy"),
               "max_acc": f.get("max_accuracy"), "mean_rmse": f.get("mean_rmse"),
               "mean_r2": f.get("mean_r2"),
               "min_rmse": min(f["client_rmse"]) if f.get("client_rmse") else None,
               "max_rmse": max(f["client_rmse"]) if f.get("client_rmse") else None,
               "bytes_up_per_client_round": self.mean_bytes_up_per_client_round(),
               "wall_s": self.wall_seconds}
        metrics = (self.extra.get("clinical") or {}).get("metrics") or {}
        for name, stats in metrics.items():
            if name != "accuracy":
                row.update({f"{stat}_{name}": stats.get(stat) for stat in ("mean", "min", "max")})
        row["status"] = rounds_status(self)
        row["sites_declining_evaluation"] = sites_declining_evaluation(self)
        row["warnings"] = run_warnings(self)
        return row

    def round_rows(self) -> list[dict[str, Any]]:
        """The rows of :meth:`to_frame`, one dict a round (a key only where the round has
        the value), without pandas (a plot reads its curves from them)."""
        rows = []
        # clients taken out of rounds (--participation, --dropout, --deadline): how many
        # took part and replied, without which bytes_up_mean (over all clients) misleads
        partial = any(r.participants is not None for r in self.rounds)
        for r in self.rounds:
            stats = r.accuracy_stats() or {}
            rows.append({"round": r.round,
                         # models refit each round (scikit-learn) take no steps: no column
                         **({"local_steps": r.local_steps} if r.local_steps is not None
                            else {}),
                         **{f"acc_{k}": v for k, v in stats.items()},
                         **({"rmse_mean": float(np.mean(r.rmse)), "r2_mean": float(np.mean(
                             r.r2 or []))} if r.rmse is not None else {}), **r.server,
                         **({"participants": None if r.participants is None
                             else len(r.participants),
                             "replied": None if r.replied is None else len(r.replied)}
                            if partial else {}),
                         "bytes_up_mean": float(np.mean(r.bytes_up)),
                         "bytes_down_mean": float(np.mean(r.bytes_down)),
                         "seconds": r.seconds})
        return rows

    def run_columns(self) -> dict[str, Any]:
        """What tells this run's rows from another's in a table of many runs: ``method``,
        ``dataset``, ``models`` (each distinct spec, ``;``-joined), ``seed``, ``partition``
        (as built, ``dirichlet:0.5,0.5``) and ``epsilon`` (the total ε budget the run was
        given, else the ε its accountant reports; ``nan`` for a run without one)."""
        from fedlabels.results.built import built_settings

        options = (self.config or {}).get("options") or {}
        spent = (self.extra.get("privacy") or {}).get("epsilon")
        epsilon = next((float(v) for v in (options.get("epsilon"), spent)
                        if isinstance(v, int | float) and not isinstance(v, bool)),
                       float("nan"))
        partition = (built_settings(self.federation or {}).get("partition")
                     or (self.config or {}).get("partition"))
        return {"method": self.method, "dataset": self.dataset,
                "models": ";".join(dict.fromkeys(self.models)), "seed": self.seed,
                "partition": partition, "epsilon": epsilon}

    def to_frame(self) -> pd.DataFrame:
        """Per-round records as a pandas DataFrame (one row per round), led by the run's
        :meth:`run_columns` (so the tables of a sweep can be concatenated and grouped); a
        run that took clients out of rounds adds how many took part (``participants``) and
        replied, and a run of iterative (torch) learners the clients' ``local_steps`` so
        far."""
        import pandas as pd

        frame = pd.DataFrame(self.round_rows())
        for i, (name, value) in enumerate(self.run_columns().items()):
            if name not in frame:  # a server metric of that name is the method's own
                frame.insert(i, name, [value] * len(frame))
        # one column order whatever round is evaluated first (a run evaluated every k rounds
        # has no accuracy in its first rows), so tables of different runs line up
        columns = list(frame.columns)
        head = [*self.run_columns(), "round", "local_steps",
                *(c for c in columns if c.startswith("acc_")),
                *(c for c in ("rmse_mean", "r2_mean") if c in columns)]
        tail = ["bytes_up_mean", "bytes_down_mean", "seconds"]
        middle = [c for c in columns if c not in head and c not in tail]
        return frame[[c for c in (*head, *middle, *tail) if c in columns]]

    def save_json(self, path: str | Path, overwrite: bool = False) -> Path:
        """Write the result JSON (atomically) to ``path``, which must end in ``.json``; an
        existing file is replaced only with ``overwrite=True``, and the run's own table
        (``csv:PATH:TARGET``) never."""
        path = _save_target(path, ".json", overwrite, self.dataset, "result")
        return _write(path, json.dumps(self.to_dict(), indent=2) + "\n")

    def save_csv(self, path: str | Path, overwrite: bool = False) -> Path:
        """Write the per-round table (:meth:`to_frame`) as CSV to ``path``, which must end in
        ``.csv``; ``overwrite`` as for :meth:`save_json`. Returns the path written."""
        path = _save_target(path, ".csv", overwrite, self.dataset, "rounds table")
        return _write(path, self.to_frame().to_csv(index=False))

    def save(self, path: str | Path, overwrite: bool = False) -> Path:
        """What ``fedlabels run`` writes: the result JSON at ``path`` (``X.json``), the
        rounds table ``X.rounds.csv`` and the clients' models beside it, so that
        ``fedlabels predict`` and ``fedlabels inspect`` work on it. Every file is checked
        before any is written; existing ones are replaced only with ``overwrite=True``.
        Models the safe format does not write (your own network) are left out with a
        warning, as ``fedlabels run`` does; the result and its table are written."""
        import warnings

        from fedlabels.core.errors import FedLabelsWarning, user_stacklevel
        from fedlabels.core.files import check_outputs, result_path, run_inputs, run_outputs
        from fedlabels.results.model_format import UnsavableModelError
        from fedlabels.results.models_file import save_models

        files = run_outputs(result_path(path, option="path"))
        if not self.client_models:
            del files["models file"]
        check_outputs(files, run_inputs(self.dataset), overwrite=overwrite,
                      overwrite_hint="overwrite=True")
        if self.client_models:  # first: the one that can refuse a model
            try:
                save_models(self, files["result"])
            except UnsavableModelError as exc:
                warnings.warn(FedLabelsWarning(f"the models file was not written ({exc}); "
                                               "predict and inspect need it."),
                              stacklevel=user_stacklevel())
        self.save_json(files["result"], overwrite=True)
        self.save_csv(files["rounds table"], overwrite=True)
        return files["result"]


def _save_target(path: str | Path, suffix: str, overwrite: bool, dataset: str,
                 what: str) -> Path:
    """``path`` checked for :meth:`RunResult.save_json` / ``save_csv`` (one-line errors):
    never the run's own table (``csv:PATH:TARGET``), even with ``overwrite``."""
    from fedlabels.core.files import check_outputs, run_inputs

    path = Path(path).expanduser()
    check_outputs({what: path}, run_inputs(dataset), overwrite=True)  # the inputs only
    if path.suffix.lower() != suffix:
        raise FedLabelsError(f"{path}: give a file name ending in {suffix} (this writes "
                             f"{suffix[1:].upper()}).")
    if path.is_dir():
        raise FedLabelsError(f"cannot write to {path}: it is a directory; give a file name "
                             f"ending in {suffix}.")
    if (path.exists() or path.is_symlink()) and not overwrite:
        raise FedLabelsError(f"{path} exists; pass overwrite=True to replace it, or choose "
                             "another name.")
    return path


def _write(path: Path, text: str) -> Path:
    """:func:`write_atomic` with an ``OSError`` as a one-line error naming ``path``."""
    try:
        return write_atomic(path, text)
    except OSError as exc:
        raise FedLabelsError(f"could not write {path}: {exc.strerror or exc}.") from None


def _clean(obj: Any) -> Any:
    """JSON-safe: numpy scalars to Python, NaN/inf to None."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def format_table(rows: list[dict[str, Any]], metric: str = "accuracy") -> str:
    """A plain-text table of summary rows: method, dataset, the headline ``metric`` (mean,
    min and max over clients; RMSE and R² for regression), bytes, wall time, and a note
    column when a run was interrupted or extended."""
    from fedlabels.core.clinical import METRIC_HEADINGS

    regression = bool(rows) and all(r.get("mean_rmse") is not None for r in rows)
    key = "acc" if metric == "accuracy" else metric
    head = "RMSE" if regression else METRIC_HEADINGS.get(metric, metric)
    wm = max([len("method"), *(len(str(r["method"])) for r in rows)])
    wd = max([len("dataset"), *(len(str(r["dataset"])) for r in rows)])
    wv = max(8, len(f"mean {head}"))
    notes = any(r.get("status") for r in rows)
    header = (f"{'method':<{wm}} {'dataset':<{wd}} {'mean ' + head:>{wv}} {'min':>6} {'max':>6} "
              + (f"{'R²':>6} " if regression else "")
              + f"{'up B/client/round':>18} {'wall s':>7}" + ("  note" if notes else ""))
    lines = [header, "-" * len(header)]
    for r in rows:
        if r.get("mean_rmse") is not None and regression:
            lo, hi = r.get("min_rmse"), r.get("max_rmse")
            cells = (f"{r['mean_rmse']:>{wv}.4g} {'' if lo is None else format(lo, '.4g'):>6} "
                     f"{'' if hi is None else format(hi, '.4g'):>6} {r['mean_r2']:>6.3f}")
        elif r.get("mean_rmse") is not None:  # a regression row among classification rows
            cells = f"{'RMSE ' + format(r['mean_rmse'], '.4g'):>{wv}} R² {r['mean_r2']:>8.3f}"
        elif r.get(f"mean_{key}") is None:
            why = ("declined by the sites" if r.get("sites_declining_evaluation")
                   else "no evaluation yet") \
                if r.get("mean_acc") is None else "n/a"
            cells = f"{why:>{wv + 14}}"
        else:
            cells = (f"{r[f'mean_{key}']:>{wv}.4f} {r[f'min_{key}']:>6.3f} "
                     f"{r[f'max_{key}']:>6.3f}")
        note = f"  {r['status']}" if r.get("status") else ""
        lines.append(f"{r['method']:<{wm}} {r['dataset']:<{wd}} {cells} "
                     f"{r['bytes_up_per_client_round']:>18,.0f} {r['wall_s']:>7.1f}{note}")
    return "\n".join(lines)


def table_warnings(rows: list[dict[str, Any]]) -> list[str]:
    """``warning: METHOD on DATASET: ...`` lines for the rows' caveats."""
    return [f"fedlabels: warning: {r['method']} on {r['dataset']}: {w}" for r in rows
            for w in r.get("warnings") or []]


def _result_beside(path: Path) -> str:
    """What to give instead of ``path``, which is not JSON: for a file a run writes beside
    its result, that result; for another name not ending in ``.json`` (``fedlabels plot
    results/*`` also names the plot and the rounds tables), result JSON files; else ""."""
    for suffix in (*RUN_SIBLINGS, ".models.npz", PICKLED_MODELS):
        if path.name.endswith(suffix) and len(path.name) > len(suffix):
            result = path.with_name(path.name[:-len(suffix)] + ".json")
            return f"; it is a file a run writes beside its result: give the result {result}"
    if path.suffix.lower() != ".json":
        return "; give the result JSON files of runs (X.json, e.g. results/*.json)"
    return ""


def load_result(path: str | Path) -> RunResult:
    """Read a result JSON written by :meth:`RunResult.save_json`.

    A missing or unreadable file, or one that is not a fedlabels result, raises
    :class:`~fedlabels.core.errors.FedLabelsError`.
    """
    path = Path(path)
    refuse_special_file(path, "result")
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise FedLabelsError(f"cannot read result {path}: {exc.strerror or exc}.") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise FedLabelsError(f"{path} is not a fedlabels result (not JSON)"
                             f"{_result_beside(path)}.") from None
    except RecursionError:  # [[[[...]]]]: json's own recursion limit
        raise FedLabelsError(f"{path} is not a fedlabels result (JSON nested too deep)."
                             ) from None
    missing = [k for k in _RESULT_KEYS if k not in data] if isinstance(data, dict) else ["keys"]
    if missing:
        raise FedLabelsError(f"{path} is not a fedlabels result (no {', '.join(missing)}).")
    absent = _absent_round_entry(data["rounds"])
    if absent:
        raise FedLabelsError(f"{path} is not a valid fedlabels result: its {absent} is "
                             "missing (every version writes it: a damaged or edited file).")
    wrong = _wrong_types(data)
    if wrong:
        raise FedLabelsError(f"{path} is not a valid fedlabels result: its {wrong} is not of "
                             "the type a run writes.")
    try:
        return _result_from_dict(data)
    except (KeyError, TypeError, AttributeError) as exc:
        raise FedLabelsError(f"{path} is not a valid fedlabels result ({exc!r}).") from None


_RESULT_KEYS = ("method", "dataset", "seed", "config", "federation", "models", "rounds",
                "communication", "wall_seconds")
#: what every round record holds, in every version (the others are read where present)
_ROUND_KEYS = ("round", "local_steps", "accuracies", "server", "bytes_up", "bytes_down",
               "seconds")


def _absent_round_entry(rounds: Any) -> str | None:
    """``rounds[i].key`` of the first entry of :data:`_ROUND_KEYS` a round record lacks (it
    was ``not a valid fedlabels result (KeyError('local_steps'))``), else None."""
    records = rounds if isinstance(rounds, list) else []
    return next((f"rounds[{i}].{key}" for i, r in enumerate(records) if isinstance(r, dict)
                 for key in _ROUND_KEYS if key not in r), None)


#: a result's sections that are tables (``report``, ``plot`` and ``privacy_line`` read
#: their keys), where present
_TABLES = ("config", "federation", "communication", "final", "threat_model", "device",
           "privacy", "provenance", "clinical")


def _numbers(value: Any, whole: bool = False) -> bool:
    """``value`` is a list of numbers (ints with ``whole``; None for a missing one)."""
    kinds = int if whole else int | float
    return isinstance(value, list) and all(v is None or isinstance(v, kinds) for v in value)


def _wrong_types(data: dict[str, Any]) -> str | None:
    """The first entry of a result JSON whose type is not what :meth:`RunResult.save_json`
    writes (a forged or damaged file: ``"rounds": 5``, ``"federation": []`` and accuracies
    of text were tracebacks in ``report`` and ``plot``), else None."""
    checks: list[tuple[str, bool]] = [
        ("method", isinstance(data["method"], str)),
        ("dataset", isinstance(data["dataset"], str)),
        ("seed", data["seed"] is None or isinstance(data["seed"], int)),
        ("models", isinstance(data["models"], list)
         and all(isinstance(m, str) for m in data["models"])),
        ("wall_seconds", isinstance(data["wall_seconds"], int | float)),
        *((k, isinstance(data[k], dict)) for k in _TABLES if data.get(k) is not None),
        ("rounds", isinstance(data["rounds"], list)
         and all(isinstance(r, dict) for r in data["rounds"]))]
    wrong = next((name for name, ok in checks if not ok), None)
    if wrong is not None:
        return repr(wrong)
    for i, r in enumerate(data["rounds"]):
        fields = [("round", isinstance(r.get("round"), int)),
                  ("local_steps", r.get("local_steps") is None
                   or isinstance(r.get("local_steps"), int)),
                  ("server", isinstance(r.get("server"), dict)),
                  ("seconds", isinstance(r.get("seconds"), int | float)),
                  ("bytes_up", _numbers(r.get("bytes_up"), whole=True)),
                  ("bytes_down", _numbers(r.get("bytes_down"), whole=True)),
                  *((k, r.get(k) is None or _numbers(r[k], whole=k in ("participants",
                                                                       "replied")))
                    for k in ("accuracies", "rmse", "r2", "participants", "replied"))]
        bad = next((name for name, ok in fields if not ok), None)
        if bad is not None:
            return f"rounds[{i}].{bad}"
    return None


def _result_from_dict(data: dict[str, Any]) -> RunResult:
    rounds = [RoundRecord(round=r["round"], local_steps=r["local_steps"],
                          accuracies=r["accuracies"], server=r["server"],
                          bytes_up=r["bytes_up"], bytes_down=r["bytes_down"],
                          seconds=r["seconds"], participants=r.get("participants"),
                          replied=r.get("replied"), rmse=r.get("rmse"), r2=r.get("r2"))
              for r in data["rounds"]]
    comm = {k: v for k, v in data["communication"].items()
            if k not in ("bytes_up_per_round", "bytes_down_per_round",
                         "mean_bytes_up_per_client_per_round", "communication_rounds")}
    known = {*_RESULT_KEYS, "final"}
    return RunResult(method=data["method"], dataset=data["dataset"], seed=data["seed"],
                     config=data["config"], federation=data["federation"],
                     models=data["models"], rounds=rounds, communication=comm,
                     wall_seconds=data["wall_seconds"],
                     extra={k: v for k, v in data.items() if k not in known})


def device_line(device: dict[str, Any]) -> str | None:
    """``device: cuda:0 (NVIDIA H100), bf16, clients trained together`` for a run that asked
    for more than the default (the CPU, fp32, one client after another); ``None`` else."""
    if not device:
        return None
    asked, used = device.get("asked", "cpu"), list(device.get("devices") or [])
    precision = device.get("precision", "fp32")
    together = bool(device.get("batched_clients"))
    graphs = (device.get("cuda_graphs") or {}).get("graphed_calls") or 0
    if asked == "cpu" and precision == "fp32" and not together and not device.get(
            "precision_asked"):
        return None
    names = device.get("device_names") or {}
    where = ", ".join(f"{d} ({names[d]})" if d in names else d for d in used) or "cpu"
    parts = [where + (" (device=auto found no CUDA GPU)" if asked == "auto" and
                      not any(d.startswith("cuda") for d in used) else "")]
    parts.append(precision + (f" (asked {device['precision_asked']}: no torch model)"
                              if device.get("precision_asked") else ""))
    parts.append("clients trained together" if together else "clients one by one")
    if graphs:
        parts.append(f"{graphs} calls replayed as CUDA graphs")
    return "device: " + ", ".join(parts)


def dp_epsilon(privacy: dict[str, Any]) -> float | None:
    """A result's ``privacy`` ε where it is a finite number; ``None`` for a run with no DP
    mechanism (or nothing released yet)."""
    eps = privacy.get("epsilon")
    return float(eps) if isinstance(eps, int | float) and math.isfinite(eps) else None


def privacy_line(privacy: dict[str, Any]) -> str | None:
    """``privacy: ε = 3.21, δ = 1e-05 (conditional on ...)`` for a run with a finite ε."""
    eps = dp_epsilon(privacy)
    if eps is None:
        return None
    return (f"privacy: ε = {eps:.4g}, δ = {privacy.get('delta', 0.0):g} "
            f"({guarantee_text(privacy)})" + _composed(privacy, eps))


def site_ledgers_line(privacy: dict[str, Any]) -> str | None:
    """``sites' own ledgers (...): this run ε = 2 (δ = 1e-05) at 3 of 3 sites, ...`` for a
    Flower result whose sites reported their ledgers (``privacy.site_ledgers``)."""
    block = privacy.get("site_ledgers")
    if not isinstance(block, dict) or not isinstance(block.get("sites"), dict):
        return None
    sites = block["sites"]
    told = [r for r in sites.values() if isinstance(r, dict) and "epsilon" in r]

    def span(key: str, reports: list[dict[str, Any]]) -> str:
        values = sorted(float(r[key]) for r in reports)
        low, high = f"{values[0]:.4g}", f"{values[-1]:.4g}"
        return low if low == high else f"{low}–{high}"

    deltas = sorted({float(r["delta"]) for r in told})
    lifetime = [r for r in told if "ledger_epsilon" in r]  # report-lifetime=true sites
    parts = [f"{len(told)} of {len(sites)} sites reported"]
    if told:
        parts.append(f"this run ε = {span('epsilon', told)} (δ = "
                     f"{', '.join(f'{d:g}' for d in deltas)})")
    if lifetime:
        budgets = [r["budget"] for r in lifetime]
        parts.append(f"lifetime ε = {span('ledger_epsilon', lifetime)}" + (
            f" of budget(s) {', '.join(sorted({f'{b:.4g}' for b in budgets}))}"
            if all(isinstance(b, int | float) for b in budgets) else "")
            + ("" if len(lifetime) == len(told) else
               f" at the {len(lifetime)} site(s) that report their lifetime"))
    flags = block.get("disagreements") or []
    parts.append(f"{len(flags)} disagreement(s) with the coordinator's figures"
                 if flags else "no disagreement with the coordinator's figures")
    return f"sites' own ledgers ({block.get('source', 'reported by the sites')}): " \
        + ", ".join(parts)


def guarantee_text(privacy: dict[str, Any]) -> str:
    """What a result's guarantee is, for which neighbouring datasets and whom it holds
    against: ``formal, record-level (one record added or removed), against the server and
    the other clients``, ``conditional on ...; record-level (...), against ...``, or
    ``guarantee: none - <reason>``."""
    guarantee = privacy.get("guarantee", "none")
    stated = ", ".join(x for x in (_relation(privacy), _against(privacy)) if x)
    if guarantee == "conditional":
        return f"conditional on {privacy.get('conditional_on')}" + (
            f"; {stated}" if stated else "")
    if guarantee == "formal":
        return ", ".join(x for x in ("formal", stated) if x)
    return f"guarantee: none - {privacy.get('reason', 'not stated')}"


#: how a neighbouring relation names its change, earliest in its text first
_CHANGES = ("added or removed", "removed or replaced", "replaced")


def _relation(privacy: dict[str, Any]) -> str:
    """``record-level (one record added or removed)``: the unit a guarantee protects and
    the change of it the ε holds for (under replacement, ε of adding or removing doubles)."""
    unit, _, rest = str(privacy.get("neighbouring") or "").partition(":")
    found = sorted((rest.find(c), c) for c in _CHANGES if c in rest)
    if not unit or "replacement" in unit or not found:
        return unit
    return f"{unit} (one {'client' if unit.startswith('client') else 'record'} " \
           f"{found[0][1]})"


def _against(privacy: dict[str, Any]) -> str:
    """``against the server ...``: the party a guarantee holds against, without its
    explanations, and the party it does not (``; not the server``), which is the one a
    reader would otherwise assume."""
    clauses = str(privacy.get("guarantee_against") or "").split(";")
    party = re.split(r" \(|:", clauses[0])[0].strip()
    nots = [re.split(r" \(|:|, which", c)[0].strip() for c in clauses[1:]]
    nots = [c for c in nots if c.startswith("not ")]
    return "; ".join([f"against {party}", *nots]) if party else ""


def _composed(privacy: dict[str, Any], eps: float) -> str:
    """Why a run's ε is below the sum of its rounds' (a tighter accountant at δ), or ""."""
    per_round, rounds = privacy.get("epsilon_per_round"), privacy.get("rounds_accounted")
    basic = (privacy.get("epsilon_by_accountant") or {}).get("basic")
    if not (isinstance(per_round, int | float) and isinstance(rounds, int)
            and isinstance(basic, int | float)) or eps >= basic * (1 - 1e-9):
        return ""
    return (f"; {rounds} round(s) of pure ε = {per_round:.4g} each (at δ = 0; less at this "
            f"δ) compose to {eps:.4g} at this δ ({privacy.get('accountant')} accountant; "
            f"their sum is {basic:.4g})")
