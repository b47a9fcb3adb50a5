"""On a CUDA GPU (skipped elsewhere; benchmarks/device_check.py runs them): the GPU run
matches the CPU run to rounding, repeats exactly with deterministic settings, and clients
trained together on the GPU match clients trained one by one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fedlabels as fl

pytestmark = pytest.mark.cuda


def weights(result):
    return np.concatenate([m.get_weights() for m in result.client_models])


@pytest.fixture(scope="module")
def fed():
    return fl.load_federation("digits", clients=3, seed=0)


@pytest.mark.parametrize("model", ["mlp(hidden=64)", "cnn(arch=small)"])
def test_gpu_run_matches_the_cpu_run(fed, model, monkeypatch):
    # full fp32 on the GPU (cuDNN's convolutions default to TF32, 10-bit mantissas)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    cpu = fl.run("fedct", fed, model=model, rounds=2, period=5, seed=0, progress=False,
                 workers=1)
    gpu = fl.run("fedct", fed, model=model, rounds=2, period=5, seed=0, progress=False,
                 device="cuda", batch_clients="off")
    assert gpu.extra["device"]["devices"] == ["cuda:0"]
    assert gpu.extra["device"]["device_names"]["cuda:0"] == torch.cuda.get_device_name(0)
    diff = np.abs(weights(cpu) - weights(gpu))
    # Adam moves a weight by at most lr = 1e-3 a step whatever the gradient, so ten steps
    # part two runs by at most 0.02 where rounding flips a near-zero gradient's sign; the
    # bulk of the weights must agree to rounding
    assert diff.max() <= 0.02 + 1e-6
    print(f"{model}: |cpu - gpu| median {np.median(diff):.2e}, 99th percentile "
          f"{np.quantile(diff, 0.99):.2e}, max {diff.max():.2e}")
    assert np.quantile(diff, 0.99) < 5e-3 and np.median(diff) < 1e-4
    assert abs(cpu.final["mean_accuracy"] - gpu.final["mean_accuracy"]) < 0.1


def test_a_dropout_cnn_on_the_gpu_learns_like_on_the_cpu(fed):
    """Dropout masks come from the CUDA generator on the GPU and the CPU generator on the
    CPU, so the weights differ (measured on an H100: median 3.8e-3 after ten steps); the
    runs agree in what they learn."""
    kw = dict(model="cnn(arch=cifar10)", rounds=3, period=20, seed=0, progress=False)
    cpu = fl.run("fedct", fed, workers=1, **kw)
    gpu = fl.run("fedct", fed, device="cuda", batch_clients="off", **kw)
    assert gpu.extra["device"]["devices"] == ["cuda:0"]
    assert min(cpu.final["mean_accuracy"], gpu.final["mean_accuracy"]) > 0.3
    assert abs(cpu.final["mean_accuracy"] - gpu.final["mean_accuracy"]) < 0.15


def test_deterministic_settings_repeat_a_gpu_run_exactly(fed, monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    try:
        runs = [fl.run("fedct", fed, model="cnn(arch=small)", rounds=2, period=5, seed=0,
                       progress=False, device="cuda", batch_clients="off") for _ in range(2)]
    finally:
        torch.use_deterministic_algorithms(False)
    np.testing.assert_array_equal(weights(runs[0]), weights(runs[1]))


def test_clients_together_on_the_gpu_match_one_by_one(fed):
    runs = {mode: fl.run("fedct", fed, model="mlp(hidden=64)", rounds=2, period=5, seed=0,
                         progress=False, device="cuda", batch_clients=mode)
            for mode in ("off", "on")}
    assert runs["on"].extra["device"]["batched_clients"]
    assert np.abs(weights(runs["on"]) - weights(runs["off"])).max() < 5e-3


def test_auto_batches_on_cuda_and_bf16_runs(fed):
    result = fl.run("fedavg", fed, model="mlp(hidden=64)", rounds=2, period=5, seed=0,
                    progress=False, device="auto", precision="bf16")
    assert result.extra["device"]["batched_clients"]
    assert result.extra["device"]["precision"] == "bf16"
    assert result.final["mean_accuracy"] > 0.2


def test_transformer_learner_on_the_gpu(tmp_path):
    pytest.importorskip("transformers")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from device_check import minilm_shaped_dir, text_federation

    model_dir = minilm_shaped_dir(tmp_path, tiny=True)
    from device_check import TINY

    tfed = text_federation(TINY, [])
    spec = f"minilm(mode=lora,r=2,model_dir={model_dir})"
    cpu = fl.run("fedct", tfed, model=spec, rounds=1, period=2, seed=0, progress=False)
    gpu = fl.run("fedct", tfed, model=spec, rounds=1, period=2, seed=0, progress=False,
                 device="cuda")
    assert np.abs(weights(cpu) - weights(gpu)).max() < 5e-3
