"""The device check: GPU tests, then CPU (one thread) against GPU times on the same machine.

One prepared script for a CUDA machine, under 8 minutes. It runs ``pytest -m cuda`` and
prints, side by side, CPU (one thread) and GPU wall-clock times and their ratio for:

1. one paper-scale FedCT Fashion-MNIST round: m = 5, |U| = 50,000, 2,000 private per
   client, the paper's MLP 784-512-512-10, b = 50 local steps, every client predicting U;
2. one step of 100 clients with that MLP: one after another on the CPU, and trained
   together (stacked weights, ``vmap``) on the GPU (``fedlabels.learners.batched``); the
   same for a distillation step (DD, ``fedlabels.learners.batched_distill``) and a DP-SGD
   step (DP-FedAvg, ``fedlabels.learners.batched_dpsgd``);
3. one LoRA MiniLM FedCT round: m = 10, r = 8, |U| = 150, b = 5 (the paper's IMDB setting);
4. on the GPU, the step of 2. with its minibatches built client by client on the host (as
   before) against gathered on the device (``benchmarks/batched_gather.py``).
5. what the settings cost on the GPU: a FedCT round of the paper's MLP and of
   ``cnn(arch=small)`` in fp32, under ``--precision bf16``, and with deterministic kernels
   (``CUBLAS_WORKSPACE_CONFIG=:4096:8``, ``torch.use_deterministic_algorithms(True)``, in a
   process of its own: cuBLAS reads its workspace setting when it starts).
6. on the GPU, the round of 1. and the 100 clients' training and distillation steps of 2.
   (at b = 50 steps a call) replayed as CUDA graphs (``--cuda-graphs on``,
   ``fedlabels.learners.step_graphs``).

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
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

import fedlabels as fl

#: the runs too long for the device check (docs/neural.md): three seeds each
LONG_RUNS = [
    *(f"fedlabels run --method {m} --dataset fashion_mnist --clients 5 --model "
      f"'{model}' --unlabeled 50000 --private-per-client 2000 --rounds 400 --period 50 "
      f"--eval-every 20 --device cuda --seed {s}"
      for model in ("mlp(hidden=512-512)", "cnn(arch=small)")
      for s in (0, 1, 2) for m in ("fedct", "fedavg", "local")),
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
    # the paper-scale FedCT run of position 0 with its steps replayed as CUDA graphs
    "fedlabels run --method fedct --dataset fashion_mnist --clients 5 --model "
    "'mlp(hidden=512-512)' --unlabeled 50000 --private-per-client 2000 --rounds 400 "
    "--period 50 --eval-every 20 --device cuda --cuda-graphs on --seed 0",
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
                  device: str, profile_dir: Path | None = None,
                  precision: str = "fp32", cuda_graphs: str = "off",
                  profile_name: str = "") -> tuple[float, float]:
    """Wall-clock seconds of a run's round without evaluation and of the test set's
    evaluation: a run of four rounds evaluated at the second and the last; the first warms
    up, the second is one round and one evaluation, the third a round alone (the last's
    evaluation also computes the run's final summary, not part of every evaluation).

    With ``profile_dir``, the third round (a round alone) runs under ``torch.profiler``
    (every thread's torch operations, and the GPU's kernels on a GPU) and ``cProfile``;
    their tables are written there as ``profile_<device><profile_name>_ops.txt`` and
    ``..._python.txt``."""
    import cProfile

    stamps: list[float] = []
    profilers: list[object] = []
    third_started: list[float] = []  # after the profilers' start, which is no round's

    def on_round(record: object) -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        stamps.append(time.perf_counter())
        if profile_dir is None or len(stamps) not in (2, 3):
            return
        if len(stamps) == 2:  # profile the third round (no evaluation)
            activities = [torch.profiler.ProfilerActivity.CPU]
            if device.startswith("cuda"):
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            ops = torch.profiler.profile(activities=activities)
            python = cProfile.Profile()
            profilers[:] = [ops, python]
            ops.start()
            python.enable()
            third_started.append(time.perf_counter())
        else:
            ops, python = profilers
            python.disable()  # type: ignore[attr-defined]
            ops.stop()  # type: ignore[attr-defined]
            write_profiles(ops, python, profile_dir, device, stamps[2] - third_started[0],
                           profile_name)

    fl.run(method, fed, model=model, rounds=4, period=period, seed=0, progress=False,
           threads=1, workers=1, device=device, eval_every=2, on_round=on_round,
           precision=precision, cuda_graphs=cuda_graphs)
    # the second round (a round and the evaluation) ends at stamps[1]; the third, a round
    # alone, starts there or, profiled, once the profilers have started
    train = stamps[2] - (third_started[0] if third_started else stamps[1])
    return train, max(0.0, stamps[1] - stamps[0] - train)


def write_profiles(ops: object, python: object, out: Path, device: str, wall: float,
                   name: str = "") -> None:
    """The profiled round's torch operations (by self CPU time, and by GPU time on a GPU)
    and its Python functions (by own time and by cumulative time), as text tables in
    ``out/profile_<device><name>_ops.txt`` and ``..._python.txt``."""
    import io
    import pstats

    out.mkdir(parents=True, exist_ok=True)
    tag = device.replace(":", "") + name
    averages = ops.key_averages()  # type: ignore[attr-defined]
    what = {"_text": "LoRA MiniLM FedCT round",
            "_100clients": "call of many clients trained together"}.get(name, "FedCT round")
    tables = [f"one {what} on {device}, {wall:.3f} s of wall clock (profiled)\n",
              averages.table(sort_by="self_cpu_time_total", row_limit=30)]
    if device.startswith("cuda"):
        tables.append(averages.table(sort_by="self_device_time_total", row_limit=20))
    (out / f"profile_{tag}_ops.txt").write_text("\n".join(tables))
    text = io.StringIO()
    stats = pstats.Stats(python, stream=text)  # type: ignore[arg-type]
    stats.sort_stats("tottime").print_stats(35)
    stats.sort_stats("cumulative").print_stats(35)
    (out / f"profile_{tag}_python.txt").write_text(text.getvalue())


def batched_step_seconds(scale: Scale, device: str, together: bool, steps: int = 1,
                         kind: str = "train", graphs: bool = False,
                         profile_dir: Path | None = None, model: str | None = None,
                         n_clients: int | None = None) -> float:
    """Seconds per step of ``n_batched`` clients over one call of ``steps`` steps per client
    (or one batched call): ``train`` (FedCT: 64 private + 64 pseudo-labelled rows), ``distill``
    (DD: 64 soft-labelled public + 64 private rows) or ``dpsgd`` (DP-FedAvg: a Poisson sample
    of 64 expected of 200 private rows, 16 in a dry run, σ = 1, C = 1; each client's own
    generator); a dry run times one call, not the best of three.
    ``graphs``: training or distillation steps replayed as a CUDA graph
    (``--cuda-graphs on``). With
    ``profile_dir``, one more call runs under the profilers (``profile_<device>_100clients_*``
    there: what the host does for a call of many clients). ``model`` (default: the paper's
    MLP) and ``n_clients`` (default ``n_batched``) time another network."""
    from fedlabels.learners import build_learner, parse_model_spec
    from fedlabels.learners.batch_jobs import DistillJob, DPSGDJob
    from fedlabels.learners.batched import TrainJob, train_together
    from fedlabels.learners.batched_distill import distill_together
    from fedlabels.learners.batched_dpsgd import dpsgd_together
    from fedlabels.learners.dpsgd import DPSGDConfig, dpsgd_steps
    from fedlabels.learners.resident_rows import ResidentRows

    rng = np.random.default_rng(0)
    (spec,) = parse_model_spec(model or f"mlp(hidden={scale.hidden})")
    learners = [build_learner(spec, n_classes=10, random_state=i)
                for i in range(n_clients or scale.n_batched)]
    X = rng.random((200, 784), dtype=np.float32)
    y = rng.integers(0, 10, 200)
    soft = rng.dirichlet(np.ones(10), size=200).astype(np.float32)
    # a dry run checks the script, not the times: a smaller DP-SGD sample, one timed call
    config = DPSGDConfig(1.0, (16 if scale is TINY else 64) / 200, 1.0)
    noise = [np.random.default_rng([1, i]) for i in range(len(learners))]
    for ln in learners:
        ln.place(device)
    rows = ResidentRows()  # as in a run: the rows stay on the device between calls

    def step() -> None:
        if kind == "train":
            jobs = [TrainJob(ln, X, y, steps, X, y) for ln in learners]
            if together:
                train_together(jobs, rows, graphs)
            else:
                for job in jobs:
                    job.learner.train_steps(job.X, job.y, steps, job.X_aux, job.y_aux)
        elif kind == "distill":
            djobs = [DistillJob(ln, X, soft, steps, X, y) for ln in learners]
            if together:
                distill_together(djobs, graphs)
            else:
                for dj in djobs:
                    dj.learner.distill_steps(dj.X_soft, dj.P_soft, steps, X=dj.X, y=dj.y)
        else:
            pjobs = [DPSGDJob(ln, X, y, steps, config, g)
                     for ln, g in zip(learners, noise, strict=True)]
            if together:
                dpsgd_together(pjobs, rows)
            else:
                for pj in pjobs:
                    dpsgd_steps(pj.learner, pj.X, pj.y, steps, config, pj.rng)

    step()  # build the networks, warm up
    best = min(timed(step, device) for _ in range(1 if scale is TINY else 3)) / steps
    if profile_dir is not None:
        profiled_call(step, device, profile_dir, "_100clients")
    return best


def dpsgd_cnn_line(n_clients: int, device: str, steps: int, scale: Scale) -> str:
    """A DP-SGD step (DP-FedAvg's: a Poisson sample of 64 expected of 200 rows, σ = 1,
    C = 1) of ``n_clients`` clients of the small CNN on ``device``, together (every
    example's gradient by ``torch.func``, vmapped over the clients too) against one by
    one on the same device."""
    def step(together: bool) -> float:
        return batched_step_seconds(scale, device, together, steps, "dpsgd",
                                    model="cnn(arch=small)", n_clients=n_clients)

    alone, together = step(False), step(True)
    return (f"DP-SGD step of {n_clients} small-CNN clients on {device}: one by one "
            f"{alone * 1e3:.1f} ms, together {together * 1e3:.1f} ms "
            f"({alone / together:.2f}x)")


def by_hand_line(scale: Scale, device: str, calls: int) -> str:
    """The training call of a FedCT round's 5 clients (b steps, the paper's MLP, each with
    64 private and 64 pseudo-labelled rows) with the step by hand and the fused Adam (this
    version) against autograd and ``foreach`` (as before 2026-11-28), the two interleaved
    call by call on ``device`` (``benchmarks/batched_overhead.py --baseline autograd``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from batched_overhead import autograd_version, compare

    f = compare(autograd_version(), clients=5, calls=calls, rows_kind="fedct",
                steps=scale.period, model=f"mlp(hidden={scale.hidden})", features=784,
                device=device)
    return (f"the MLP's step by hand and fused Adam against autograd and foreach, 5 "
            f"clients' call of b = {scale.period} steps on {device}: {f['baseline_ms']} -> "
            f"{f['current_ms']} ms a call ({f['ratio']}x; paired {f['paired_ratio']}x; "
            f"largest weight gap {f['max_weight_gap']:.1e})")


def profiled_call(fn: Callable[[], object], device: str, out: Path, name: str) -> None:
    """``fn()`` once under ``torch.profiler`` and ``cProfile``, their tables written to
    ``out`` (:func:`write_profiles`)."""
    import cProfile

    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    ops, python = torch.profiler.profile(activities=activities), cProfile.Profile()
    ops.start()
    python.enable()
    wall = timed(fn, device)
    python.disable()
    ops.stop()
    write_profiles(ops, python, out, device, wall, name)


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


def lora_spec(model_dir: str) -> str:
    """The timed text model: MiniLM (or its shape) with LoRA r = 8, batches of 16."""
    return f"minilm(mode=lora,r=8,model_dir={model_dir},batch=16)"


def text_run_seconds(fed: fl.Federation, spec: str, rounds: int, period: int,
                     device: str) -> tuple[float, float]:
    """Wall-clock seconds and final mean accuracy of one whole FedCT run (evaluated at
    its end only). Every tenth of its rounds (every round under ten) prints a line
    ``LoRA run: round R of T after S s``: a run stopped at the session's deadline still
    says how fast its rounds went."""
    start = time.perf_counter()
    every = max(1, rounds // 10)

    def progress(record: Any) -> None:
        if record.round % every == 0:
            print(f"LoRA run: round {record.round} of {rounds} after "
                  f"{time.perf_counter() - start:.1f} s", flush=True)

    result = fl.run("fedct", fed, model=spec, rounds=rounds, period=period, seed=0,
                    progress=False, threads=1, workers=1, device=device, eval_every=rounds,
                    on_round=progress)
    return time.perf_counter() - start, float(result.final["mean_accuracy"])


def whole_text_run(fed: fl.Federation, spec: str, scale: Scale, device: str,
                   real: bool) -> None:
    """Time and print one whole LoRA MiniLM FedCT run (T = 100 rounds; 2 in a dry run)."""
    rounds = 2 if scale is TINY else 100
    seconds, accuracy = text_run_seconds(fed, spec, rounds, scale.text_period, device)
    print(f"whole LoRA MiniLM FedCT run on {device} (m={scale.text_clients}, T={rounds} "
          f"rounds of b={scale.text_period}): {seconds:.1f} s"
          f"{'' if scale is TINY else ' (goal: <= 180 s on an H100)'}, "
          f"final mean accuracy {accuracy:.3f}"
          + ("" if real else " (random encoder: timing only)"), flush=True)


def text_run_only(scale: Scale, device: str, minilm: str | None) -> int:
    """``--text-run-only``: the whole LoRA MiniLM FedCT run and nothing else."""
    notes: list[str] = []
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = minilm or minilm_shaped_dir(Path(tmp), tiny=scale is TINY)
        fed = text_federation(scale, notes)
        whole_text_run(fed, lora_spec(model_dir), scale, device, real=minilm is not None)
    for note in notes:
        print(f"note: {note}")
    return 0


def long_run_argv(line: str, out_dir: Path, index: int,
                  checkpoint: bool = False) -> list[str]:
    """One line of ``LONG_RUNS`` as an argument list for this interpreter; a ``fedlabels run``
    writes its result to ``out_dir/NN.json``, and no checkpoint unless ``checkpoint`` (a
    stopped run still writes its completed rounds; the CNN's checkpoint is 100 MB a
    round)."""
    argv = shlex.split(line)
    if argv[0] == "fedlabels":
        return [sys.executable, "-m", "fedlabels", *argv[1:],
                "--output", str(out_dir / f"{index:02d}.json"),
                *([] if checkpoint else ["--no-checkpoint"])]
    return [sys.executable, *argv[1:]]


def execute_long_runs(seconds: float, parallel: int, out_dir: Path,
                      select: list[int] | None = None,
                      keep_checkpoints: bool = False,
                      grace: float = 5.0) -> list[dict[str, object]]:
    """Run the long runs in ``LONG_RUNS`` order, ``parallel`` at a time, until ``seconds``
    have passed; runs still going then are stopped (SIGTERM, and SIGKILL for one still
    there ``grace`` seconds later) and reported as such, with the last round they
    evaluated. Each run's output goes to ``out_dir/NN.log`` (a ``fedlabels run``
    also writes ``NN.json`` and ``NN.rounds.csv``); it writes no checkpoint
    (``NN.checkpoint.npz``, 45-100 MB at the paper's scale, rewritten as the run goes) unless
    ``keep_checkpoints``, and any left (a run of another kind) is removed when it ends.
    The records also go to ``out_dir/summary.json``. Returns one record per run."""
    import json
    out_dir.mkdir(parents=True, exist_ok=True)
    root = Path(__file__).resolve().parents[1]
    deadline = time.monotonic() + seconds
    queue = [(i, LONG_RUNS[i]) for i in (select if select is not None
                                          else range(len(LONG_RUNS)))]
    running: dict[int, tuple[subprocess.Popen[bytes], float, object]] = {}
    records: list[dict[str, object]] = []

    def finish(index: int, status: str) -> None:
        _, started, log = running.pop(index)
        log.close()  # type: ignore[attr-defined]
        record: dict[str, object] = {"index": index, "command": LONG_RUNS[index],
                                     "status": status,
                                     "wall_s": round(time.monotonic() - started, 1)}
        result = out_dir / f"{index:02d}.json"
        if status == "done" and result.exists():
            data = json.loads(result.read_text())
            record["mean_accuracy"] = data["final"]["mean_accuracy"]
            record.update(time_split(data))
        elif status != "done":
            lines = (out_dir / f"{index:02d}.log").read_text(errors="replace").splitlines()
            record["last_output"] = next((x for x in reversed(lines) if x.strip()), "")
            record.update(last_evaluated(out_dir / f"{index:02d}.rounds.csv"))
        if not keep_checkpoints:  # and a checkpoint's temporary file, if it was stopped
            for path in [out_dir / f"{index:02d}.checkpoint.npz",  # mid-write
                         *out_dir.glob(f".{index:02d}.checkpoint.npz.*.tmp")]:
                path.unlink(missing_ok=True)
        records.append(record)
        split = (f" (run {record['run_wall_s']} s, rounds {record['rounds_s']} s, "
                 f"checkpoints {record['checkpoint_s']} s of it)"
                 if "run_wall_s" in record else "")
        print(f"long run {index:02d} {status} after {record['wall_s']} s: "
              f"{record.get('mean_accuracy', '')}{split}  {LONG_RUNS[index]}", flush=True)

    while (queue or running) and time.monotonic() < deadline:
        while queue and len(running) < parallel:
            index, line = queue.pop(0)
            log = (out_dir / f"{index:02d}.log").open("wb")
            proc = subprocess.Popen(long_run_argv(line, out_dir, index, keep_checkpoints),
                                    cwd=root,
                                    stdout=log, stderr=subprocess.STDOUT)
            running[index] = (proc, time.monotonic(), log)
        for index in list(running):
            code = running[index][0].poll()
            if code is not None:
                finish(index, "done" if code == 0 else f"failed ({code})")
        time.sleep(0.2)  # a finished run's place is taken within 0.2 s
    for proc, _, _ in running.values():  # all at once: one by one outlasted the margin
        proc.terminate()
    for index in list(running):
        proc = running[index][0]
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        finish(index, "stopped at the deadline")
    for index, line in queue:
        records.append({"index": index, "command": line, "status": "not started"})
    (out_dir / "summary.json").write_text(json.dumps(records, indent=1))
    return records


def time_split(result: dict[str, Any]) -> dict[str, object]:
    """Where a finished run's time went, from its result: the run's own wall seconds (the
    process's start and imports are not in them), its rounds' (each from the server's
    first message to the last reply, evaluation included), and the run's seconds on
    checkpoints (copies of the state and waits for a file; ``None`` without one)."""
    checkpoints = result.get("provenance", {}).get("checkpoints")
    return {"run_wall_s": round(result["wall_seconds"], 1),
            "rounds_s": round(sum(r["seconds"] for r in result["rounds"]), 1),
            "checkpoint_s": None if checkpoints is None
            else round(checkpoints["seconds_in_run"], 1)}


def last_evaluated(rounds_csv: Path) -> dict[str, object]:
    """The last round of a run's per-round table with a test accuracy, and that accuracy
    (nothing if the run wrote no table or evaluated no round)."""
    import csv

    if not rounds_csv.is_file():
        return {}
    with rounds_csv.open(newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("acc_mean")]
    if not rows:
        return {}
    return {"rounds_evaluated": int(rows[-1]["round"]),
            "mean_accuracy_at_last_evaluation": float(rows[-1]["acc_mean"])}


def run_cuda_tests(dry_run: bool) -> int:
    """``pytest -m cuda`` over the test files that hold such tests (collecting the others
    would need every optional extra, which a bare CUDA machine may lack)."""
    root = Path(__file__).resolve().parents[1]
    files = sorted(str(f.relative_to(root)) for f in (root / "tests").glob("test_*.py")
                   if "pytest.mark.cuda" in f.read_text())
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-m", "cuda",
               *files]
    if dry_run:  # the tests found, a count per file (not every test's name)
        command += ["--collect-only", "-q"]
    print("$", " ".join(command), flush=True)
    return subprocess.call(command, cwd=root)


def settings_models(scale: Scale) -> list[str]:
    """The networks whose settings are timed: the paper's MLP and the small CNN (a dry
    run's with minibatches of 16, not 64: its rounds check the script)."""
    cnn = "cnn(arch=small,batch_size=16)" if scale is TINY else "cnn(arch=small)"
    return [f"mlp(hidden={scale.hidden})", cnn]


def settings_federation(fed: fl.Federation, scale: Scale) -> fl.Federation:
    """The round's federation ``fed`` with 1,000 test images: the settings rows time the
    training, and a run evaluates its test set at its end whatever it is asked. A dry run
    keeps 50 test and 50 public images (a CNN on one CPU thread predicts about 1,000 a
    second) and 3 of the 5 clients (FedCT's fewest with a majority vote): its rows check
    the plumbing, and its four runs in this process took 2.7 CPU-s, not 4.4 s."""
    import dataclasses

    if scale is not TINY:
        return dataclasses.replace(fed, X_test=fed.X_test[:1000], y_test=fed.y_test[:1000])
    return dataclasses.replace(fed, X_test=fed.X_test[:50], y_test=fed.y_test[:50],
                               X_public=fed.X_public[:50], y_public=fed.y_public[:50],
                               clients=fed.clients[:3])


def deterministic_seconds(scale: Scale, device: str, dry_run: bool) -> list[float]:
    """Seconds of a FedCT round of each :func:`settings_models` network with deterministic
    kernels, measured in a fresh process (cuBLAS takes ``CUBLAS_WORKSPACE_CONFIG`` when it
    starts, so this process, already running, cannot switch)."""
    import json

    env = {**os.environ, "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    argv = [sys.executable, str(Path(__file__).resolve()), "--deterministic-rounds", device,
            *(["--dry-run"] if dry_run else [])]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    line = next(x for x in reversed(out.splitlines()) if x.startswith("DETERMINISTIC "))
    return [float(x) for x in json.loads(line.split(" ", 1)[1])]


def run_deterministic_rounds(scale: Scale, device: str) -> None:
    """The child of :func:`deterministic_seconds`: deterministic kernels on, then the rounds."""
    import json

    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.set_num_threads(1)
    fed = settings_federation(fashion_federation(scale, []), scale)
    seconds = [round_seconds("fedct", fed, m, scale.period, device)[0]
               for m in settings_models(scale)]
    print("DETERMINISTIC " + json.dumps(seconds), flush=True)


def print_setting(label: str, base_s: float, setting_s: float) -> None:
    """A setting's round against the same round in fp32 (cost = its time over fp32's)."""
    print(f"{label:<62} {base_s:9.4f} {setting_s:9.4f} {setting_s / base_s:7.2f}x", flush=True)


def or_failure(label: str, seconds: Callable[[], float]) -> float | None:
    """``seconds()``, or ``None`` with the failure printed: a row of code not yet run on a
    GPU (``--cuda-graphs``) must not end the check and lose the rows after it."""
    try:
        return seconds()
    except Exception as exc:  # reported: the check goes on
        print(f"{label}: FAILED: {type(exc).__name__}: {exc}", flush=True)
        return None


def print_row(label: str, cpu_s: float | None, gpu_s: float | None) -> None:
    def shown(x: float | None) -> str:
        return f"{x:9.3f}" if x is not None else "      n/a"

    ratio = f"{cpu_s / gpu_s:7.1f}x" if cpu_s and gpu_s else "     n/a"
    print(f"{label:<62} {shown(cpu_s)} {shown(gpu_s)} {ratio}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true",
                        help="tiny sizes on the CPU only: checks that the script works")
    parser.add_argument("--long-runs", action="store_true",
                        help="print the commands of the long runs and stop")
    parser.add_argument("--execute-long", type=float, metavar="SECONDS",
                        help="run the long runs, --parallel at a time, for SECONDS, then stop")
    parser.add_argument("--parallel", type=int, default=1, metavar="N",
                        help="long runs at a time (with --execute-long; default 1)")
    parser.add_argument("--select", metavar="I,J,..",
                        help="which long runs (their 0-based positions in --long-runs)")
    parser.add_argument("--out-dir", default="benchmarks/results/long_runs", metavar="DIR",
                        help="where --execute-long writes each run's log and JSON")
    parser.add_argument("--keep-checkpoints", action="store_true",
                        help="have each long run write its checkpoint and keep it (by "
                             "default they run with --no-checkpoint: 45-100 MB a file, only "
                             "needed to resume one)")
    parser.add_argument("--skip-tests", action="store_true", help="do not run pytest -m cuda")
    parser.add_argument("--skip-text-run", action="store_true",
                        help="do not time the whole LoRA MiniLM FedCT run on the GPU")
    parser.add_argument("--skip-offload", action="store_true",
                        help="do not time weights resident against moved out (GPU only)")
    parser.add_argument("--skip-gather", action="store_true",
                        help="do not time the batched step's minibatches built client by "
                             "client against gathered on the device")
    parser.add_argument("--skip-cpu-text", action="store_true",
                        help="do not time the LoRA MiniLM round on the CPU (about three "
                             "minutes of one thread) where a GPU is timed")
    parser.add_argument("--profile", metavar="DIR",
                        help="profile one FedCT Fashion-MNIST round, one call of 100 clients "
                             "trained together and one LoRA MiniLM round (on the GPU where "
                             "there is one) and write the tables to DIR")
    parser.add_argument("--minilm", metavar="DIR", help="a real MiniLM directory to time")
    parser.add_argument("--skip-settings", action="store_true",
                        help="do not time bf16 and deterministic kernels against fp32")
    parser.add_argument("--text-run-only", action="store_true",
                        help="time the whole LoRA MiniLM FedCT run (T = 100) and nothing else")
    parser.add_argument("--deterministic-rounds", metavar="DEVICE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.deterministic_rounds is not None:  # the child of deterministic_seconds
        run_deterministic_rounds(TINY if args.dry_run else PAPER, args.deterministic_rounds)
        return 0
    if args.long_runs:
        print("\n".join(LONG_RUNS))
        return 0
    if args.execute_long is not None:
        if args.parallel < 1:
            parser.error("--parallel must be at least 1")
        select = None if args.select is None else [int(i) for i in args.select.split(",")]
        if select is not None and any(not 0 <= i < len(LONG_RUNS) for i in select):
            parser.error(f"--select takes positions 0..{len(LONG_RUNS) - 1}")
        records = execute_long_runs(args.execute_long, args.parallel, Path(args.out_dir),
                                    select, args.keep_checkpoints)
        done = sum(r["status"] == "done" for r in records)
        print(f"{done} of {len(records)} long runs finished")
        return 0
    scale = TINY if args.dry_run else PAPER
    has_gpu = torch.cuda.is_available() and not args.dry_run
    gpu = "cuda" if has_gpu else None
    if args.text_run_only:
        return text_run_only(scale, gpu or "cpu", args.minilm)
    if not has_gpu and not args.dry_run:
        print("no CUDA GPU here: only the CPU column is measured", file=sys.stderr)
    started = time.monotonic()

    def so_far(part: str) -> None:  # where the check's time goes, should it be cut short
        print(f"(check: {time.monotonic() - started:.0f} s before {part})", flush=True)

    code = 0 if args.skip_tests else run_cuda_tests(args.dry_run)
    so_far("the rows")
    notes: list[str] = []
    torch.set_num_threads(1)
    name = torch.cuda.get_device_name(0) if has_gpu else "no GPU"
    print(f"\nCPU: one thread of this machine ({os.cpu_count()} cores); GPU: {name}; "
          f"torch {torch.__version__}{'; DRY RUN (tiny sizes)' if args.dry_run else ''}")
    print(f"{'work':<62} {'CPU s':>9} {'GPU s':>9} {'ratio':>8}", flush=True)

    fed = fashion_federation(scale, notes)
    model = f"mlp(hidden={scale.hidden})"
    profile = None if args.profile is None else Path(args.profile)
    gpu_round = (None, None) if gpu is None else round_seconds(
        "fedct", fed, model, scale.period, gpu, profile)
    cpu_round = round_seconds("fedct", fed, model, scale.period, "cpu",
                              profile if gpu is None else None)
    print_row(f"FedCT Fashion-MNIST round (m=5, |U|={scale.n_unlabeled:,}, b={scale.period})",
              cpu_round[0], gpu_round[0])
    print_row("  its evaluation of the test set (every client)", cpu_round[1], gpu_round[1])
    if gpu is not None:  # the same round with its steps replayed as CUDA graphs
        label = "  the same round, --cuda-graphs on"
        print_row(label, cpu_round[0], or_failure(label, lambda: round_seconds(
            "fedct", fed, model, scale.period, gpu, cuda_graphs="on")[0]))
    # the paper-scale run: 400 rounds, evaluated every 20 (LONG_RUNS), loading aside
    whole = [None if r[0] is None else 400 * r[0] + 20 * r[1] for r in (cpu_round, gpu_round)]
    print_row("  400 such rounds, evaluated every 20 (T = 20,000; estimate)", *whole)
    steps = 2 if args.dry_run else 5
    gpu_step = None if gpu is None else batched_step_seconds(scale, gpu, True, steps,
                                                             profile_dir=profile)
    cpu_alone = batched_step_seconds(scale, "cpu", False, steps)  # a client's steps: 1 call
    print_row(f"{scale.n_batched} clients, per step (CPU one by one, GPU together)",
              cpu_alone, gpu_step)
    if gpu is not None:  # a FedCT round calls with b steps: the per-call work amortised
        print_row(f"  the same, {scale.period} steps a call on the GPU (a round's b)",
                  cpu_alone, batched_step_seconds(scale, gpu, True, scale.period))
        label = f"  the same, {scale.period} steps a call, CUDA graphs"
        print_row(label, cpu_alone, or_failure(label, lambda: batched_step_seconds(
            scale, gpu, True, scale.period, graphs=True)))
    print_row(f"{scale.n_batched} clients, per step, together on both",
              batched_step_seconds(scale, "cpu", True, steps,
                                   profile_dir=profile if gpu is None else None), gpu_step)
    if gpu is not None:
        print_row(f"{scale.n_batched} clients, per step, one by one on both",
                  cpu_alone, batched_step_seconds(scale, gpu, False, steps))
    if gpu is not None or args.dry_run:  # what the MLP's step by hand buys, side by side
        print(by_hand_line(scale, gpu or "cpu", 2 if args.dry_run else 10), flush=True)
    # (together on the CPU: benchmarks/batched_kinds.py, left out here to save the time)
    for kind, label in (("distill", "distillation (DD)"), ("dpsgd", "DP-SGD (DP-FedAvg)")):
        alone = batched_step_seconds(scale, "cpu", False, steps, kind)
        print_row(f"{scale.n_batched} clients, {label} step (CPU one by one, GPU together)",
                  alone,
                  None if gpu is None else batched_step_seconds(scale, gpu, True, steps, kind))
        if gpu is not None and kind == "distill":
            label = f"  the same, {scale.period} steps a call, CUDA graphs"
            print_row(label, alone, or_failure(label, lambda: batched_step_seconds(
                scale, gpu, True, scale.period, "distill", graphs=True)))
    # the papers' CNNs train together since batch normalisation and dropout do (CIFAR-10's
    # network on Fashion-MNIST's 28 x 28 images; a tenth of the clients, and one step a
    # call on the CPU: there a client's step takes 0.3 s on one thread)
    cnn, n_cnn = "cnn(arch=cifar10)", max(2, scale.n_batched // 10)
    label = f"{n_cnn} clients, CIFAR-10 CNN step (CPU one by one, GPU together)"
    cnn_alone = batched_step_seconds(scale, "cpu", False, 1, model=cnn, n_clients=n_cnn)
    print_row(label, cnn_alone, None if gpu is None else or_failure(
        label, lambda: batched_step_seconds(scale, gpu, True, steps, model=cnn,
                                            n_clients=n_cnn)))
    if gpu is not None:
        label = f"{n_cnn} clients, CIFAR-10 CNN step, one by one on both"
        print_row(label, cnn_alone, or_failure(label, lambda: batched_step_seconds(
            scale, gpu, False, steps, model=cnn, n_clients=n_cnn)))
    if gpu is not None or args.dry_run:  # DP-SGD of a CNN: per-example gradients together
        print(dpsgd_cnn_line(n_cnn, gpu or "cpu", 1 if args.dry_run else steps, scale),
              flush=True)
    if gpu is not None and not args.skip_offload:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from gpu_offload import offload_comparison

        figures = offload_comparison(scale.n_batched, gpu)
        print(f"offload: one FedCT round of {scale.n_batched} clients on {gpu}: "
              f"{figures}", flush=True)
    if not args.skip_gather and (gpu is not None or args.dry_run):  # host against device
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from batched_gather import gather_comparison

        figures = gather_comparison(scale.n_batched, gpu or "cpu", model, steps=steps,
                                    repeats=1 if args.dry_run else 5)
        print(f"minibatches: a step of {scale.n_batched} clients together on {gpu or 'cpu'} "
              f"({figures['model']}): {figures['per_client_step_ms']:.2f} ms with its "
              f"minibatch built client by client, {figures['device_step_ms']:.2f} ms gathered "
              f"on the device ({figures['step_speedup']:.1f}x); building alone "
              f"{figures['per_client_build_ms']:.2f} against {figures['device_build_ms']:.2f} "
              f"ms ({figures['build_speedup']:.1f}x)", flush=True)
    if not args.skip_settings and (gpu is not None or args.dry_run):
        so_far("the settings rows")
        device = gpu or "cpu"
        print(f"{'settings: a FedCT round on ' + device:<62} {'fp32 s':>9} {'other s':>9} "
              f"{'cost':>8}", flush=True)
        models, sfed = settings_models(scale), settings_federation(fed, scale)
        fp32 = [round_seconds("fedct", sfed, m, scale.period, device)[0] for m in models]
        bf16 = [round_seconds("fedct", sfed, m, scale.period, device, precision="bf16")[0]
                for m in models]
        exact = deterministic_seconds(scale, device, args.dry_run)
        for m, base, half, det in zip(models, fp32, bf16, exact, strict=True):
            print_setting(f"  {m}, --precision bf16", base, half)
            print_setting(f"  {m}, deterministic kernels", base, det)
    so_far("the LoRA round")
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.minilm or minilm_shaped_dir(Path(tmp), tiny=args.dry_run)
        if args.minilm is None:
            notes.append("MiniLM: a randomly initialised encoder of its shape (same timing)")
        tfed = text_federation(scale, notes)
        spec = lora_spec(model_dir)
        text_cpu = (None, None) if args.skip_cpu_text and gpu is not None else round_seconds(
            "fedct", tfed, spec, scale.text_period, "cpu", profile if gpu is None else None,
            profile_name="_text")
        text_gpu = (None, None) if gpu is None else round_seconds(
            "fedct", tfed, spec, scale.text_period, gpu, profile, profile_name="_text")
        print_row(f"LoRA MiniLM FedCT round (m={scale.text_clients}, "
                  f"|U|={scale.text_unlabeled}, b={scale.text_period})",
                  text_cpu[0], text_gpu[0])
        print_row("  its evaluation of the test set (every client)", text_cpu[1], text_gpu[1])
        if not args.skip_text_run:
            whole_text_run(tfed, spec, scale, gpu or "cpu", real=args.minilm is not None)
    for note in notes:
        print(f"note: {note}")
    print("\nlong runs (not part of this check; docs/neural.md): "
          "python benchmarks/device_check.py --long-runs")
    return code


if __name__ == "__main__":
    sys.exit(main())
