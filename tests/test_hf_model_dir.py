"""``hf(model_dir=...)``: a local Hugging Face sequence-classification directory (a tiny
random BERT saved here, offline) as the encoder of the transformer learner."""

from __future__ import annotations

from importlib.util import find_spec

import numpy as np
import pytest

# looked up, not imported: importing peft (and transformers) costs every pytest-xdist
# worker seconds at collection; the tests that use them import them
if find_spec("transformers") is None or find_spec("peft") is None:
    pytest.skip("needs transformers and peft", allow_module_level=True)
import torch

import fedlabels as fl
from fedlabels.data.federation import make_federation
from fedlabels.learners import build_learner, parse_model_spec
from fedlabels.learners.transformer import TransformerClassifier

WORDS = ["good", "great", "happy", "bad", "awful", "sad", "the", "film", "was"]


@pytest.fixture(scope="module")
def seq_cls_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import BertConfig, BertForSequenceClassification

    root = tmp_path_factory.mktemp("tiny_seq_cls")
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.save(str(root / "tokenizer.json"))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=16, num_labels=2)
    BertForSequenceClassification(config).save_pretrained(str(root))
    return str(root)


def test_the_encoder_of_a_sequence_classification_directory_is_loaded(seq_cls_dir):
    from transformers import BertForSequenceClassification

    (spec,) = parse_model_spec(f"hf(model_dir={seq_cls_dir})")
    learner = build_learner(spec, n_classes=2, random_state=0)
    assert isinstance(learner, TransformerClassifier) and learner.mode == "full"
    learner.initialise(1, 2)
    saved = BertForSequenceClassification.from_pretrained(seq_cls_dir).bert
    ours = dict(learner.encoder_.named_parameters())
    theirs = dict(saved.named_parameters())
    assert set(theirs) == set(ours)
    for name, p in theirs.items():  # the directory's weights, not a fresh init
        torch.testing.assert_close(ours[name], p)


def test_hf_model_runs_fedct_offline(seq_cls_dir):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 120)
    X = np.empty(120, dtype=object)
    X[:] = [" ".join(["the", "film", "was", *rng.choice(WORDS[:3] if t else WORDS[3:6], 3)])
            for t in y]
    fed = make_federation(X, y, clients=3, unlabeled=30, test=30, scale="none", seed=0)
    result = fl.run("fedct", fed, model=f"hf(model_dir={seq_cls_dir},mode=lora,r=2)",
                    rounds=2, period=3, seed=0, progress=False)
    assert len(result.final["client_accuracies"]) == 3


def test_max_len_stays_within_the_models_positions(seq_cls_dir):
    from fedlabels.core.errors import FedLabelsError

    (spec,) = parse_model_spec(f"hf(model_dir={seq_cls_dir})")
    learner = build_learner(spec, n_classes=2, random_state=0)
    assert learner.max_len == 16  # the default 64 capped at its max_position_embeddings
    long = " ".join(["good"] * 40)  # more tokens than the model has positions
    X = np.array([long, "bad film"] * 4, dtype=object)
    learner.fit(X, np.array([1, 0] * 4))
    assert learner.predict(X).shape == (8,)
    with pytest.raises(FedLabelsError, match=r"max_len=64 is more than the 16 positions"):
        parse_model_spec(f"hf(model_dir={seq_cls_dir},max_len=64)")


def _relative_hf_run(seq_cls_dir, tmp_path, monkeypatch):
    """A CLI run in ``tmp_path/start`` whose ``hf(model_dir=...)`` is a relative path;
    returns the result's path."""
    import shutil

    from fedlabels.cli import main

    start = tmp_path / "start"
    shutil.copytree(seq_cls_dir, start / "bert")
    rng = np.random.default_rng(0)
    lines = ["text,label"] + [
        f"the film was {' '.join(rng.choice(WORDS[:3] if i % 2 else WORDS[3:6], 2))},"
        f"{'pos' if i % 2 else 'neg'}" for i in range(60)]
    (start / "reviews.csv").write_text("\n".join(lines) + "\n")
    monkeypatch.chdir(start)
    assert main(["run", "--method", "fedct", "--dataset",
                 f"csv:{start / 'reviews.csv'}:label", "--text-column", "text", "--model",
                 "hf(model_dir=bert,mode=lora,r=2)", "--clients", "3", "--rounds", "1",
                 "--period", "2", "--output", "out/r.json", "--no-progress"]) == 0
    (tmp_path / "elsewhere").mkdir()
    return start / "out" / "r.json"


def test_a_run_with_a_relative_model_dir_predicts_from_another_directory(
        seq_cls_dir, tmp_path, monkeypatch):
    path = _relative_hf_run(seq_cls_dir, tmp_path, monkeypatch)
    texts = np.array(["the film was good great", "the film was bad awful"], dtype=object)
    here = fl.load_run(path).predict(texts)
    monkeypatch.chdir(tmp_path / "elsewhere")  # a relative bert/ names nothing here
    assert list(fl.load_run(path).predict(texts)) == list(here)


def test_resuming_elsewhere_names_the_directory_a_relative_model_dir_needs(
        seq_cls_dir, tmp_path, monkeypatch):
    from fedlabels.core.errors import FedLabelsError

    path = _relative_hf_run(seq_cls_dir, tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path / "elsewhere")
    with pytest.raises(FedLabelsError, match=f"model_dir bert is a path relative to "
                                             f"{tmp_path / 'start'}, where it started"):
        fl.resume(path, rounds=2, progress=False)
    monkeypatch.chdir(tmp_path / "start")
    assert len(fl.resume(path, rounds=2, progress=False).rounds) == 2


def test_a_model_dir_under_home_is_found(seq_cls_dir, tmp_path, monkeypatch):
    import shutil

    shutil.copytree(seq_cls_dir, tmp_path / "bert")
    monkeypatch.setenv("HOME", str(tmp_path))  # ~ is not expanded by a quoted --model
    (spec,) = parse_model_spec("hf(model_dir=~/bert)")
    learner = build_learner(spec, n_classes=2, random_state=0)
    assert learner.model_dir == str((tmp_path / "bert").resolve())


@pytest.mark.parametrize("config, weights", [
    ('{"model_type": "bogus"}', b"garbage"),  # an architecture transformers does not know
    ('{"model_type": "bert", "auto_map": {"AutoModel": "evil.Model"}, "hidden_size": 8, '
     '"num_attention_heads": 2, "num_hidden_layers": 1, "intermediate_size": 8, '
     '"vocab_size": 10}', b"garbage"),  # remote code it asks for; damaged weights
], ids=["unknown-architecture", "remote-code-and-damaged-weights"])
def test_a_damaged_or_foreign_model_dir_is_one_line_and_runs_no_code(tmp_path, config,
                                                                     weights):
    """transformers' and safetensors' errors (paragraphs of advice) reached the user as a
    traceback from ``load_base``, or several lines inside a client's fit error; the
    directory's own code (``auto_map``) is never imported."""
    from fedlabels.core.errors import FedLabelsError
    from fedlabels.learners.text_encoder import load_base

    (tmp_path / "config.json").write_text(config)
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(weights)
    marker = tmp_path / "ran"
    (tmp_path / "evil.py").write_text(f"import os\nos.mkdir({str(marker)!r})\n")
    with pytest.raises(FedLabelsError, match="cannot load the encoder in") as info:
        load_base(tmp_path)
    assert "\n" not in str(info.value)
    assert not marker.exists()
