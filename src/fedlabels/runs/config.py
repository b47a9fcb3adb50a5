"""Run configuration: one validated object, from keyword arguments, a TOML file or the CLI."""

from __future__ import annotations

import argparse
import functools
import inspect
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, Unpack

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.limits import MAX_ROUNDS, MAX_STEPS
from fedlabels.runs.spec import ParamInfo, by_name, check_keys, declared, docs_table, param

if TYPE_CHECKING:
    from typing import TypedDict

    from fedlabels.data.federation import FloatLike, IntLike
    from fedlabels.data.targets import TargetRangeLike

    class RunParams(TypedDict, total=False):
        """The run parameters :func:`fedlabels.run` takes as keywords (``**params``), typed
        as :class:`RunConfig`'s constructor takes them, so that a checker refuses
        ``rounds="3"`` or ``roundz=3`` (``**params: Any`` let both through to run time);
        ``model`` is a keyword of its own."""

        clients: IntLike
        rounds: IntLike
        period: IntLike
        unlabeled: IntLike | None
        private: IntLike | None
        private_per_client: IntLike | None
        test: IntLike | None
        partition: str
        unlabeled_shift: FloatLike
        public: str | os.PathLike[str] | None
        public_pca: IntLike | None
        seed: IntLike
        eval_every: IntLike
        sep: str | None
        features: str | Sequence[str] | None
        drop: str | Sequence[str] | None
        text_column: str | None
        task: str | None
        target_range: TargetRangeLike
        insecure_reproducible_noise: bool
        malicious: IntLike
        poison: str | None
        participation: FloatLike | None
        dropout: FloatLike | None
        deadline: FloatLike | None
        device: str
        precision: str
        batch_clients: str | bool
        cuda_graphs: str | bool
        offload: str
        workers: IntLike | None
        engine: str
        image_size: str | int | tuple[int, int] | None
        image_column: str | None
        missing: str | None
        classes: str | Sequence[str] | None
        image_mode: str | None
        image_peak: FloatLike | None
        options: dict[str, Any] | None

    class ConfigKeys(RunParams, total=False):
        """Every setting of a :class:`RunConfig` as a keyword (:func:`load_config`'s
        ``overrides``, :meth:`RunConfig.replace`'s ``changes``): the run parameters and the
        method, dataset, model and output, typed as the constructor takes them."""

        method: str
        dataset: str
        model: str | None
        output: str | os.PathLike[str] | None

_C = TypeVar("_C", bound=type)


def _keywords_checked(cls: _C) -> _C:
    """The dataclass's ``__init__``, with an unknown keyword a one-line error naming the
    valid ones (as :meth:`RunConfig.from_mapping` says it) instead of Python's TypeError,
    and former names read as the current ones; its signature and the class's docstring
    say what each field takes (:func:`_taking`), as a checker reads it."""
    generated = vars(cls)["__init__"]

    @functools.wraps(generated)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        generated(self, *args, **check_keys(cls, kwargs, "RunConfig keyword", keywords=True))

    __init__.__signature__ = _taking(cls)  # type: ignore[attr-defined]
    setattr(cls, "__init__", __init__)  # noqa: B010 (mypy refuses assigning a method)
    cls.__doc__ = (cls.__doc__ or "") + _fields_doc(cls)
    return cls


#: the numbers a setting takes, as ``help()`` shows them (a checker reads the aliases)
SHOWN_ALIASES = {"IntLike": "int | numpy.integer",
                 "FloatLike": "float | numpy.floating | numpy.integer",
                 "TargetRangeLike": "str | Sequence[float | numpy.floating | numpy.integer] "
                                    "| numpy.ndarray | None"}
#: what the constructor takes where it is more than the type a field stores, which
#: validate() normalises (a Path to its str, a pair to "LO,HI", True to "on"); an int or
#: float field takes numpy's numbers too. The typed ``__init__`` under TYPE_CHECKING says
#: the same to a checker (tests/test_typed_api.py checks that they agree)
TAKES = {"public": "str | os.PathLike[str] | None", "output": "str | os.PathLike[str] | None",
         "features": "str | Sequence[str] | None", "drop": "str | Sequence[str] | None",
         "classes": "str | Sequence[str] | None",
         "target_range": "TargetRangeLike",
         "participation": "FloatLike | None", "batch_clients": "str | bool",
         "cuda_graphs": "str | bool", "image_size": "str | int | tuple[int, int] | None"}


def taken_annotation(name: str, stored: str) -> str:
    """What the field ``name`` (of the stored type ``stored``) takes, as a checker reads it."""
    import re

    if name in TAKES:
        return TAKES[name]
    return re.sub(r"\bfloat\b", "FloatLike", re.sub(r"\bint\b", "IntLike", stored))


def shown(annotation: str) -> str:
    """``annotation`` with the aliases spelt out, as ``help()`` shows it."""
    for alias, meaning in SHOWN_ALIASES.items():
        annotation = annotation.replace(alias, meaning)
    return annotation


def _taking(cls: type) -> inspect.Signature:
    """The constructor's signature with what each field takes (``help(RunConfig)``)."""
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for f in fields(cls):
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[operator]
        params.append(inspect.Parameter(
            f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default,
            annotation=shown(taken_annotation(f.name, str(f.type)))))
    return inspect.Signature(params, return_annotation="None")


def _fields_doc(cls: type) -> str:
    """A Parameters section: each field, what it takes, its default and its help."""
    import textwrap

    lines = ["", "    Parameters (what each field takes; it holds the value normalised: a Path",
             '    as its str, a pair as "LO,HI", True as "on")', "    ----------"]
    for f, info in zip(fields(cls), declared(cls), strict=True):
        lines.append(f"    {info.name} : {shown(taken_annotation(info.name, str(f.type)))}")
        lines += textwrap.wrap(f"{info.help} (default: {info.default_str()})", width=88,
                               initial_indent=" " * 8, subsequent_indent=" " * 8)
    return "\n".join(lines) + "\n"


def participation_arg(text: str) -> float | int:
    """``3`` -> 3 clients per round; ``0.5`` or ``1.0`` -> a probability."""
    try:
        return int(text) if text.strip().isdigit() else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a probability such as 0.5 or a whole "
                                         f"number of clients such as 3, got {text!r}") from None


#: the values of ``engine``: the in-process simulator, Flower's simulation engine on Ray
ENGINES = ("simulator", "flower-simulation")


@_keywords_checked
@dataclass
class RunConfig:
    """Every parameter of one run, each declared once with :func:`param`.

    The TOML keys and the Python keywords of :func:`fedlabels.run` are the field names, the
    CLI flags the same names with dashes; ``docs/usage.md`` has the generated table
    (:func:`fedlabels.runs.spec.docs_table`).
    """

    method: str = param("fedct", "a registered method (`fedlabels methods` lists them)",
                        kind=str, python=False, python_note="`fl.run`'s first argument")
    dataset: str = param("breast_cancer", "a registered dataset (`fedlabels datasets`), "
                         "csv:PATH:TARGET or imagefolder:PATH", kind=str, python=False,
                         python_note="`fl.run`'s second argument, or a Federation")
    clients: int = param(5, "number of clients m", kind=int, minimum=1, group="data",
                         federation=True, renamed_from=("n_clients",))
    model: str | None = param(
        None, "model spec, one for all clients or one per client: dt, 'mlp(hidden=512-512)', "
        "dt,rf,logreg,dt,rf", kind=str, default_text="the method's: mlp for methods that "
        "average parameters or distil soft labels, else decision_tree")
    rounds: int = param(20, "communication rounds R", kind=int, minimum=1,
                        maximum=MAX_ROUNDS)
    period: int = param(50, "local steps b per round for torch models (refit models ignore "
                        "it)", kind=int, minimum=1, maximum=MAX_STEPS)
    unlabeled: int | None = param(None, "size of the public unlabeled set U", kind=int,
                                  minimum=1, group="data", federation=True,
                                  default_text="the dataset's",
                                  renamed_from=("n_unlabeled",))
    private: int | None = param(None, "private examples over all clients", kind=int,
                                minimum=1, group="data", federation=True,
                                default_text="the dataset's", renamed_from=("n_private",))
    private_per_client: int | None = param(
        None, "private examples per client (instead of private)", kind=int, minimum=1,
        group="data", federation=True)
    test: int | None = param(None, "test-set size (datasets without a test split)", kind=int,
                             minimum=1, group="data", federation=True,
                             default_text="the dataset's", renamed_from=("n_test",))
    partition: str = param("iid", "iid, dirichlet:A1,A2 (or dirichlet:A), shards:K, "
                           "quantity:A[,MIN], powerlaw:A[,MIN] or column:NAME (one client "
                           "per value)", kind=str, group="data", federation=True)
    unlabeled_shift: float = param(
        0.0, "S: draw U with class proportions (1-S) p + S u_H, half of the classes "
        "favoured; measured in the result", kind=float, minimum=0, maximum=1, group="data",
        federation=True, simulator_only=True, metavar="S")
    public: str | None = param(
        None, "PATH: a public unlabeled set U of your own instead of one drawn from the "
        "dataset: a CSV of the table's feature columns (no target), or for images a folder "
        "of images (fashion_mnist: either); every non-test row then goes to the clients "
        "(docs/usage.md)", kind=str,
        group="data", federation=True, metavar="PATH", hashed_at_default=False)
    public_pca: int | None = param(
        None, "project every feature vector onto the top K whitened principal components of "
        "U (fitted on U only: no privacy cost)", kind=int, minimum=1, group="data",
        federation=True, metavar="K")
    seed: int = param(0, "seeds the split, partition, model initialisation and minibatch "
                      "order", kind=int, minimum=0, federation=True)
    eval_every: int = param(1, "evaluate the clients' test accuracy every k rounds (and at "
                            "the end)", kind=int, minimum=1, metavar="K")
    output: str | None = param(
        None, "JSON result path X.json; X.rounds.csv and X.models.npz go beside it",
        kind=str, python=False,
        python_note="not in `fl.run`: `result.save`; `fl.run_config` writes it",
        default_text="a name unique to the configuration under results/", short="-o")
    sep: str | None = param(None, "field separator of a csv: table (e.g. ';' or '\\t')",
                            kind=str, group="table", federation=True, default_text="','")
    features: str | list[str] | None = param(
        None, "feature columns of a table to keep, comma-separated", kind=(str, list),
        group="table", federation=True, default_text="all but the target")
    drop: str | list[str] | None = param(
        None, "columns of a table to leave out, comma-separated (an ID or date column)",
        kind=(str, list), group="table", federation=True)
    text_column: str | None = param(
        None, "the text column of a csv: table, the only feature (text models such as "
        "tfidf)", kind=str, group="table", federation=True, metavar="NAME")
    task: str | None = param(None, "the task of a csv: table", kind=str, group="table",
                             choices=("classification", "regression"), federation=True,
                             default_text="the dataset's")
    target_range: str | None = param(
        None, "LO,HI (TOML and Python: a pair too): public range of a regression target",
        kind=str, group="table", federation=True, metavar="LO,HI", default_text="the table's range")
    insecure_reproducible_noise: bool = param(
        False, "INSECURE, tests and debugging only: derive all DP noise and other secret "
        "randomness from the seed so runs repeat exactly; the result then says "
        "privacy.guarantee = none", kind=bool)
    malicious: int = param(0, "K malicious clients (below half), drawn from the seed",
                           kind=int, minimum=0, group="simulator", simulator_only=True,
                           metavar="K")
    poison: str | None = param(
        None, "what the malicious clients send: flip, random, constant[:K] or "
        "targeted[:S:T] (weight methods: sign-flipped, scaled or Gaussian updates)",
        kind=str, group="simulator", simulator_only=True, default_text="flip with "
        "malicious clients", renamed_from=("attack",),
        hashed_as="attack")
    participation: float | int | None = param(
        None, "Q: each client takes part in a round with probability Q in (0, 1] (with a "
        "decimal point: 0.5, 1.0), or K: exactly K clients per round (a whole number: 3)",
        kind=(float, int), group="simulator", simulator_only=True, metavar="Q|K",
        cli_type=participation_arg, default_text="every client")
    dropout: float | None = param(
        None, "probability in [0, 1) that a selected client fails to reply", kind=float,
        group="simulator", simulator_only=True, metavar="P")
    deadline: float | None = param(
        None, "drop replies whose simulated time exceeds S (1 = a client of mean size and "
        "median speed; stragglers)", kind=float, group="simulator", simulator_only=True,
        metavar="S")
    device: str = param(
        "cpu", "where torch models train: auto (CUDA when present), cpu, cuda (clients "
        "round-robin over the GPUs) or cuda:N (docs/neural.md)", kind=str,
        hashed_at_default=False)
    precision: str = param("fp32", "fp32, or bf16 autocast of torch models' forward passes",
                           kind=str, choices=("fp32", "bf16"), hashed_at_default=False)
    batch_clients: str = param(
        "auto", "train the clients' torch models together, one vectorised step for all "
        "(training, distillation, DP-SGD; auto: on CUDA)", kind=str,
        choices=("auto", "on", "off"), group="simulator", simulator_only=True,
        hashed_at_default=False)
    cuda_graphs: str = param(
        "off", "replay the clients' batched training and distillation steps as CUDA graphs "
        "(on: MLP groups on CUDA trained together, >= 8 steps a call; docs/neural.md)",
        kind=str,
        choices=("off", "on"), group="simulator", simulator_only=True,
        hashed_at_default=False)
    offload: str = param(
        "auto", "move clients' torch weights off their GPU between turns: auto (when they "
        "do not fit in its free memory), always, never (docs/neural.md)", kind=str,
        choices=("auto", "never", "always"), group="simulator", simulator_only=True,
        hashed_at_default=False)
    workers: int | None = param(
        None, "run the clients in N worker processes (1: all in this one); the result is the "
        "same for every N (docs/engines.md)", kind=int, group="simulator", minimum=1,
        simulator_only=True, metavar="N", hashed_at_default=False,
        default_text="$FEDLABELS_WORKERS, else one per core, at most one per client")
    engine: str = param(
        "simulator", "where the clients run: simulator (this machine), or flower-simulation "
        "(the Flower ServerApp and ClientApp on Ray: a local Ray, or the cluster at "
        "$RAY_ADDRESS; needs fedlabels[simulation]; docs/engines.md); the same result",
        kind=str, choices=ENGINES, simulator_only=True, hashed_at_default=False)
    image_size: str | None = param(
        None, "HxW (or S): resize the images of an imagefolder: dataset or of a csv: image "
        "column", kind=str, group="table", federation=True, metavar="HxW",
        default_text="images of one size", hashed_at_default=False)
    image_column: str | None = param(
        None, "a csv: table's column of image paths, read as the only feature", kind=str,
        group="table", federation=True, metavar="NAME", hashed_at_default=False)
    missing: str | None = param(
        None, "feature gaps (NaN, an empty cell) of a table: refuse them, or fill each after "
        "the split with the median of U's values of its column (public-median: fitted on U "
        "only, saved with the models, shipped to Flower sites in shared.npz); a table "
        "without gaps is unchanged; text and images refuse public-median", kind=str,
        group="table", choices=("refuse", "public-median"),  # fedlabels.data.gaps.MISSING
        federation=True, hashed_at_default=False,
        default_text="the dataset's: public-median for Ozone, refuse for the others and "
        "csv: tables")
    classes: str | list[str] | None = param(
        None, "the class labels of a classification task, comma-separated: declared task "
        "metadata that every party receives (a label outside it is refused)", kind=(str, list),
        group="table", federation=True, metavar="A,B,...", hashed_at_default=False,
        default_text="the dataset's documented classes, else those the clients' rows hold")
    image_mode: str | None = param(
        None, "the images' channels, declared: grey (1) or rgb (3), every image converted to "
        "it (every party receives it)", kind=str, group="table", choices=("grey", "rgb"),
        federation=True, hashed_at_default=False,
        default_text="grey if every image file of U is grey, else rgb")
    image_peak: float | None = param(
        None, "the value of images of more than 8 bits (16-bit PNG/TIFF, float) that becomes "
        "255, e.g. 4095 for 12-bit images; a pixel above it is an error; 8-bit images scale "
        "by 255", kind=float, group="table", federation=True, metavar="V",
        hashed_at_default=False, default_text="the format's full scale (65535 for 16 bits, "
        "1 for float)")
    options: dict[str, Any] = param(
        {}, "the method's options (`fedlabels methods NAME`): CLI --opt KEY=VALUE and the "
        "generated flags, TOML an [options] table, Python options={...}", kind=dict,
        cli=False)

    if TYPE_CHECKING:  # what the constructor takes (numpy numbers, a Path, a pair, True);
        # the fields above are the types it stores, normalised by validate()
        def __init__(self, method: str = "fedct", dataset: str = "breast_cancer",
                     clients: IntLike = 5, model: str | None = None, rounds: IntLike = 20,
                     period: IntLike = 50, unlabeled: IntLike | None = None,
                     private: IntLike | None = None,
                     private_per_client: IntLike | None = None,
                     test: IntLike | None = None, partition: str = "iid",
                     unlabeled_shift: FloatLike = 0.0,
                     public: str | os.PathLike[str] | None = None,
                     public_pca: IntLike | None = None, seed: IntLike = 0,
                     eval_every: IntLike = 1, output: str | os.PathLike[str] | None = None,
                     sep: str | None = None, features: str | Sequence[str] | None = None,
                     drop: str | Sequence[str] | None = None, text_column: str | None = None,
                     task: str | None = None,
                     target_range: TargetRangeLike = None,
                     insecure_reproducible_noise: bool = False, malicious: IntLike = 0,
                     poison: str | None = None, participation: FloatLike | None = None,
                     dropout: FloatLike | None = None, deadline: FloatLike | None = None,
                     device: str = "cpu", precision: str = "fp32",
                     batch_clients: str | bool = "auto", cuda_graphs: str | bool = "off",
                     offload: str = "auto", workers: IntLike | None = None,
                     engine: str = "simulator",
                     image_size: str | int | tuple[int, int] | None = None,
                     image_column: str | None = None, missing: str | None = None,
                     classes: str | Sequence[str] | None = None,
                     image_mode: str | None = None, image_peak: FloatLike | None = None,
                     options: dict[str, Any] = ...) -> None: ...

    def __post_init__(self) -> None:
        self.validate()
        from fedlabels.methods import get_method

        method = get_method(self.method)
        if self.model is not None and not method.capabilities.trains_models:
            refuse_model(method, self.model)
        if self.model is None:
            self.model = method.model_default()
        if isinstance(self.model, str):  # aliases -> one name: file names, hashes, reports
            from fedlabels.learners import canonical_model_spec

            self.model = canonical_model_spec(self.model)

    def validate(self) -> None:
        """Each value against its declaration, then the combinations (one-line errors)."""
        for info in declared(type(self)):
            setattr(self, info.name, checked_value(info, getattr(self, info.name)))
        if self.private is not None and self.private_per_client is not None:
            raise FedLabelsError("set private or private_per_client, not both.")
        if self.public is not None:
            self._check_public()
        if self.malicious or self.poison is not None:
            from fedlabels.method.adversary import plan_attack
            from fedlabels.methods import get_method

            plan_attack(get_method(self.method), self.clients, None, self.malicious,
                        self.poison, self.seed)
        if self.participation is not None or self.dropout or self.deadline is not None:
            from fedlabels.runs.participation import Participation

            policy = Participation.parse(self.participation, self.dropout, self.deadline)
            if policy is not None and isinstance(self.clients, int):
                policy.check_clients(self.clients)
        if self.target_range is not None and self.task == "classification":
            raise FedLabelsError("target_range applies to a regression task only.")
        if self.classes is not None:
            from fedlabels.data.classes import parse_classes

            parse_classes(self.classes)  # checked here, before any data loads
            if self.task == "regression":
                raise FedLabelsError("classes applies to a classification task only.")
        if self.engine != "simulator":
            self._check_engine()
        if self.cuda_graphs == "on":
            from fedlabels.learners.devices import check_cuda_graphs

            check_cuda_graphs(self.device, self.batch_clients)
        if any(getattr(self, k) is not None for k in ("image_size", "image_column",
                                                      "image_mode", "image_peak")):
            from fedlabels.data.images import check_image_settings

            check_image_settings(self.dataset, self.image_size, self.image_column,
                                 self.text_column, self.image_mode, self.image_peak,
                                 self.features, self.drop)
        if self.missing == "public-median":
            from fedlabels.data.gaps import check_fill_applies

            check_fill_applies(self.dataset, self.text_column, self.image_column)

    def _check_public(self) -> None:
        """A given U replaces the drawn one: no size or shift to draw it with, and no method
        that needs U's true labels. Every other method takes it: it fixes the clients' data
        (every non-test row) and the scaling, so baselines compare on the same split."""
        from fedlabels.data.public_set import public_path
        from fedlabels.methods import get_method

        public_path(self.public)
        given = [name for name in ("unlabeled", "unlabeled_shift") if getattr(self, name)]
        if given:
            raise FedLabelsError(f"{' and '.join(given)} draw{'s' * (len(given) == 1)} U from "
                                 "the labelled rows; with public (a U of your own) leave "
                                 f"{'it' if len(given) == 1 else 'them'} out.")
        note = get_method(self.method).public_labels_note
        if note is not None:
            raise FedLabelsError(f"{note}, and a public set of your own (public) has no "
                                 "labels: drop public, or use a method that labels U itself "
                                 "(e.g. fedct, ds-fl, feddf).")

    def _check_engine(self) -> None:
        """Flower's engine runs the deployed ServerApp and ClientApp: refuse what only the
        simulator's grid does (``workers`` sets the local Ray's CPUs)."""
        unused = [info.name for info in declared(type(self))
                  if info.name not in ("engine", "workers")
                  and (info.simulator_only or info.name == "insecure_reproducible_noise")
                  and getattr(self, info.name) != info.default]
        if unused:
            raise FedLabelsError(f"engine {self.engine!r} runs the Flower ServerApp and "
                                 f"ClientApp, which do not take {', '.join(unused)}; remove "
                                 f"{'it' if len(unused) == 1 else 'them'} or use engine "
                                 "'simulator'.")

    def to_dict(self) -> dict[str, Any]:
        """The settings by their names (what a result records as its ``config``)."""
        return asdict(self)

    def replace(self, **changes: Unpack[ConfigKeys]) -> RunConfig:
        """A copy with ``changes`` applied, checked as :meth:`from_mapping` checks keys."""
        data = self.to_dict()
        data.update(changes)
        return RunConfig.from_mapping(data)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], what: str = "config key") -> RunConfig:
        """A validated config from ``data``: TOML keys, a saved config or keywords; an
        unknown key is a one-line error with a suggestion that calls it a ``what``; former
        names are read as the current ones."""
        return cls(**check_keys(cls, data, what, dashes=True))


def checked_value(info: ParamInfo, value: Any) -> Any:
    """One run parameter's value, normalised and checked on its own (type, range, choices,
    form), or a one-line error naming it; :meth:`RunConfig.validate` checks the
    combinations."""
    name = info.name
    if name in ("public", "output") and isinstance(value, os.PathLike):  # a pathlib.Path
        value = os.fspath(value)
    if name in ("features", "drop", "classes") and isinstance(value, tuple):  # as lists
        value = list(value)
    if name == "image_size" and value is not None and not isinstance(value, str):
        from fedlabels.data.images import parse_size

        size = parse_size(value)  # 32 or (32, 48), as Python and TOML give it
        value = None if size is None else f"{size[0]}x{size[1]}"
    if name == "target_range" and value is not None and not isinstance(value, str):
        from fedlabels.data.targets import parse_target_range

        pair = parse_target_range(value)  # (0, 400), as Python and TOML give it
        value = None if pair is None else f"{pair[0]!r},{pair[1]!r}"
    if isinstance(value, bool) and info.choices is not None \
            and {"on", "off"} <= set(info.choices):  # TOML's and Python's true/false
        value = "on" if value else "off"
    if name in ("method", "dataset") and not isinstance(value, str):
        _refuse_data_as_name(name, value)
    value = info.validate(value)  # numpy numbers as Python's
    if name == "output" and value is not None and not value.strip():
        raise FedLabelsError("output is empty; give a result path ending in .json, or "
                             "leave it out for a name under results/.")
    if name == "unlabeled_shift":
        from fedlabels.data.shift import check_shift

        value = check_shift(value)
    if name == "sep" and value is not None:
        from fedlabels.data.csv_table import normalise_sep

        value = normalise_sep(value)
    if name == "text_column" and value is not None and not value.strip():
        raise FedLabelsError(f"text_column must be a column name, got {value!r}.")
    if name == "target_range" and value is not None:
        from fedlabels.data.targets import parse_target_range

        parse_target_range(value)
    if name == "image_size" and value is not None:
        from fedlabels.data.images import parse_size

        parse_size(value)  # checked; kept as given ("32" names the same run as before)
    if name == "device":
        from fedlabels.learners.devices import check_device

        check_device(value)
    if name == "precision":
        from fedlabels.learners.devices import check_precision

        check_precision(value)
    return value


def _refuse_data_as_name(name: str, value: Any) -> None:
    """A Federation or your own rows where a name goes (``fl.RunConfig(dataset=fed)``),
    refused with the call that runs them ("must be a str, got Federation(...)" before)."""
    from fedlabels.data import Federation

    what = f"{name} is {'a method' if name == 'method' else 'a dataset'}'s name"
    if isinstance(value, Federation):
        raise FedLabelsError(f"{what}, got a Federation: run a Federation with "
                             "fl.run(method, federation), e.g. fl.run('fedct', federation); "
                             "RunConfig takes a dataset's name (what --dataset takes).")
    if hasattr(value, "shape"):  # a DataFrame, an array: not its repr
        raise FedLabelsError(f"{what}, got a {type(value).__name__} of shape "
                             f"{tuple(value.shape)}: run your own X and y with "
                             "fl.run(method, fl.make_federation(X, y, clients=5, "
                             "unlabeled=...)).")


def _check_file_values(data: Mapping[str, Any], path: Path) -> None:
    """Every value a config file gives, checked on its own even where the command line
    overrides it: a wrong value in a file the user wrote is an error, not silently unused.
    The error names the file and the key; combinations are checked on the merged config."""
    from fedlabels.methods import get_method

    params = by_name(RunConfig)
    for key, value in data.items():
        try:
            if key == "options":
                if not isinstance(value, dict):
                    raise FedLabelsError(f"options must be a table ([options]), got "
                                         f"{value!r}.")
                continue  # checked against the run's method in load_config
            if isinstance(value, list) and list not in params[key].kind:
                raise FedLabelsError(_one_run(key, value, path, f"--{key.replace('_', '-')}"))
            value = checked_value(params[key], value)
            if key == "method":
                get_method(value)
            elif key == "model" and value is not None:
                from fedlabels.learners import canonical_model_spec

                canonical_model_spec(value)
        except FedLabelsError as exc:
            raise FedLabelsError(f"config file {path}: {exc}") from None


def _check_file_options(options: Mapping[str, Any], method: str, path: Path) -> None:
    """Each method option of a config file's ``[options]`` table against ``method``'s
    declaration (combinations are checked on the merged options)."""
    from fedlabels.methods import get_method

    try:
        declared = get_method(method).options_class
        kinds = {i.name: i.kind for i in declared.declared()}
        for key, value in options.items():
            if isinstance(value, list) and list not in kinds.get(key, (list,)):
                raise FedLabelsError(_one_run(key, value, path, f"--opt {key}=", "[options] "))
        declared.check_each(options, method)
    except FedLabelsError as exc:
        raise FedLabelsError(f"config file {path}: {exc}") from None


def _one_run(key: str, values: list[Any], path: Path, flag: str, table: str = "") -> str:
    """The refusal of a list where a run takes one value (``seed = [0, 1, 2]``), with the
    sweep to run instead: one run per value, compared by ``fedlabels report``."""
    import shlex

    shown = " ".join(shlex.quote(str(v)) for v in values[:5]) + (" ..." if values[5:] else "")
    flag += "$v" if flag.endswith("=") else " $v"
    return (f"{table}{key} takes one value, got a list {values!r}: a config file is one run; "
            f"run it once per value (for v in {shown}; do fedlabels run --config "
            f"{shlex.quote(str(path))} {flag}; done) and compare the runs with fedlabels "
            "report (runs that differ only in their seed are one row, mean ± std over seeds).")


def _normalise_keys(data: dict[str, Any]) -> dict[str, Any]:
    return check_keys(RunConfig, data, "config key", dashes=True)


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


def load_config(path: str | Path, **overrides: Unpack[ConfigKeys]) -> RunConfig:
    """Read the TOML file ``path`` and apply ``overrides`` (run keys, as ``fl.run`` takes
    them).

    Two layouts, nothing else: the run keys at the top level plus an optional ``[options]``
    table, or a ``[run]`` table holding them plus an optional ``[options]`` table. Any other
    table, or keys beside a ``[run]`` table, is an error (they would be ignored).
    """
    from fedlabels.core.files import given_path, not_a_file

    path = given_path(path, "load_config's path")
    if not path.is_file():

        raise FedLabelsError(f"config file {path} {not_a_file(path)}.")
    try:
        data = _run_table(tomllib.loads(path.read_text(encoding="utf-8")), path)
    except tomllib.TOMLDecodeError as exc:
        raise FedLabelsError(f"config file {path} is not valid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses per nested array: x = [[[[...]]]]
        raise FedLabelsError(f"config file {path} is not a run configuration: its values "
                             "are nested too deep.") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = str(exc).rstrip(".")
        raise FedLabelsError(f"cannot read config file {path}: {reason}.") from None
    given = _normalise_keys(data)
    _check_file_values(given, path)
    changes: dict[str, Any] = dict(overrides)
    merged = {**given,
              **{k: v for k, v in _normalise_keys(changes).items() if v is not None}}
    if changes.get("options") is not None and "options" in given:
        merged["options"] = {**given["options"], **changes["options"]}
    cfg = RunConfig(**merged)
    if given.get("options"):
        _check_file_options(given["options"], cfg.method, path)
    return cfg


if __name__ == "__main__":  # `python -m fedlabels.runs.config`: the table for docs/usage.md
    print(docs_table(RunConfig))


def refuse_model(method: Any, model: Any) -> None:
    """A model given to a method that trains none is an error (its default, which a saved
    run's configuration records, is not)."""
    from fedlabels.learners import canonical_model_spec

    if isinstance(model, str) and \
            canonical_model_spec(model) == canonical_model_spec(method.model_default()):
        return
    raise FedLabelsError(f"{method.no_models_note()}; a model (--model, model=) does not "
                         "apply: drop it.")
