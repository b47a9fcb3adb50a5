"""On a CUDA GPU (skipped elsewhere; benchmarks/device_check.py runs them): clients whose
weights rest in pinned host memory between turns give the resident run's result, and
clients predicting together on the GPU predict what each predicts alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fedlabels as fl

pytestmark = pytest.mark.cuda


@pytest.fixture(scope="module")
def fed():
    return fl.load_federation("digits", clients=4, seed=0)


def test_offloaded_clients_rest_pinned_and_match_resident_ones(fed, monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    try:
        runs = {mode: fl.run("fedct", fed, model="mlp(hidden=64)", rounds=2, period=5,
                             seed=0, progress=False, device="cuda", batch_clients="off",
                             participation=3, offload=mode) for mode in ("never", "always")}
    finally:
        torch.use_deterministic_algorithms(False)
    never, always = runs["never"], runs["always"]
    assert always.extra["device"]["offload"]["offloaded_clients"] == [0, 1, 2, 3]
    for resident, rested in zip(never.client_models, always.client_models, strict=True):
        np.testing.assert_array_equal(resident.get_weights(), rested.get_weights())
        p = next(rested.model_.parameters())
        assert p.device.type == "cpu" and p.is_pinned()
        assert next(resident.model_.parameters()).device.type == "cuda"
    assert [r.accuracies for r in never.rounds] == [r.accuracies for r in always.rounds]


def test_auto_keeps_a_small_federation_resident(fed):
    result = fl.run("fedct", fed, model="mlp(hidden=64)", rounds=1, period=5, seed=0,
                    progress=False, device="cuda", offload="auto")
    assert result.extra["device"]["offload"] == {"asked": "auto", "offloaded_clients": []}


def test_clients_predict_together_on_the_gpu(fed):
    from fedlabels.learners import build_learner, parse_model_spec
    from fedlabels.learners.batched import PredictJob, predict_together

    (spec,) = parse_model_spec("cnn(arch=small)")
    models = []
    for cid, client in enumerate(fed.clients):
        ln = build_learner(spec, n_classes=fed.n_classes, random_state=cid)
        ln.use_dataset_shape(fed.info["image_shape"])  # digits: 1 x 8 x 8
        ln.place("cuda:0")
        ln.train_steps(client.X, client.y, 5 + cid)
        models.append(ln)
    jobs = [PredictJob(m, np.ascontiguousarray(fed.X_public, dtype=np.float32))
            for m in models]
    predict_together(jobs)
    for job, m in zip(jobs, models, strict=True):
        np.testing.assert_allclose(job.out, m.predict_proba(fed.X_public), atol=1e-4)
