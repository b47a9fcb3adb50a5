"""Where torch learners run: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``, and their precision.

:func:`check_device` and :func:`check_precision` validate the settings without importing
torch (a run fails before any data is loaded); :func:`client_devices` resolves them on the
machine that trains, placing clients round-robin over the visible GPUs (``cuda``) or all on
one (``cuda:N``). ``auto`` is CUDA when torch sees a GPU, else the CPU. On the CPU in
``fp32`` nothing changes: the same seed gives the same result as before devices existed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fedlabels.core.errors import FedLabelsError

DEVICES = ("auto", "cpu", "cuda", "cuda:N")
PRECISIONS = ("fp32", "bf16")


def check_device(device: Any) -> str:
    """``device`` as given if it is one of :data:`DEVICES`, else a one-line error."""
    if not isinstance(device, str) or not re.fullmatch(r"auto|cpu|cuda(:\d+)?", device):
        raise FedLabelsError(f"device must be one of {', '.join(DEVICES)} (e.g. cuda:0), "
                             f"got {device!r}.")
    return device


def check_precision(precision: Any) -> str:
    if precision not in PRECISIONS:
        raise FedLabelsError(f"precision must be one of {', '.join(PRECISIONS)}, got "
                             f"{precision!r}.")
    return str(precision)


def check_cuda_graphs(device: str, batch_clients: str) -> None:
    """``cuda_graphs=on`` replays the step of clients trained together on CUDA: refuse it
    up front where they cannot be (the run checks the rest once its models are built)."""
    if device == "cpu" or batch_clients == "off":
        raise FedLabelsError(
            f"cuda_graphs=on replays the step of clients trained together on CUDA, not "
            f"with {'device=cpu' if device == 'cpu' else 'batch_clients=off'}; use "
            "device=cuda (or auto) with batch_clients=auto or on, or cuda_graphs=off.")


def cuda_count() -> int:
    """GPUs torch can use here (0 without CUDA or without a CUDA build of torch)."""
    import torch

    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def client_devices(device: str, n_clients: int) -> list[str]:
    """The device of each client: ``cpu`` for all, all on ``cuda:N``, or round-robin over
    the visible GPUs for ``cuda`` (and ``auto`` with a GPU)."""
    check_device(device)
    if device == "cpu":
        return ["cpu"] * n_clients
    count = cuda_count()
    if device == "auto":
        if count == 0:
            return ["cpu"] * n_clients
        device = "cuda"
    if count == 0:
        raise FedLabelsError(f"device {device} asked for, but torch sees no CUDA GPU here "
                             "(install a CUDA build of torch, docs/neural.md); use --device "
                             "cpu or auto (device=\"cpu\" or \"auto\" in Python).")
    if device == "cuda":
        return [f"cuda:{cid % count}" for cid in range(n_clients)]
    index = int(device.split(":")[1])
    if index >= count:
        raise FedLabelsError(f"device {device} asked for, but torch sees {count} GPU"
                             f"{'s' if count > 1 else ''} (cuda:0 to cuda:{count - 1}); pick "
                             "one of those or use --device cuda (round-robin).")
    return [device] * n_clients


def summary(devices: list[str], precision: str, asked: str = "cpu") -> dict[str, Any]:
    """What a result records: the device asked for, the devices used (one per client),
    the GPUs' names, and the precision."""
    used = sorted(set(devices))
    names = {}
    if any(d.startswith("cuda") for d in used):
        import torch

        names = {d: torch.cuda.get_device_name(torch.device(d)) for d in used
                 if d.startswith("cuda")}
    return {"asked": asked, "devices": used, "device_names": names,
            "precision": precision, "client_devices": list(devices)}


@contextmanager
def autocast(device: str, precision: str, cache: bool = True) -> Iterator[None]:
    """bf16 autocast on ``device`` when ``precision == "bf16"``; nothing otherwise.
    ``cache=False`` for a pass a CUDA graph captures (autocast's cache of cast weights
    would outlive the capture)."""
    if precision != "bf16":
        yield
        return
    import torch

    with torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16,
                        cache_enabled=cache):
        yield


def place_learners(learners: list[Any], devices: list[str], precision: str) -> None:
    """Put each torch learner on its device (learners without ``place`` stay where they are:
    scikit-learn models run on the CPU)."""
    for learner, device in zip(learners, devices, strict=True):
        place = getattr(learner, "place", None)
        if callable(place):
            place(device, precision)
