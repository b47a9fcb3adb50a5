"""The device check: GPU tests, then CPU (one thread) against GPU times on the same machine.

One prepared script for a CUDA machine, under 8 minutes. It runs ``pytest -m cuda`` and
prints, side by side, CPU (one thread) and GPU wall-clock times and their ratio for:

1. one paper-scale FedCT Fashion-MNIST round: m = 5, |U| = 50,000, 2,000 private per
   client, the paper's MLP 784-512-512-10, b = 50 local steps, every client predicting U;
2. one step of 100 clients with that MLP: one after another on the CPU, and trained
   together (stacked weights, ``vmap``) on the GPU (``fedlabels.learners.batched``);
3. one LoRA MiniLM FedCT round: m = 10, r = 8, |U| = 150, b = 5 (the paper's IMDB setting).

Data it needs (copy them along, about 34 MiB in all; without them it measures synthetic data of
the same shapes and says so, which times the same work):

* Fashion-MNIST: ``$FEDLABELS_CACHE/fashion_mnist/{train,t10k}-{images-idx3,labels-idx1}-
  ubyte.gz`` (about 31 MB, ``fedlabels fetch fashion_mnist``);
* tweets (``fedlabels fetch tweets``: the vaderSentiment sdist, about 2.5 MB);
* MiniLM's weights are 87 MiB in float32, over the 64 MiB a run may carry: the script
  builds a randomly initialised encoder of MiniLM's shape (6 layers, 384 wide, 12 heads),
  whose timing is the same; ``--minilm DIR`` uses a real directory instead.

Usage::

    python benchmarks/device_check.py              # on the CUDA machine (<= 8 minutes)
    python benchmarks/device_check.py --dry-run    # tiny, CPU only: checks the script (CI)
    python benchmarks/device_check.py --long-runs  # prints the long runs' commands only
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

import fedlabels as fl

#: the runs too long for the device check (docs/neural.md): three seeds each
LONG_RUNS = [
    *(f"fedlabels run --method {m} --dataset fashion_mnist --clients 5 --model "
      f"'{model}' --unlabeled 50000 --private-per-client 2000 --rounds 400 --period 50 "
      f"--eval-every 20 --device cuda --seed {s}"
      for model in ("mlp(hidden=512-512)", "cnn(arch=small)")
      for m in ("fedct", "fedavg", "local") for s in (0, 1, 2)),
    # the text grid: tweets and movie_reviews; FedCT, FedAvg, local, centralized; m = 10,
    # |U| = 150, b = 5, T = 100 rounds; three seeds (results in one JSON)
    *(f"python benchmarks/text_fedct.py --modes {mode} --seeds 0,1,2 --device cuda "
      f"--out benchmarks/results/text_fedct_{mode}_t100_gpu.json" for mode in ("lora", "full")),
    # FedCT's options that use U better (docs/beyond_paper.md): Fashion-MNIST at the issue's
    # T = 5,000 and the text grid, three seeds (results in benchmarks/results/)
    "python benchmarks/fedct_beyond.py --setting fashion --rounds 100 --seeds 0,1,2 "
    "--device cuda --variants 'fedct,fedavg,local,fedct[warmup_steps=200],"
    "fedct[warmup_steps=500],fedct[warmup_steps=200;vote_power=2]'",
    *(f"python benchmarks/fedct_beyond.py --setting {d} --seeds 0,1,2 --device cuda "
      f"--variants 'fedct,fedavg,local,fedct[warmup_steps=300],"
      f"fedct[warmup_steps=500;pseudo_weight=0.5],fedct[warmup_steps=300;quorum=0.8]'"
      for d in ("tweets", "movie_reviews")),
]


@dataclass(frozen=True)
class Scale:
    """Sizes of one check (the paper's, or tiny for ``--dry-run``)."""

    n_unlabeled: int
    per_client: int
    hidden: str
    period: int
    n_batched: int
    text_clients: int
    text_unlabeled: int
    text_period: int


PAPER = Scale(50_000, 2_000, "512-512", 50, 100, 10, 150, 5)
TINY = Scale(300, 40, "16", 2, 4, 3, 12, 1)


def timed(fn: Callable[[], object], device: str) -> float:
    """Seconds of ``fn()`` (the GPU synchronised before and after)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def fashion_federation(scale: Scale, notes: list[str]) -> fl.Federation:
    """The paper's Fashion-MNIST split, or synthetic images of its shape."""
    try:
        return fl.load_federation("fashion_mnist", clients=5, unlabeled=scale.n_unlabeled,
                                  private_per_client=scale.per_client, seed=0)
    except fl.DatasetNotFetchedError:
        notes.append("Fashion-MNIST not fetched: synthetic 28x28 images of the same shapes")
    rng = np.random.default_rng(0)
    n = scale.n_unlabeled + 5 * scale.per_client + 1000
    y = rng.integers(0, 10, n)
    X = (rng.random((n, 784), dtype=np.float32) * 0.5 + y[:, None] / 20).astype(np.float32)
    return fl.make_federation(X, y, clients=5, unlabeled=scale.n_unlabeled,
                              private=5 * scale.per_client, test=1000, scale="none",
                              seed=0, name="fashion-shaped")


def round_seconds(method: str, fed: fl.Federation, model: str, period: int,
                  device: str) -> float:
    """Wall-clock seconds of the second round of a run (the first warms up)."""
    stamps: list[float] = []
    fl.run(method, fed, model=model, rounds=2, period=period, seed=0, progress=False,
           threads=1, device=device, eval_every=2,
           on_round=lambda record: stamps.append(time.perf_counter()))
    return stamps[1] - stamps[0]


def batched_step_seconds(scale: Scale, device: str, together: bool, steps: int = 1) -> float:
    """Seconds per step of ``n_batched`` clients (64 private + 64 pseudo-labelled rows),
    over one ``train_steps`` call of ``steps`` steps per client (or one batched call)."""
    from fedlabels.learners import build_learner, parse_model_spec
    from fedlabels.learners.batched import TrainJob, train_together

    rng = np.random.default_rng(0)
    (spec,) = parse_model_spec(f"mlp(hidden={scale.hidden})")
    learners = [build_learner(spec, n_classes=10, random_state=i)
                for i in range(scale.n_batched)]
    X = rng.random((200, 784), dtype=np.float32)
    y = rng.integers(0, 10, 200)
    for ln in learners:
        ln.place(device)

    def step() -> None:
        jobs = [TrainJob(ln, X, y, steps, X, y) for ln in learners]
        if together:
            train_together(jobs)
        else:
            for job in jobs:
                job.learner.train_steps(job.X, job.y, steps, job.X_aux, job.y_aux)

    step()  # build the networks, warm up
    return min(timed(step, device) for _ in range(3)) / steps


def text_federation(scale: Scale, notes: list[str]) -> fl.Federation:
    try:
        return fl.load_federation("tweets", clients=scale.text_clients,
                                  unlabeled=scale.text_unlabeled, seed=0)
    except fl.DatasetNotFetchedError:
        notes.append("tweets not fetched: synthetic sentences of tweet length")
    rng = np.random.default_rng(0)
    words = np.array(["good", "bad", "movie", "great", "awful", "the", "was", "plot",
                      "happy", "sad", "film", "not"])
    n = scale.text_unlabeled + 40 * scale.text_clients + 200
    y = rng.integers(0, 2, n)
    X = np.empty(n, dtype=object)
    X[:] = [" ".join(rng.choice(words, rng.integers(8, 30))) for _ in range(n)]
    return fl.make_federation(X, y, clients=scale.text_clients,
                              unlabeled=scale.text_unlabeled, test=200, scale="none",
                              seed=0, name="tweet-shaped")


def minilm_shaped_dir(root: Path, tiny: bool) -> str:
    """A randomly initialised BERT of MiniLM's shape (or tiny), with a word-level tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import BertConfig, BertModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    words = [f"w{i}" for i in range(2000)]
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.save(str(root / "tokenizer.json"))
    size = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                intermediate_size=64) if tiny else dict(
        hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(vocab), max_position_embeddings=512, **size),
              add_pooling_layer=False).save_pretrained(str(root))
    return str(root)


def run_cuda_tests(dry_run: bool) -> int:
    command = [sys.executable, "-m", "pytest", "-q", "-m", "cuda", "tests"]
    if dry_run:
        command.append("--collect-only")
    print("$", " ".join(command), flush=True)
    return subprocess.call(command, cwd=Path(__file__).resolve().parents[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true",
                        help="tiny sizes on the CPU only: checks that the script works")
    parser.add_argument("--long-runs", action="store_true",
                        help="print the commands of the long runs and stop")
    parser.add_argument("--skip-tests", action="store_true", help="do not run pytest -m cuda")
    parser.add_argument("--minilm", metavar="DIR", help="a real MiniLM directory to time")
    args = parser.parse_args(argv)
    if args.long_runs:
        print("\n".join(LONG_RUNS))
        return 0
    scale = TINY if args.dry_run else PAPER
    has_gpu = torch.cuda.is_available() and not args.dry_run
    gpu = "cuda" if has_gpu else None
    if not has_gpu and not args.dry_run:
        print("no CUDA GPU here: only the CPU column is measured", file=sys.stderr)
    code = 0 if args.skip_tests else run_cuda_tests(args.dry_run)
    notes: list[str] = []
    rows: list[tuple[str, float, float | None]] = []
    torch.set_num_threads(1)

    fed = fashion_federation(scale, notes)
    model = f"mlp(hidden={scale.hidden})"
    rows.append((f"FedCT Fashion-MNIST round (m=5, |U|={scale.n_unlabeled:,}, b={scale.period})",
                 round_seconds("fedct", fed, model, scale.period, "cpu"),
                 None if gpu is None else round_seconds("fedct", fed, model, scale.period,
                                                        gpu)))
    steps = 2 if args.dry_run else 5
    rows.append((f"{scale.n_batched} clients, per step (CPU one by one, GPU together)",
                 batched_step_seconds(scale, "cpu", False, steps),
                 None if gpu is None else batched_step_seconds(scale, gpu, True, steps)))
    rows.append((f"{scale.n_batched} clients, per step, together on both",
                 batched_step_seconds(scale, "cpu", True, steps),
                 None if gpu is None else batched_step_seconds(scale, gpu, True, steps)))
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.minilm or minilm_shaped_dir(Path(tmp), tiny=args.dry_run)
        if args.minilm is None:
            notes.append("MiniLM: a randomly initialised encoder of its shape (same timing)")
        tfed = text_federation(scale, notes)
        spec = f"minilm(mode=lora,r=8,model_dir={model_dir},batch=16)"
        rows.append((f"LoRA MiniLM FedCT round (m={scale.text_clients}, "
                     f"|U|={scale.text_unlabeled}, b={scale.text_period})",
                     round_seconds("fedct", tfed, spec, scale.text_period, "cpu"),
                     None if gpu is None else round_seconds("fedct", tfed, spec,
                                                            scale.text_period, gpu)))
    name = torch.cuda.get_device_name(0) if has_gpu else "no GPU"
    print(f"\nCPU: one thread of this machine ({os.cpu_count()} cores); GPU: {name}; "
          f"torch {torch.__version__}{'; DRY RUN (tiny sizes)' if args.dry_run else ''}")
    print(f"{'work':<62} {'CPU s':>9} {'GPU s':>9} {'ratio':>8}")
    for label, cpu_s, gpu_s in rows:
        ratio = f"{cpu_s / gpu_s:7.1f}x" if gpu_s else "     n/a"
        shown = f"{gpu_s:9.3f}" if gpu_s is not None else "      n/a"
        print(f"{label:<62} {cpu_s:9.3f} {shown} {ratio}")
    for note in notes:
        print(f"note: {note}")
    print("\nlong runs (not part of this check; docs/neural.md): "
          "python benchmarks/device_check.py --long-runs")
    return code


if __name__ == "__main__":
    sys.exit(main())
