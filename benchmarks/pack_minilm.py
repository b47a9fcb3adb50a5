"""A float16 copy of the fetched MiniLM encoder, small enough to carry to a device run.

The device tool carries at most 64 MiB of working tree per call, and MiniLM's float32
weights are 87 MiB (``fedlabels fetch minilm``). This writes a cache directory holding the
same encoder with its weights stored in float16 (about 44 MiB): ``CACHE/minilm/model``
(config, tokenizer files, ``model.safetensors`` in float16) and ``CACHE/minilm/source.json``,
which says it is a float16 copy and of what. The learner loads any directory's weights in
float32 (:mod:`fedlabels.learners.text_encoder`), so a run with ``FEDLABELS_CACHE=CACHE``
uses MiniLM's weights rounded to float16: each changes by at most 2^-11 of itself where it
is above float16's normal range (6.1e-5; smaller ones lose more), and the encoder's output
for a sentence moved by 0.0027 where its largest entry is 5.8 (2026-11-28). Say so beside
the figures of such a run.

    fedlabels fetch minilm                    # once, here
    python benchmarks/pack_minilm.py .devcache
    # a device call carrying .devcache (the tweets too: fedlabels fetch tweets, 2.5 MB):
    FEDLABELS_CACHE=.devcache python benchmarks/text_fedct.py --modes lora --seeds 0 \\
        --datasets tweets --device cuda --out benchmarks/results/text_fedct_lora_gpu.json

An existing ``CACHE/minilm`` is replaced only if it is such a copy (never a fetched
encoder); the copy is written beside it and moved into place as ``fedlabels fetch`` moves
what it fetched (``commit_staged``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

COPY_MARK = "float16 copy of the fetched MiniLM (benchmarks/pack_minilm.py)"
FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")


def pack(out_cache: Path) -> Path:
    """Write the float16 copy into ``out_cache/minilm``; returns that directory."""
    import torch
    from safetensors.torch import load_file, save_file

    from fedlabels.core.errors import FedLabelsError
    from fedlabels.downloads.cache import dataset_dir
    from fedlabels.downloads.fetch import commit_staged, file_sha256
    from fedlabels.downloads.minilm import _MARKER, CACHE_NAME, require_model_dir

    source = require_model_dir()
    fetched = dataset_dir(CACHE_NAME)
    target = Path(out_cache) / CACHE_NAME
    if target.resolve() == fetched.resolve():
        raise FedLabelsError(f"{target} is the fetched MiniLM itself; give another cache "
                             "directory for the copy.")
    if target.exists():
        marker = target / _MARKER
        try:
            is_copy = json.loads(marker.read_text()).get("copy") == COPY_MARK
        except (OSError, ValueError):
            is_copy = False
        if not is_copy:
            raise FedLabelsError(f"{target} exists and is not a float16 copy made by this "
                                 "script; move it away or give another cache directory.")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{CACHE_NAME}."))
    try:
        model = staging / "model"
        model.mkdir()
        for name in FILES:
            shutil.copy2(source / name, model / name)
        weights = load_file(str(source / "model.safetensors"))
        save_file({k: (v.to(torch.float16) if v.is_floating_point() else v).contiguous()
                   for k, v in weights.items()}, str(model / "model.safetensors"),
                  metadata={"format": "pt"})
        original = json.loads((fetched / _MARKER).read_text())
        commit_staged(staging, target, {
            "copy": COPY_MARK, "dtype": "float16", "of": original,
            "files": {name: file_sha256(model / name) for name in (*FILES, "model.safetensors")}},
            _MARKER)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def main(argv: list[str] | None = None) -> int:
    from fedlabels.core.errors import FedLabelsError

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("cache", type=Path, help="the cache directory to write (e.g. .devcache)")
    args = p.parse_args(argv)
    try:
        target = pack(args.cache)
    except FedLabelsError as exc:
        print(f"pack_minilm: {exc}", file=sys.stderr)
        return 2
    size = sum(f.stat().st_size for f in target.rglob("*") if f.is_file())
    print(f"{target}: {size / 2**20:.1f} MiB (weights in float16)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
