"""Clients' weights kept on their GPU while they fit, moved out otherwise (``offload``).

Many clients share one GPU. With ``offload=never`` every client keeps its weights, gradients
and Adam moments resident on its device (the default on the CPU, where there is nothing to
gain). With ``always`` a client's state rests in host memory (pinned where CUDA is present,
so the copies are asynchronous) and moves in for its turn, out afterwards. ``auto`` decides
per client after its first turn, once its network is built: it stays resident while the
device's free memory (:func:`free_memory`: free plus what torch's allocator holds unused)
keeps :data:`MARGIN` of the device's total beyond one more client's state (room for an
offloaded client's turn); later clients are moved out. Decisions are sticky, so no client
moves back and forth between rounds because memory fluctuates.

:func:`move_state` copies every tensor (parameters, gradients, buffers, optimiser moments)
exactly, so a run whose clients move out and in gives bit-identical results to a resident one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from fedlabels.core.errors import FedLabelsError

OFFLOADS = ("auto", "never", "always")
#: share of a GPU's total memory ``auto`` keeps free (activations, the allocator's slack)
MARGIN = 0.1


def check_offload(offload: Any) -> str:
    """``offload`` as given if it is one of :data:`OFFLOADS`, else a one-line error."""
    if offload not in OFFLOADS:
        raise FedLabelsError(f"offload must be one of {', '.join(OFFLOADS)}, got "
                             f"{offload!r}.")
    return str(offload)


def offloadable(learner: Any) -> bool:
    """Whether this learner's state can move out between turns (the torch MLP family:
    MLPs, CNNs, your own module; not scikit-learn models or the transformer learners,
    whose frozen encoder is shared)."""
    return callable(getattr(learner, "rest", None))


def _tensors(learner: Any) -> list[tuple[str, Any, Callable[[Any], None]]]:
    """Every tensor of a built learner's state, named, with a setter that swaps it."""
    out: list[tuple[str, Any, Callable[[Any], None]]] = []
    for mname, module in learner.model_.named_modules():
        for pname, p in module._parameters.items():
            if p is None:
                continue
            out.append((f"p:{mname}.{pname}", p.data, partial(setattr, p, "data")))
            if p.grad is not None:
                out.append((f"g:{mname}.{pname}", p.grad, partial(setattr, p, "grad")))
        for bname, b in module._buffers.items():
            if b is not None:
                out.append((f"b:{mname}.{bname}", b,
                            partial(module._buffers.__setitem__, bname)))
    for i, slots in enumerate(learner.optimizer_.state.values()):
        for key, value in slots.items():
            if key != "step" and hasattr(value, "device"):
                out.append((f"o:{i}.{key}", value, partial(slots.__setitem__, key)))
    return out


def move_state(learner: Any, where: str, cache: dict[str, Any] | None = None) -> None:
    """Copy a built learner's state to ``where`` (its ``device`` attribute is unchanged).

    Moving to the CPU reuses the buffers of ``cache`` (name -> tensor, filled here), pinned
    when CUDA is present; moving to a device allocates there and copies asynchronously
    from pinned memory.
    """
    import torch

    target = torch.device(where)
    pin = target.type == "cpu" and torch.cuda.is_available()
    for name, tensor, swap in _tensors(learner):
        if target.type == "cpu" and cache is not None:
            buf = cache.get(name)
            if buf is None or buf.shape != tensor.shape or buf.dtype != tensor.dtype:
                buf = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=pin)
                cache[name] = buf
            buf.copy_(tensor)
            swap(buf)
        else:
            swap(tensor.to(target, non_blocking=tensor.is_pinned(), copy=True))


def state_bytes(learner: Any) -> int:
    """Bytes of a built learner's state: parameters, gradients, buffers, optimiser moments."""
    return sum(t.numel() * t.element_size() for _, t, _ in _tensors(learner))


def free_memory(device: str) -> tuple[int, int]:
    """``(free, total)`` bytes of a CUDA device as this process can use them: the driver's
    free memory plus what torch's caching allocator holds but does not use."""
    import torch

    free, total = torch.cuda.mem_get_info(torch.device(device))
    unused = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return int(free + unused), int(total)


class Placement:
    """Which clients rest off their device between turns (module docstring).

    ``devices`` maps a client id to its device; ``memory`` is :func:`free_memory` (a fake
    figure in tests).
    """

    def __init__(self, asked: str, devices: dict[int, str],
                 memory: Callable[[str], tuple[int, int]] = free_memory) -> None:
        self.asked = check_offload(asked)
        self.devices = dict(devices)
        self.memory = memory
        self.offloaded: dict[int, bool] = {}
        self._lock = threading.Lock()  # clients trained together end their turns in threads

    @property
    def active(self) -> bool:
        """Whether any client may move: ``always``, or ``auto`` with a client on a GPU."""
        return self.asked == "always" or (
            self.asked == "auto" and any(d.startswith("cuda") for d in self.devices.values()))

    def decide(self, cid: int, learner: Any) -> bool:
        """Whether client ``cid`` (its state on its device now) rests off it after turns."""
        with self._lock:
            return self._decide(cid, learner)

    def _decide(self, cid: int, learner: Any) -> bool:
        if cid not in self.offloaded:
            device = self.devices[cid]
            if self.asked == "always":
                self.offloaded[cid] = True
            elif self.asked == "never" or not device.startswith("cuda"):
                self.offloaded[cid] = False
            else:
                free, total = self.memory(device)
                self.offloaded[cid] = free - state_bytes(learner) < MARGIN * total
        return self.offloaded[cid]

    def after_turn(self, cid: int, learner: Any) -> None:
        """Client ``cid``'s turn is over: move its learner's state out if it rests off its
        device (a learner not built yet, or one that cannot move, stays as it is)."""
        if not self.active or not offloadable(learner) or not hasattr(learner, "model_"):
            return
        if self.decide(cid, learner):
            learner.rest()

    def record(self) -> dict[str, Any]:
        """The result's ``device.offload`` entry: asked, and the clients that rested off
        their device."""
        return {"asked": self.asked,
                "offloaded_clients": sorted(c for c, off in self.offloaded.items() if off)}
