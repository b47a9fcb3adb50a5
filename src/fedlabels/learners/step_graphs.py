"""A group's training steps replayed as a CUDA graph (``cuda_graphs=on``).

On a GPU a batched FedCT step of small networks is bound by the host, not the device: the
paper-scale round on an H200 kept the GPU busy 28 ms of its 204 ms, the rest the Python
and launch work of each step (the autograd engine's backward call, Adam's ``foreach``
launches, the gather of the minibatch). A CUDA graph records one step's kernels once and
replays them with one launch, so the host's share of a step becomes one copy of the next
step's index and one replay.

:func:`replay_steps` runs a call's ``n`` steps as ``torch.cuda.graphs`` prescribes for a
whole training step: :data:`WARMUP_STEPS` steps run eagerly on a side stream (Adam's
moments, cuBLAS workspaces and autograd's buffers are created then), one step is captured
with the gradients unset (the captured backward writes them; nothing accumulates) and then
replayed for every remaining step, each after its minibatch index is copied into the
graph's fixed input buffer. Every step is a real step: the same minibatches in the same
order as the eager loop; Adam is the capturable form of the same update (its step count and
bias corrections on the device), so the weights equal the eager ones up to floating-point
rounding.

Where it applies (:func:`fedlabels.learners.batched.graphable`): a group on CUDA of
networks of ``Linear`` and ``ReLU`` layers (the MLP), at least :data:`MIN_STEPS` steps a
call, every step's minibatches planned and of one shape; anything else runs eagerly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from fedlabels.core.errors import FedLabelsError

#: steps run eagerly before the capture (the lazily created state of the step)
WARMUP_STEPS = 3
#: the fewest steps a call for which a capture pays (it costs about an eager step)
MIN_STEPS = 8


class CudaGraphs:
    """What :func:`replay_steps` needs of CUDA: one side stream for the eager warm-up and the
    capture (cuBLAS keeps its handles and workspaces per stream: warmed up on the stream
    that captures, none is created mid-capture), and the capture of a step into a graph
    that a replay runs on the current stream."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device)

    @contextmanager
    def warmup(self) -> Iterator[None]:
        """Run the body on the side stream, in order with the current stream's work."""
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            yield
        current.wait_stream(self.stream)

    def capture(self, step: Callable[[], None]) -> Callable[[], None]:
        """``step``'s kernels recorded on the side stream, not run; each call of the result
        runs them on the device's current stream (with clients on several GPUs the calling
        thread's current device may be another). Only this thread's calls are checked
        during the capture (``thread_local``): another client's thread may move its weights
        off the GPU meanwhile (``offload``), on its own stream, which the graph does not
        record."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.device(self.device), torch.cuda.graph(
                graph, stream=self.stream, capture_error_mode="thread_local"):
            step()

        def replay() -> None:
            with torch.cuda.device(self.device):
                graph.replay()

        return replay


def replay_steps(step: Callable[[torch.Tensor, torch.Tensor, list[int]], None],
                 next_index: Callable[[], tuple[torch.Tensor, torch.Tensor, list[int]]],
                 n_steps: int, opt: torch.optim.Optimizer, device: torch.device,
                 backend: CudaGraphs | None = None) -> None:
    """Run ``n_steps`` of ``step(index, sizes, lens)`` (gather, forward, backward, Adam on
    the device alone), each on the next index of ``next_index``: the first
    :data:`WARMUP_STEPS` eagerly on a side stream, one captured, the rest replayed. ``opt``
    must be capturable; every step's index has one shape and ``sizes`` stays the same.
    ``backend``: CUDA's streams and graphs (the default), or a stand-in for a test. A
    failure there is one line that names it and the way out (``cuda_graphs=off``)."""
    if n_steps <= WARMUP_STEPS:
        raise ValueError(f"a graph needs more than {WARMUP_STEPS} steps, got {n_steps}")
    cuda = CudaGraphs(device) if backend is None else backend
    try:
        with cuda.warmup():
            for _ in range(WARMUP_STEPS):
                opt.zero_grad(set_to_none=True)
                step(*next_index())
        at, sizes, lens = next_index()
        index = at.clone()  # the graph's input: each later step's index is copied into it
        opt.zero_grad(set_to_none=True)  # the captured backward writes the gradients afresh
        replay = cuda.capture(lambda: step(index, sizes, lens))
        replay()  # the captured step has not run yet: this is it
        for _ in range(n_steps - WARMUP_STEPS - 1):
            at, _, _ = next_index()
            index.copy_(at)
            replay()
    except RuntimeError as exc:  # torch's CUDA errors; the clients are mid-call
        text = str(exc).strip()
        raise FedLabelsError(
            f"replaying the clients' training step as a CUDA graph failed "
            f"({type(exc).__name__}: {text.splitlines()[0] if text else ''}); run with "
            "cuda_graphs=off (--cuda-graphs off).") from exc
