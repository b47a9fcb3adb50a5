"""Run configuration: one validated object, from keyword arguments, a TOML file or the CLI."""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from fedlabels.core.errors import FedLabelsError, did_you_mean


@dataclass
class RunConfig:
    """Settings of one ``fedlabels run``; TOML keys and CLI flags use the same names.

    Parameters
    ----------
    method : str, default="fedct"
        A registered method (``fedlabels methods`` lists them with their options).
    dataset : str, default="breast_cancer"
        A registered dataset (``fedlabels datasets``) or ``csv:PATH:TARGET``.
    clients : int, default=5
        Number of clients m.
    model : str or None
        Model spec, one for all clients or one per client (``dt,rf,mlp``); ``None`` (the
        default) takes the method's default model: the torch ``mlp`` for methods that
        average parameters or distil soft labels (fedavg, dp-fedavg, fedavg-xclp, fredy, dd,
        fedmd, ds-fl, feddf), ``decision_tree`` for the others.
    rounds : int, default=20
        Communication rounds R.
    period : int, default=50
        Local steps per round b for iteratively trained (torch) models; total local steps
        T = R * b. Refit models (scikit-learn) are refit once per round and ignore it.
    unlabeled, private, private_per_client, test : int or None
        Sizes of U, of the private pool (total, or per client) and of the test set;
        ``None`` uses the dataset's defaults.
    partition : str, default="iid"
        ``iid``, ``dirichlet:A1,A2``, ``shards:K``, ``quantity:A[,MIN]``,
        ``powerlaw:A[,MIN]`` or ``column:NAME`` (a table's column: one client per value).
    unlabeled_shift : float, default=0.0
        S in [0, 1]: U drawn with class proportions ``(1 - S) p + S u_H`` (half of the
        classes favoured; :mod:`fedlabels.data.shift`); 0 leaves U as it was. The measured
        shift goes into the result's ``federation.unlabeled_shift``.
    public_pca : int or None
        K: project every feature vector onto the top-K principal components of U, whitened,
        after the z-scoring (:mod:`fedlabels.data.public_pca`). Fitted on U's features
        only, so it costs no privacy; ``None`` (the default): features as they are.
    seed : int, default=0
        Seeds data split, partition, model initialisation and minibatch order.
    eval_every : int, default=1
        Evaluate client test accuracy every this many rounds (and always at the end).
    output : str or None
        Path of the JSON result.
    sep : str or None
        Field separator of a ``csv:`` table (default ``,``; e.g. ``;`` or a tab).
    features, drop : str, list of str, or None
        Feature columns of a table to keep (in that order) or to remove, comma-separated
        or a list; ``None`` keeps every column but the target (and a pandas index column
        ``Unnamed: 0``, dropped with a warning).
    text_column : str or None
        The text column of a ``csv:`` table, used as the single feature (text learners
        such as ``tfidf``); ``None``: numeric/categorical features.
    task : str or None
        ``classification`` or ``regression``; ``None`` (the default) takes the dataset's
        own. Only a ``csv:`` table can be given another task (a numeric target column).
    target_range : str or None
        ``LO,HI``: the public range of a regression target (every target is learnt as
        ``(y - LO) / (HI - LO)`` and FedCT quantises predictions over it); ``None`` takes
        the range of the whole table.
    insecure_reproducible_noise : bool, default=False
        INSECURE, for tests and debugging: draw every party's secret randomness (DP noise,
        masks, keys) from a stream derived from ``seed``, so a run repeats bit for bit. Anyone
        who knows the seed can then remove the noise: the result says
        ``privacy.guarantee = "none"``. The in-process simulator only.
    malicious : int, default=0
        Number K of malicious clients (below half of ``clients``), drawn from ``seed``; they
        send what ``attack`` makes of their messages (simulator only; see
        :mod:`fedlabels.method.adversary`).
    attack : str or None
        ``flip``, ``random``, ``constant[:K]`` or ``targeted[:S:T]`` (default ``flip`` when
        ``malicious`` > 0; an error without malicious clients).
    participation : float, int or None
        Simulator only: each client takes part in a round with this probability (a float in
        (0, 1], e.g. ``0.5``; ``1.0`` = every client), or exactly this many clients per round
        (an int >= 1, e.g. ``3``); ``None``: every client, every round.
    dropout : float or None
        Simulator only: probability in [0, 1) that a selected client fails to reply.
    deadline : float or None
        Simulator only: replies whose simulated time exceeds this are dropped (stragglers;
        1 = a client of mean size and median speed; see
        :mod:`fedlabels.runs.participation` for the speed model).
    device : str, default="cpu"
        Where torch learners train: ``auto`` (CUDA when torch sees a GPU, else the CPU),
        ``cpu``, ``cuda`` (clients round-robin over the visible GPUs) or ``cuda:N``
        (:mod:`fedlabels.learners.devices`). scikit-learn learners always run on the CPU.
    precision : str, default="fp32"
        ``fp32``, or ``bf16`` autocast for torch learners' forward passes.
    batch_clients : str, default="auto"
        Simulator only: train the clients' torch learners together, one vectorised step for
        all (:mod:`fedlabels.engines.together`): ``on``, ``off``, or ``auto`` (on when
        every learner can and they run on CUDA; CPU runs stay as they were).
    image_size : str or None
        ``HxW`` (or ``S`` for S×S): resize the images of an ``imagefolder:`` dataset or of a
        ``csv:`` table's ``image_column`` to this size; ``None``: they must all have one size.
    image_column : str or None
        A ``csv:`` table's column of image file paths (relative to the table's folder), read
        as the only feature (pixels; :mod:`fedlabels.data.images`).
    options : dict
        The method's options (e.g. ``quorum`` for FedCT, ``epsilon`` for DP methods),
        validated against the method's declaration; CLI ``--opt KEY=VALUE`` and the
        generated flags (``--quorum``, ``--epsilon``, ...) fill it, TOML takes an
        ``[options]`` table.
    """

    method: str = "fedct"
    dataset: str = "breast_cancer"
    clients: int = 5
    model: str | None = None  # None: the method's default (resolved in __post_init__)
    rounds: int = 20
    period: int = 50
    unlabeled: int | None = None
    private: int | None = None
    private_per_client: int | None = None
    test: int | None = None
    partition: str = "iid"
    unlabeled_shift: float = 0.0
    public_pca: int | None = None
    seed: int = 0
    eval_every: int = 1
    output: str | None = None
    sep: str | None = None
    features: str | list[str] | None = None
    drop: str | list[str] | None = None
    text_column: str | None = None
    task: str | None = None
    target_range: str | None = None
    insecure_reproducible_noise: bool = False
    malicious: int = 0
    attack: str | None = None
    participation: float | int | None = None
    dropout: float | None = None
    deadline: float | None = None
    device: str = "cpu"
    precision: str = "fp32"
    batch_clients: str = "auto"
    image_size: str | None = None
    image_column: str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()
        if self.model is None:
            from fedlabels.methods import get_method

            self.model = get_method(self.method).model_default()
        if isinstance(self.model, str):  # aliases -> one name: file names, hashes, reports
            from fedlabels.learners import canonical_model_spec

            self.model = canonical_model_spec(self.model)

    def validate(self) -> None:
        def _int(name: str, low: int, allow_none: bool = False) -> None:
            value = getattr(self, name)
            if value is None and allow_none:
                return
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise FedLabelsError(f"{name} must be an int >= {low}, got {value!r}.")

        if isinstance(self.clients, int) and not isinstance(self.clients, bool) \
                and self.clients < 1:
            raise FedLabelsError(f"clients (m) must be at least 1, got {self.clients}.")
        _int("clients", 1)
        _int("rounds", 1)
        _int("period", 1)
        _int("eval_every", 1)
        _int("seed", 0)
        for name in ("unlabeled", "private", "private_per_client", "test", "public_pca"):
            _int(name, 1, allow_none=True)
        if self.private is not None and self.private_per_client is not None:
            raise FedLabelsError("set private or private_per_client, not both.")
        from fedlabels.data.shift import check_shift

        self.unlabeled_shift = check_shift(self.unlabeled_shift)
        if not isinstance(self.insecure_reproducible_noise, bool):
            raise FedLabelsError(f"insecure_reproducible_noise must be true or false, got "
                                 f"{self.insecure_reproducible_noise!r}.")
        if self.sep is not None:
            if not isinstance(self.sep, str):
                raise FedLabelsError(f"sep must be a string, got {self.sep!r}.")
            from fedlabels.data.csv_table import normalise_sep

            self.sep = normalise_sep(self.sep)
        for name in ("features", "drop"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, str) or (
                    isinstance(value, list) and all(isinstance(v, str) for v in value))):
                raise FedLabelsError(f"{name} must be column names (a comma-separated string "
                                     f"or a list of strings), got {value!r}.")
        if self.text_column is not None and (not isinstance(self.text_column, str)
                                             or not self.text_column.strip()):
            raise FedLabelsError(f"text_column must be a column name, got "
                                 f"{self.text_column!r}.")
        _int("malicious", 0)
        if self.malicious or self.attack is not None:
            from fedlabels.method.adversary import plan_attack
            from fedlabels.methods import get_method

            plan_attack(get_method(self.method), self.clients, None, self.malicious, self.attack,
                        self.seed)
        if self.participation is not None or self.dropout or self.deadline is not None:
            from fedlabels.runs.participation import Participation

            policy = Participation.parse(self.participation, self.dropout, self.deadline)
            if policy is not None and isinstance(self.clients, int):
                policy.check_clients(self.clients)
        if self.task is not None or self.target_range is not None:
            from fedlabels.data.targets import check_task, parse_target_range

            check_task(self.task or "regression")
            if self.target_range is not None and self.task == "classification":
                raise FedLabelsError("target_range applies to a regression task only.")
            parse_target_range(self.target_range)
        from fedlabels.learners.devices import check_device, check_precision

        check_device(self.device)
        check_precision(self.precision)
        if self.batch_clients not in ("auto", "on", "off"):
            raise FedLabelsError(f"batch_clients must be one of auto, on, off, got "
                                 f"{self.batch_clients!r}.")
        if self.image_size is not None or self.image_column is not None:
            from fedlabels.data.images import check_image_settings

            check_image_settings(self.dataset, self.image_size, self.image_column,
                                 self.text_column)
        if not isinstance(self.options, dict):
            raise FedLabelsError(f"options must be a table of KEY = VALUE, got "
                                 f"{self.options!r}.")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def replace(self, **changes: Any) -> RunConfig:
        data = self.to_dict()
        data.update(changes)
        return RunConfig(**data)


def _normalise_keys(data: dict[str, Any]) -> dict[str, Any]:
    known = {f.name for f in fields(RunConfig)}
    out = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        if name not in known:
            from fedlabels.method.options import option_users

            hint = (f" {key!r} is a method option: put it in the [options] table."
                    if option_users(name) else "")
            raise FedLabelsError(f"unknown config key {key!r}{did_you_mean(key, known)}; "
                                 f"known keys: {', '.join(sorted(known))}.{hint}")
        out[name] = value
    return out


_LAYOUTS = ("valid layouts: the run keys at the top level plus an optional [options] table, "
            "or a [run] table plus an optional [options] table")


def _run_table(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """The run keys (and ``options``) of a TOML file in one of the two valid layouts."""
    if "run" in data:
        run = data["run"]
        if not isinstance(run, dict):
            raise FedLabelsError(f"config file {path}: 'run' must be a table ([run]); "
                                 f"{_LAYOUTS}.")
        beside = sorted(k for k in data if k not in ("run", "options"))
        if beside:
            raise FedLabelsError(f"config file {path}: with a [run] table nothing but "
                                 f"[options] may stand beside it, found "
                                 f"{', '.join(map(repr, beside))}; {_LAYOUTS}.")
        if "options" in run and "options" in data:
            raise FedLabelsError(f"config file {path}: options given twice, in [run.options] "
                                 "and [options]; keep one.")
        data = {**run, **({"options": data["options"]} if "options" in data else {})}
    tables = sorted(k for k, v in data.items() if isinstance(v, dict) and k != "options")
    if tables:
        raise FedLabelsError(f"config file {path}: unknown table"
                             f"{'s' if len(tables) > 1 else ''} "
                             f"{', '.join(f'[{t}]' for t in tables)}; {_LAYOUTS}.")
    return data


def load_config(path: str | Path, **overrides: Any) -> RunConfig:
    """Read a TOML file and apply ``overrides``.

    Two layouts, nothing else: the run keys at the top level plus an optional ``[options]``
    table, or a ``[run]`` table holding them plus an optional ``[options]`` table. Any other
    table, or keys beside a ``[run]`` table, is an error (they would be ignored).
    """
    path = Path(path)
    if not path.is_file():
        from fedlabels.core.files import not_a_file

        raise FedLabelsError(f"config file {path} {not_a_file(path)}.")
    try:
        data = _run_table(tomllib.loads(path.read_text(encoding="utf-8")), path)
    except tomllib.TOMLDecodeError as exc:
        raise FedLabelsError(f"config file {path} is not valid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise FedLabelsError(f"cannot read config file {path}: {exc}.") from None
    merged = {**_normalise_keys(data),
              **{k: v for k, v in _normalise_keys(overrides).items() if v is not None}}
    if "options" in overrides and "options" in data:
        merged["options"] = {**data["options"], **overrides["options"]}
    try:
        return RunConfig(**merged)
    except TypeError as exc:
        raise FedLabelsError(f"invalid config: {exc}") from None
