"""``fedlabels report``: grouping over seeds, summary.csv, refusals, and the page in a browser."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from fedlabels.cli import main
from fedlabels.reporting.report import group_runs, summary_rows
from fedlabels.reporting.report_page import MISSING
from fedlabels.results import RoundRecord, RunResult

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
REQUIRE_BROWSER = "FEDLABELS_REQUIRE_BROWSER"  # 1: fail, not skip, without a browser (CI)


def _result(method: str, seed: int, accs: list[float], *, clients: int = 2,
            privacy: dict | None = None, rounds_config: int | None = None) -> RunResult:
    records = [RoundRecord(round=i + 1, local_steps=None, accuracies=[a] * clients, server={},
                           bytes_up=[100] * clients, bytes_down=[50] * clients, seconds=0.1)
               for i, a in enumerate(accs)]
    extra = {"privacy": privacy} if privacy is not None else {}
    return RunResult(method=method, dataset="toy", seed=seed,
                     config={"method": method, "rounds": rounds_config or len(accs),
                             "seed": seed},
                     federation={"n_clients": clients}, models=["dt"] * clients,
                     rounds=records, communication={"bytes_up_total": 100 * clients * len(accs),
                                                    "bytes_down_total": 50 * clients * len(accs)},
                     wall_seconds=1.0, extra=extra)


def test_runs_differing_only_in_seed_form_one_row():
    dp = {"guarantee": "formal", "epsilon": 2.0, "delta": 1e-5}
    results = [_result("fedct", 0, [0.6, 0.8]), _result("fedct", 1, [0.7, 0.9]),
               _result("fedct", 0, [0.5, 0.6], rounds_config=3),
               _result("dp-fedct", 0, [0.5, 0.7], privacy=dp),
               _result("dp-fedct", 1, [0.5, 0.8], privacy={**dp, "epsilon": 4.0})]
    configs = group_runs(results)
    assert [len(c.runs) for c in configs] == [2, 1, 2]
    assert [c.label.rsplit("(", 1)[-1] for c in configs[:2]] == ["rounds=2)", "rounds=3)"]
    rows = summary_rows(configs)
    assert rows[0]["n_seeds"] == 2 and rows[0]["accuracy_mean"] == pytest.approx(0.85)
    assert rows[0]["accuracy_std"] == pytest.approx(0.0707, abs=1e-3)
    assert rows[1]["accuracy_std"] is None  # one seed: no spread
    assert rows[0]["bytes_up_per_client_round"] == 100
    assert rows[0]["bytes_per_client_total"] == 300
    assert rows[0]["epsilon_mean"] is None
    assert rows[2]["epsilon_mean"] == 3.0 and rows[2]["delta"] == 1e-5
    assert rows[2]["guarantee"] == "formal"


def test_a_flower_deployment_is_named_as_one_beside_its_simulation():
    """A deployed run records the simulator's defaults in its config (engine=simulator, no
    workers): beside the same run simulated, the report and the plot legend said
    '(no workers)' and '(workers=1)'; they name the engine now."""
    from fedlabels.reporting.plots import legend_labels

    simulated = _result("fedct", 0, [0.6, 0.8])
    deployed = _result("fedct", 0, [0.6, 0.8])
    simulated.config.update(engine="simulator", workers=1)
    deployed.config.update(engine="simulator")
    deployed.extra["deployment"] = {"engine": "flower", "status": "completed"}
    labels = [c.label for c in group_runs([deployed, simulated])]
    assert labels == ["fedct · dt (engine=flower deployment, workers=one per site)",
                      "fedct · dt (engine=simulator, workers=1)"]
    assert legend_labels([deployed, simulated])[0] == labels


def test_engines_are_named_from_config_engine_as_the_flower_apps_write_it():
    """A deployment's result now says ``config.engine = flower``; a run on Flower's simulation
    engine (``flower-simulation``, whose result also has a ``deployment`` entry) was named
    a 'flower deployment' with 'one per site' for its workers (Ray's CPUs)."""
    deployed, on_ray, simulated = (_result("fedct", 0, [0.6, 0.8]) for _ in range(3))
    deployed.config.update(engine="flower")
    on_ray.config.update(engine="flower-simulation", workers=2)
    simulated.config.update(engine="simulator", workers=2)
    for res in (deployed, on_ray):
        res.extra["deployment"] = {"engine": "flower", "status": "completed"}
    labels = [c.label for c in group_runs([deployed, on_ray, simulated])]
    assert labels == ["fedct · dt (engine=flower deployment, workers=one per site)",
                      "fedct · dt (engine=flower-simulation, workers=2)",
                      "fedct · dt (engine=simulator, workers=2)"]


def test_audited_runs_report_vul_with_its_interval(tmp_path):
    audited = {"guarantee": "none", "vul": 0.62, "vul_ci": [0.55, 0.69]}
    row = summary_rows(group_runs([_result("fedct", 0, [0.8], privacy=audited)]))[0]
    assert (row["vul_mean"], row["vul_low"], row["vul_high"]) == (0.62, 0.55, 0.69)
    paths = []
    for seed, vul in ((0, 0.6), (1, 0.7)):
        paths.append(tmp_path / f"a{seed}.json")
        _result("fedct", seed, [0.8], privacy={"vul": vul}).save_json(paths[-1])
    assert main(["report", *map(str, paths), "-o", str(tmp_path / "rep")]) == 0
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "VUL (audited runs)" in html and "ε (DP runs)" not in html  # only plots with data
    assert MISSING in html
    with open(tmp_path / "rep" / "summary.csv") as fh:
        (row,) = list(csv.DictReader(fh))
    assert float(row["vul_mean"]) == pytest.approx(0.65) and row["epsilon_mean"] == ""


def test_report_refuses_to_overwrite_and_fails_in_one_line(tmp_path, capsys):
    res = tmp_path / "r.json"
    _result("local", 0, [0.7]).save_json(res)
    out = tmp_path / "rep"
    assert main(["report", str(res), "-o", str(out)]) == 0
    before = (out / "summary.csv").read_text()
    capsys.readouterr()
    assert main(["report", str(res), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--overwrite" in err and err.count("\n") == 1
    assert (out / "summary.csv").read_text() == before
    assert main(["report", str(res), "-o", str(out), "--overwrite"]) == 0
    for bad in (tmp_path / "missing.json", tmp_path / "r.rounds.csv"):
        bad.parent.mkdir(exist_ok=True)
        if bad.suffix == ".csv":
            bad.write_text("round,acc\n1,0.5\n")
        assert main(["report", str(bad), "-o", str(tmp_path / "other")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("fedlabels: error:") and err.count("\n") == 1
        assert "Traceback" not in err
    assert not (tmp_path / "other").exists()


def test_report_to_an_html_name_writes_that_file(tmp_path, capsys):
    res = tmp_path / "r.json"
    _result("fedct", 0, [0.7, 0.8]).save_json(res)
    page = tmp_path / "cmp.html"
    assert main(["report", str(res), "-o", str(page)]) == 0
    assert page.is_file() and (tmp_path / "cmp.summary.csv").is_file()
    assert main(["report", str(res), "-o", str(tmp_path / "dir")]) == 0  # a directory
    assert (tmp_path / "dir" / "report.html").is_file()
    capsys.readouterr()
    assert main(["report", str(res), "-o", str(tmp_path / "cmp.pdf")]) == 2
    err = capsys.readouterr().err
    assert ".html" in err and err.count("\n") == 1 and not (tmp_path / "cmp.pdf").exists()
    assert main(["report", str(res), "-o", ""]) == 2
    assert "-o is empty" in capsys.readouterr().err


def test_metric_picks_the_report_headline():
    from fedlabels.reporting.report_page import columns

    heads = [h for h, _, _ in columns("auroc")]
    assert heads[3] == "AUROC" and heads.index("accuracy") > 3


def test_one_precision_rule():
    from fedlabels.reporting.report_page import fmt

    assert fmt(0.9246, 0.01559) == "0.925 ± 0.016"
    assert fmt(0.85, 0.0707) == "0.850 ± 0.071"
    assert fmt(0.9070175) == "0.907" and fmt(52.123) == "52.1"
    assert fmt(25170.0, whole=True) == "25,170" and fmt(None) == MISSING
    assert fmt(25170.0, 3.4, whole=True) == "25,170 ± 3"
    # bytes are whole, their spread too; '± 0' would say the runs agree
    assert fmt(1118311.0, 0.2, whole=True) == "1,118,311 ± < 1"
    assert fmt(145.0, 0.5, whole=True) == "145 ± < 1"  # 0.5 rounds to even: 0
    # three significant digits counted after rounding: 0.99996 -> 1.00, not 1.000
    assert fmt(0.99996) == "1.00" and fmt(9.9996) == "10.0" and fmt(0.0099996) == "0.0100"
    assert fmt(0.5, 0.09996) == "0.50 ± 0.10"  # the spread's two digits, after rounding


def test_empty_columns_are_left_out_and_caveats_shown(tmp_path):
    from fedlabels.reporting.report import configuration_warnings
    from fedlabels.reporting.report_page import columns, shown_columns

    fed = {"n_clients": 2, "n_test": 100, "client_class_counts": [[30, 10], [30, 10]],
           "class_names": ["healthy", "ill"]}
    runs = [_result("local", 0, [0.9]), _result("fedct", 0, [0.7, 0.8]),
            _result("fedct", 0, [0.74], rounds_config=12)]
    for r in runs:
        r.federation = dict(fed)
    runs[2].config["partition"] = "other"  # its own configuration
    configs = group_runs(runs)
    rows = summary_rows(configs)
    heads = [h for h, _, _ in shown_columns(rows, columns("accuracy"))]
    assert "accuracy" in heads and "RMSE" not in heads and "R²" not in heads
    assert "AUROC" not in heads  # no run recorded it
    assert rows[2]["status"] == "interrupted after round 1 of 12"
    warned = configuration_warnings(configs, rows)
    texts = [w for _, w in warned]
    # majority baseline 0.75 ± 1.96 sqrt(.75 .25 / 100) = 0.75 ± 0.085: 0.8 and 0.74 are near
    assert any("within noise of the majority-class baseline 0.750" in t
               and "'healthy'" in t for t in texts)
    assert any(t.startswith("interrupted after round 1 of 12") for t in texts)
    assert any("below the local-only reference 0.900" in t for t in texts)
    out = tmp_path / "r.html"
    paths = []
    for i, r in enumerate(runs):
        paths.append(tmp_path / f"{i}.json")
        r.save_json(paths[-1])
    assert main(["report", *map(str, paths), "-o", str(out)]) == 0
    html = out.read_text()
    assert "Read with care" in html and "interrupted after round 1 of 12" in html
    assert "<th>RMSE</th>" not in html and "<th>VUL</th>" not in html


def test_zero_byte_runs_sit_at_a_marked_position_and_one_epsilon_has_context():
    import matplotlib.pyplot as plt

    from fedlabels.reporting.report_figures import communication_figure, privacy_figure

    dp = {"guarantee": "formal", "epsilon": 8.0, "delta": 1e-5}
    runs = [_result("fedct", 0, [0.8]), _result("local", 0, [0.7]),
            _result("dp-fedct", 0, [0.6], privacy=dp)]
    runs[1].rounds[0].bytes_up = [0, 0]
    runs[1].rounds[0].bytes_down = [0, 0]
    rows = summary_rows(group_runs(runs))
    fig = communication_figure(rows)
    ax = fig.axes[0]
    xs = {c.get_label(): c.lines[0].get_xdata()[0] for c in ax.containers}
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert len(xs) == 3  # the local run is drawn
    assert labels[0] == "0\n(none)" and xs["local · dt"] == ax.get_xticks()[0]
    assert xs["fedct · dt"] == 100
    plt.close(fig)
    fig = privacy_figure(rows, "epsilon_mean", "epsilon_std", "ε", "t", "no DP")
    ax = fig.axes[0]
    assert ax.get_xlim()[0] == 0 and ax.get_xlim()[1] >= 8.0 * 1.2
    entries = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert sum("(no DP)" in e for e in entries) == 2  # the non-private runs as lines
    plt.close(fig)


def _browser() -> str:
    """The headless browser; without one the test skips saying why, except where the
    environment requires it (CI: ``FEDLABELS_REQUIRE_BROWSER=1``), where it fails."""
    found = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if found is not None:
        return found
    why = (f"no headless browser ({', '.join(BROWSERS)}): `make test` installs chromium when "
           "run as root (.ci/browser); or `apt-get install chromium`")
    if os.environ.get(REQUIRE_BROWSER) == "1":
        pytest.fail(f"{why}; {REQUIRE_BROWSER}=1 requires it")
    pytest.skip(why)


def test_browser_test_skips_honestly_without_a_browser_unless_required(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv(REQUIRE_BROWSER, raising=False)
    with pytest.raises(pytest.skip.Exception, match="make test"):
        _browser()
    monkeypatch.setenv(REQUIRE_BROWSER, "1")
    with pytest.raises(pytest.fail.Exception, match=REQUIRE_BROWSER):
        _browser()


def test_make_test_finds_or_installs_the_browser():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    recipe = (root / "Makefile").read_text().split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert ".ci/browser" in recipe
    script = (root / ".ci" / "browser").read_text()
    assert "apt-get install" in script and "chromium" in script
    assert REQUIRE_BROWSER in (root / ".ci" / "run").read_text()  # CI still requires it


_PROBE = ("<script>window.addEventListener('load', () => document.body.setAttribute("
          "'data-images', JSON.stringify([...document.images].map(i => "
          "[i.complete, i.naturalWidth, i.naturalHeight]))));</script>")


@pytest.mark.slow
def test_report_of_the_demo_renders_in_a_headless_browser(tmp_path, request):
    from PIL import Image

    browser = _browser()  # skips before the demo runs where there is no browser
    demo, _ = request.getfixturevalue("demo_run")  # `fedlabels demo`, once for the session
    results = sorted(str(p) for p in demo.glob("*.json"))
    assert len(results) >= 6
    assert main(["report", *results, "-o", str(tmp_path / "rep")]) == 0
    page = tmp_path / "rep" / "report.html"
    text = page.read_text()
    assert "http://" not in text and "https://" not in text  # self-contained
    with open(tmp_path / "rep" / "summary.csv") as fh:
        assert len(list(csv.DictReader(fh))) == len(results)  # one seed: one row each
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             f"--user-data-dir={tmp_path / 'profile'}"]
    # the page's images as the browser decoded them (a copy with a probe script)
    probe = tmp_path / "rep" / "probe.html"
    probe.write_text(text.replace("</body>", _PROBE + "</body>"))
    dom = subprocess.run([*flags, "--virtual-time-budget=10000", "--dump-dom",
                          probe.as_uri()], capture_output=True, text=True, timeout=120).stdout
    marker = 'data-images="'
    assert marker in dom, dom[-500:]
    images = json.loads(dom.split(marker, 1)[1].split('"', 1)[0].replace("&quot;", '"'))
    assert len(images) >= 2  # accuracy per round, accuracy against bytes
    assert all(done and w > 100 and h > 100 for done, w, h in images), images
    shot = tmp_path / "shot.png"
    subprocess.run([*flags, "--window-size=1200,2400", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    with Image.open(shot) as img:
        assert img.size == (1200, 2400)
        colours = img.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is None or len(colours) > 50  # plots drawn, not a blank page


# ------------------------------------------------------------------ provenance, --version

def test_results_record_their_provenance(tmp_path, capsys, breast_cancer_fed):
    import fedlabels as fl

    api = fl.run("local", breast_cancer_fed, model="dt", rounds=1, progress=False)
    prov = api.extra["provenance"]
    assert prov["command_line"] is None  # started from Python
    assert prov["fedlabels"] == fl.__version__
    assert {"numpy", "scipy", "scikit-learn"} <= set(prov["libraries"])
    assert prov["started_utc"] <= prov["ended_utc"] and prov["ended_utc"].endswith("+00:00")
    out = tmp_path / "r.json"
    argv = ["run", "--method", "local", "--dataset", "breast_cancer", "--clients", "3",
            "--model", "dt", "--rounds", "1", "--no-progress", "--output", str(out)]
    assert main(argv) == 0
    saved = json.loads(out.read_text())["provenance"]
    assert saved["command_line"] == ["fedlabels", *argv]
    assert isinstance(saved["torch_threads"], int)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"fedlabels {fl.__version__}"


def test_provenance_names_the_xgboost_that_is_installed():
    """fedlabels[tabular] installs xgboost as the distribution xgboost-cpu; provenance looked
    up 'xgboost' only and left it out of every xgboost run's libraries."""
    pytest.importorskip("xgboost")
    from importlib import metadata

    from fedlabels.core.provenance import library_versions

    dists = metadata.packages_distributions()["xgboost"]
    versions = library_versions()
    assert any(versions.get(d) == metadata.version(d) for d in dists)


def test_the_distributions_of_a_module_are_those_importlib_maps_it_to():
    """provenance finds the distribution of a module without packages_distributions' scan of
    every distribution's metadata: the same names, in the same order, for each module of a
    distribution without top_level.txt (found from its file list), each library's, one that
    is in no file list, and a module no distribution holds."""
    from importlib import metadata

    from fedlabels.core.provenance import LIBRARIES, _distributions_of

    everything = metadata.packages_distributions()
    inferred = {m for d in metadata.distributions() if not d.read_text("top_level.txt")
                for m in metadata._top_level_inferred(d)}  # type: ignore[attr-defined]
    modules = sorted(inferred)[:20] + list(LIBRARIES.values()) + ["no_such_module_here"]
    for module in modules:
        assert _distributions_of(module) == everything.get(module, []), module


def test_provenance_lists_installed_libraries_whichever_process_imported_them():
    """torch imported only in worker processes (--workers 2) was left out of the result's
    libraries, which then differed from the same run with --workers 1."""
    import subprocess
    import sys
    from importlib import metadata

    pytest.importorskip("torch")
    code = ("import sys, json; from fedlabels.core.provenance import library_versions; "
            "v = library_versions(); assert 'torch' not in sys.modules; print(json.dumps(v))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert json.loads(out)["torch"] == metadata.version("torch")


# ------------------------------------------------------------------ reuse: predict

def _table():
    import numpy as np
    from sklearn.datasets import load_wine

    frame = load_wine(as_frame=True).frame
    frame["colour"] = np.where(frame["alcohol"] > 13, "red", "white")  # one-hot encoded
    frame["target"] = frame["target"].map({0: "a", 1: "b", 2: "c"})
    return frame


def test_result_predicts_raw_rows_like_the_federation_saw_them():
    import fedlabels as fl

    frame = _table()
    X, y = frame.drop(columns="target"), frame["target"]
    fed = fl.make_federation(X, y, clients=3, unlabeled=60, seed=0)
    res = fl.run("fedct", fed, model="dt", rounds=2, progress=False)
    assert "colour_red" in res.preprocessing.feature_names
    vote = res.predict(X)
    assert set(vote) <= {"a", "b", "c"} and (vote == y.to_numpy()).mean() > 0.8
    # the same inputs the clients were evaluated on: client 0 agrees with its own model
    one = res.predict(X.iloc[:40], client=0)
    codes = res.client_models[0].predict(res.preprocessing.transform(X.iloc[:40]))
    assert list(one) == [fed.class_names[c] for c in codes]
    with pytest.warns(fl.FedLabelsWarning, match=r"'colour': 5 of 5 rows hold categories "
                      r"not seen in training \('green'\)"):
        assert list(res.predict(X.iloc[:5].assign(colour="green"))) != []  # all zeros
    with pytest.raises(fl.FedLabelsError, match=r"in column\(s\) 'alcohol' \(rows 2;"):
        res.predict(X.iloc[:5].assign(alcohol=[1.0, 2.0, np.nan, 3.0, 4.0]))
    with pytest.raises(fl.FedLabelsError, match="lacks column"):
        res.predict(X.drop(columns="colour"))
    with pytest.raises(fl.FedLabelsError, match="client 7"):
        res.predict(X, client=7)


def test_predict_command_labels_a_csv(tmp_path, capsys):
    frame = _table()
    table = tmp_path / "wine.csv"
    frame.to_csv(table, index=False)
    new = tmp_path / "new.csv"
    frame.drop(columns="target").head(25).to_csv(new, index=False)
    res = tmp_path / "res.json"
    assert main(["run", "--method", "fedct", "--model", "dt", "--dataset",
                 f"csv:{table}:target", "--clients", "3", "--rounds", "2", "--no-progress",
                 "--output", str(res)]) == 0
    out = tmp_path / "pred.csv"
    assert main(["predict", str(res), str(new), "-o", str(out), "--client", "1"]) == 0
    with open(out) as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 25 and {r["prediction"] for r in rows} <= {"a", "b", "c"}
    capsys.readouterr()
    before = new.read_text()
    for argv in (["predict", str(res), str(new), "-o", str(out)],  # exists
                 ["predict", str(res), str(new), "-o", str(new), "--overwrite"],  # its input
                 ["predict", str(tmp_path / "none.json"), str(new), "-o", str(tmp_path / "x")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("fedlabels: error:") and err.count("\n") == 1
    assert new.read_text() == before
    assert (tmp_path / "res.models.npz").is_file()  # the safe format, never a pickle


def test_predict_reads_codes_as_training_did_and_the_runs_separator(tmp_path, capsys):
    """A category column of codes such as 01, 02, ICU: in a new file holding only 01 and 02
    pandas read numbers, which matched no category, and 6 of 10 predictions changed without
    a word. A run on a ';' table could not predict its own table."""
    rng = np.random.default_rng(0)
    ward = rng.choice(["01", "02", "ICU", "ER", "OR"], 200)
    frame = pd.DataFrame({"ward": ward, "x": rng.normal(size=200),
                          "label": np.isin(ward, ["01", "02"]).astype(int)})
    frame.to_csv(tmp_path / "ward.csv", sep=";", index=False)
    new = pd.DataFrame({"ward": ["01", "02"] * 5, "x": rng.normal(size=10)})
    new.to_csv(tmp_path / "new.csv", sep=";", index=False)
    res = tmp_path / "ward.json"
    assert main(["run", "--method", "fedct", "--model", "dt", "--dataset",
                 f"csv:{tmp_path / 'ward.csv'}:label", "--sep", ";", "--clients", "3",
                 "--rounds", "2", "--no-progress", "--output", str(res)]) == 0
    out = tmp_path / "p.csv"
    assert main(["predict", str(res), str(tmp_path / "new.csv"), "-o", str(out)]) == 0
    got = pd.read_csv(out, sep=";", dtype={"ward": str})  # written with the run's separator
    assert list(got["ward"]) == list(new["ward"])
    assert list(got["prediction"]) == [1] * 10  # 01 and 02 are the positive wards
    frame.drop(columns="label").to_csv(tmp_path / "comma.csv", index=False)
    capsys.readouterr()
    assert main(["predict", str(res), str(tmp_path / "comma.csv"), "-o",
                 str(tmp_path / "c.csv")]) == 2
    assert "reads as one column" in capsys.readouterr().err
    assert main(["predict", str(res), str(tmp_path / "comma.csv"), "-o",
                 str(tmp_path / "c.csv"), "--sep", ","]) == 0


def test_predict_keeps_the_first_row_of_a_table_without_a_header(tmp_path, capsys):
    """A run on an array: a CSV of numbers without a header line is all rows (its first
    line was read as the header, and one row lost, silently); pandas' 0..n-1 header and a
    real header still name columns."""
    import numpy as np
    import pandas as pd

    import fedlabels as fl

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4))
    fed = fl.make_federation(X, (X[:, 0] > 0).astype(int), clients=3, unlabeled=100, seed=0)
    res = tmp_path / "r.json"
    fl.run("fedct", fed, model="dt", rounds=1, progress=False).save(res)
    rows = np.round(rng.normal(size=(5, 4)), 3)
    predictions = []
    for name, write in [("bare.csv", dict(header=False)), ("indexed.csv", dict(header=True)),
                        ("named.csv", dict(header=["a", "b", "c", "d"]))]:
        pd.DataFrame(rows).to_csv(tmp_path / name, index=False, **write)
        out = tmp_path / f"p_{name}"
        assert main(["predict", str(res), str(tmp_path / name), "-o", str(out)]) == 0
        got = pd.read_csv(out)
        assert len(got) == 5, name
        np.testing.assert_allclose(got.iloc[:, :4].to_numpy(), rows)
        predictions.append(list(got["prediction"]))
    assert predictions[0] == predictions[1] == predictions[2]  # the same rows, however written


def test_predicting_a_wide_table_warns_nothing(tmp_path):
    """784 pixel columns: pandas warned "DataFrame is highly fragmented" on stderr."""
    import warnings

    import numpy as np
    import pandas as pd

    import fedlabels as fl
    from fedlabels.results.predict import predict_file

    rng = np.random.default_rng(0)
    X = rng.random((300, 784)).astype(np.float32)
    fed = fl.make_federation(X, (X[:, 0] > 0.5).astype(int), clients=3, unlabeled=100,
                             scale="none", seed=0)
    res = tmp_path / "r.json"
    fl.run("fedct", fed, model="dt", rounds=1, progress=False).save(res)
    pd.DataFrame(X[:5]).to_csv(tmp_path / "wide.csv", index=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", pd.errors.PerformanceWarning)
        out = predict_file(res, tmp_path / "wide.csv")
    assert out.shape == (5, 785) and list(out.columns).count("prediction") == 1
    assert set(out["prediction"]) <= {0, 1}


# ------------------------------------------------------------------ any fit/predict object

class _Majority:
    """Not a scikit-learn estimator: no get_params, no BaseEstimator."""

    def __init__(self) -> None:
        self.random_state = None

    def fit(self, X, y):
        import numpy as np

        self.label_ = int(np.bincount(y).argmax())
        return self

    def predict(self, X):
        import numpy as np

        return np.full(len(X), self.label_)


def test_any_object_with_fit_and_predict_is_a_learner(breast_cancer_fed):
    import fedlabels as fl

    model = _Majority()
    res = fl.run("fedct", breast_cancer_fed, model=model, rounds=2, progress=False)
    assert res.final["mean_accuracy"] > 0.3
    seeds = {m.random_state for m in res.client_models}
    assert len(seeds) == 5 and model.random_state is None  # copies, seeded per client
    assert not hasattr(model, "label_")  # the object passed in is never fitted


def test_a_file_given_twice_counts_once_and_a_copied_seed_is_named(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _result("fedct", 0, [0.7, 0.8]).save_json(a)
    _result("fedct", 1, [0.6, 0.6]).save_json(b)
    assert main(["report", str(a), str(b), str(tmp_path / "." / "a.json"), "-o",
                 str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert "a.json given more than once; each file is counted once" in err
    with open(tmp_path / "r" / "summary.csv") as fh:
        (row,) = list(csv.DictReader(fh))
    assert row["n_seeds"] == "2" and float(row["accuracy_mean"]) == pytest.approx(0.7)
    shutil.copy(a, tmp_path / "copy.json")  # another file of the same seed
    assert main(["report", str(a), str(b), str(tmp_path / "copy.json"), "-o",
                 str(tmp_path / "s")]) == 0
    assert "seed(s) 0 appear in more than one result" in capsys.readouterr().err


def test_the_rounds_table_has_one_column_order_whichever_round_is_evaluated_first():
    every = _result("fedct", 0, [0.6, 0.7, 0.8])
    thinned = _result("fedct", 0, [0.6, 0.7, 0.8])
    for r in thinned.rounds[:2]:  # evaluated at the last round only (eval_every 3)
        r.accuracies = None
    for r in (*every.rounds, *thinned.rounds):
        r.server["agreement"] = 0.9
        r.local_steps = 5 * r.round  # torch learners: 5 steps a round
    columns = list(every.to_frame().columns)
    assert list(thinned.to_frame().columns) == columns
    assert columns[:9] == [*RUN_COLUMNS, "round", "local_steps", "acc_mean"]
    assert columns[-3:] == ["bytes_up_mean", "bytes_down_mean", "seconds"]
    assert thinned.to_frame()["acc_mean"].isna().tolist() == [True, True, False]


@pytest.mark.filterwarnings("ignore::fedlabels.core.errors.RunCaveatWarning")  # tiny models
def test_a_run_of_refit_models_has_no_local_steps_column_and_a_torch_run_counts_them(
        tmp_path):
    """A FedCT run of decision trees (models refit each round, no steps) had a local_steps
    column of None (dtype object) in to_frame and an empty one in its rounds CSV; a torch
    run's column counts the plan's steps: round × period."""
    import fedlabels as fl

    fed = fl.load_federation("breast_cancer", clients=3, unlabeled=40, seed=0)
    trees = fl.run("fedct", fed, model="dt", rounds=2, seed=0, progress=False)
    frame = trees.to_frame()
    assert "local_steps" not in frame.columns
    assert not any(frame[c].isna().all() for c in frame.columns if c != "epsilon")  # no DP
    header = trees.save_csv(tmp_path / "trees.csv").read_text().splitlines()[0]
    assert "local_steps" not in header.split(",")
    net = fl.run("fedct", fed, model="mlp(hidden=4)", rounds=2, period=3, seed=0,
                 progress=False)
    steps = net.to_frame()["local_steps"]
    assert steps.dtype == np.int64 and steps.tolist() == [3 * r for r in (1, 2)]
    assert list(net.to_frame().columns)[:8] == [*RUN_COLUMNS, "round", "local_steps"]


#: the columns that lead every rounds table: which run a row is of
RUN_COLUMNS = ["method", "dataset", "models", "seed", "partition", "epsilon"]


@pytest.mark.filterwarnings("ignore::fedlabels.core.errors.RunCaveatWarning")  # tiny models
def test_the_rounds_tables_of_a_sweep_concatenated_say_which_run_each_row_is(tmp_path):
    """X.rounds.csv had no column naming its run (method, seed, partition, ε), so the
    tables of a sweep concatenated lost each row's run; pandas' concat and groupby on the
    CSVs give each run's own rows back (the oracle: each run's to_frame alone)."""
    import pandas as pd

    import fedlabels as fl

    fed = fl.load_federation("breast_cancer", clients=3, unlabeled=40, seed=0)
    runs = {(method, seed): fl.run(method, fed, model=model, rounds=2, period=2, seed=seed,
                                   options=options, progress=False)
            for method, model, options in (("fedct", "dt", {}),
                                           ("dp-fedavg", "mlp(hidden=4)", {"epsilon": 4}))
            for seed in (0, 1)}
    paths = [res.save_csv(tmp_path / f"{m}_{s}.rounds.csv") for (m, s), res in runs.items()]
    table = pd.concat([pd.read_csv(p) for p in paths], ignore_index=True)
    assert list(table.columns[:6]) == RUN_COLUMNS
    groups = table.groupby(["method", "seed"])
    assert set(groups.groups) == set(runs)
    for (method, seed), rows in groups:
        alone = runs[(method, seed)].to_frame()
        assert rows["round"].tolist() == alone["round"].tolist() == [1, 2]
        assert rows["acc_mean"].tolist() == pytest.approx(alone["acc_mean"].tolist())
        assert set(rows["partition"]) == {"iid"} and set(rows["dataset"]) == {"breast_cancer"}
    eps = table.groupby("method", dropna=False)["epsilon"].agg(lambda e: set(e.fillna(-1)))
    assert eps["dp-fedavg"] == {4.0} and eps["fedct"] == {-1}  # no DP: empty


def test_a_configuration_has_one_colour_in_every_figure():
    """The round, communication and ε figures colour each configuration alike (they used
    each figure's own order: fedct orange, then red, then purple)."""
    from matplotlib.colors import to_hex

    from fedlabels.reporting.report_figures import (
        communication_figure,
        curves_figure,
        privacy_figure,
    )

    dp = {"guarantee": "formal", "epsilon": 2.0, "delta": 1e-5}
    results = [_result("local", 0, [0.6, 0.6]), _result("fedct", 0, [0.6, 0.8]),
               _result("fedavg", 0, [0.7, 0.75]), _result("dp-fedct", 0, [0.5, 0.7], privacy=dp)]
    configs = group_runs(results)
    rows = summary_rows(configs)
    by_figure = []
    for fig in (curves_figure(configs, rows), communication_figure(rows),
                privacy_figure(rows, "epsilon_mean", "epsilon_std", "ε", "t", "no DP")):
        handles, labels = fig.axes[0].get_legend_handles_labels()
        seen = {}
        for handle, label in zip(handles, labels, strict=True):
            artist = handle.lines[0] if hasattr(handle, "lines") else handle
            conf = next(r["configuration"] for r in rows if label.startswith(r["configuration"]))
            seen[conf] = to_hex(artist.get_color())
        by_figure.append(seen)
    assert all(len(seen) == len(rows) for seen in by_figure)  # every configuration drawn
    assert by_figure[0] == by_figure[1] == by_figure[2]
    assert len(set(by_figure[0].values())) == len(rows)


def test_the_round_figure_draws_the_majority_baseline_when_configurations_differ_in_it():
    """Seeds with other test sets give other baselines; the report's round figure then
    drew none at all, where ``fedlabels plot`` draws a band over them."""
    import matplotlib.pyplot as plt

    from fedlabels.reporting.report_figures import curves_figure

    results = []
    for method in ("fedct", "local"):
        for seed, base in ((0, 0.6), (1, 0.55)):
            res = _result(method, seed, [0.7, 0.8])
            res.extra["clinical"] = {"baseline": {"class": 0, "accuracy": base,
                                                  "half_width_95": 0.05}}
            results.append(res)
    configs = group_runs(results[:2] + results[2:3])  # local ran seed 0 only
    rows = summary_rows(configs)
    assert len({r["majority_baseline"] for r in rows}) == 2
    fig = curves_figure(configs, rows)
    try:
        _, labels = fig.axes[0].get_legend_handles_labels()
        (entry,) = [t for t in labels if t.startswith("majority class")]
        assert "0.550 to 0.600 over the runs' test sets" in entry
    finally:
        plt.close(fig)


def test_a_report_of_several_datasets_says_they_are_not_comparable(tmp_path):
    """Runs of breast_cancer, digits and letter shared one table and one accuracy axis,
    and nothing on the page said their values do not compare."""
    import html as html_module

    from fedlabels.reporting.report import write_report

    results = [_result("fedct", 0, [0.7, 0.8]), _result("fedct", 0, [0.3, 0.4])]
    results[1].dataset = "other"
    outputs, warned = write_report(results, tmp_path / "r.html")
    (line,) = [w for c, w in warned if "datasets" in w]
    assert "2 datasets (toy, other)" in line and "comparable only between rows" in line
    assert line in html_module.unescape(outputs["report"].read_text())
    _, warned = write_report([results[0], _result("fedavg", 0, [0.5])],
                             tmp_path / "one.html")
    assert not [w for _, w in warned if "datasets" in w]  # one dataset: nothing to say


def test_a_run_without_a_guarantee_shows_no_delta(tmp_path):
    """PATE without GNMax records δ = 0 beside guarantee none: the page showed it as
    '0e+00' in the δ column, a privacy figure for a run that has no guarantee."""
    import html as html_module

    from fedlabels.reporting.report import write_report

    plain = {"guarantee": "none", "epsilon": None, "delta": 0.0}
    dp = {"guarantee": "formal", "epsilon": 2.0, "delta": 1e-5}
    results = [_result("pate", 0, [0.8], privacy=plain),
               _result("dp-fedct", 0, [0.7], privacy=dp)]
    rows = summary_rows(group_runs(results))
    assert rows[0]["delta"] is None and rows[1]["delta"] == 1e-5
    outputs, _ = write_report(results, tmp_path / "r.html")
    page = html_module.unescape(outputs["report"].read_text())
    assert "0e+00" not in page and "1e-05" in page


def test_a_reference_is_dashed_alike_in_the_round_and_the_privacy_figures():
    """The round figure dashes local-only and dots centralized; the ε figure dashed its
    lines by their position, so centralized (the first row) was dashed there."""
    import matplotlib.pyplot as plt

    from fedlabels.reporting.report_figures import curves_figure, privacy_figure

    dp = {"guarantee": "formal", "epsilon": 2.0, "delta": 1e-5}
    results = [_result("centralized", 0, [0.9]), _result("local", 0, [0.6]),
               _result("fedct", 0, [0.7, 0.8]), _result("dp-fedct", 0, [0.5, 0.7], privacy=dp)]
    configs = group_runs(results)
    rows = summary_rows(configs)
    dashes = []
    for fig in (curves_figure(configs, rows),
                privacy_figure(rows, "epsilon_mean", "epsilon_std", "ε", "t", "no DP")):
        try:
            dashes.append({ln.get_label().split(" ·")[0]: ln.get_linestyle()
                           for ln in fig.axes[0].get_lines()
                           if ln.get_label().startswith(("local", "centralized", "fedct"))})
        finally:
            plt.close(fig)
    assert dashes[0]["local"] == dashes[1]["local"] == "--"
    assert dashes[0]["centralized"] == dashes[1]["centralized"] == ":"
    assert dashes[1]["fedct"] not in ("--", ":")  # not read as a reference


def test_the_page_says_which_configuration_scored_best_and_under_what_guarantee(tmp_path):
    """The page listed the rows in the order given: which one won, by how much and under
    which guarantee was left to the reader to work out from two tables."""
    import html as html_module

    from fedlabels.reporting.report import write_report

    dp = {"guarantee": "formal", "epsilon": 2.0, "delta": 1e-5, "guarantee_against": "x"}
    none = {"guarantee": "none"}
    results = [_result("local", s, [a], privacy=none) for s, a in ((0, 0.6), (1, 0.62))]
    results += [_result("fedct", s, [0.7, a], privacy=none) for s, a in ((0, 0.9), (1, 0.92))]
    results += [_result("fedavg", s, [0.7, a], privacy=none) for s, a in ((0, 0.8), (1, 0.84))]
    results += [_result("dp-fedct", s, [0.5, a], privacy=dp) for s, a in ((0, 0.7), (1, 0.8))]
    outputs, _ = write_report(results, tmp_path / "r.html")
    page = html_module.unescape(outputs["report"].read_text())
    (lead,) = [line for line in page.splitlines() if line.startswith("<p>Best accuracy")]
    assert "<b>fedct · dt</b>: 0.910 ± 0.014 over 2 seeds, privacy none" in lead
    assert "next: <b>fedavg · dt</b>: 0.820 ± 0.028" in lead
    assert "a difference of 0.090)" in lead  # apart by more than their spreads
    assert "Best with a privacy guarantee: <b>dp-fedct · dt</b>: 0.750 ± 0.071" in lead
    assert "ε = 2.00 spent" in lead
    outputs, _ = write_report(results[:4], tmp_path / "close.html")  # local and fedct
    page = html_module.unescape(outputs["report"].read_text())
    assert "no clear winner" not in page
    # fedct 0.70 ± 0.28 against local 0.61 ± 0.014: apart by less than their spreads
    results[3] = _result("fedct", 1, [0.7, 0.5], privacy=none)
    outputs, _ = write_report(results[:4], tmp_path / "tie.html")
    page = html_module.unescape(outputs["report"].read_text())
    assert "within their spreads over seeds: no clear winner" in page


def test_the_lead_says_when_its_best_learnt_nothing_and_gives_the_gap_as_shown(tmp_path):
    """On imbalanced classes (90 % one class) the lead named as best accuracy a
    configuration the warnings above said learnt next to nothing, without a word; and the
    difference of 0.905 and 0.904 read 'a difference of 0.00100', a float's rounding."""
    import html as html_module

    from fedlabels.reporting.report import write_report

    def run(method: str, acc: float) -> RunResult:
        res = _result(method, 0, [acc])
        # the majority class is 90 % of the training labels: 0.900 ± 0.019 on 1,000 rows
        res.federation.update(client_class_counts=[[90, 10], [90, 10]], n_test=1000)
        return res

    outputs, _ = write_report([run("fedct", 0.905), run("local", 0.904)], tmp_path / "a.html")
    page = html_module.unescape(outputs["report"].read_text())
    (lead,) = [line for line in page.splitlines() if line.startswith("<p>Best accuracy")]
    assert "(a difference of 0.001)" in lead
    assert lead.count("whose models learnt next to nothing") == 2  # both within noise
    outputs, _ = write_report([run("fedavg", 0.95), run("fedct", 0.905)], tmp_path / "b.html")
    page = html_module.unescape(outputs["report"].read_text())
    (lead,) = [line for line in page.splitlines() if line.startswith("<p>Best accuracy")]
    best, following = lead.split("; next:")
    assert "learnt next to nothing" not in best  # 0.95 is clearly above 0.900 + 0.019
    assert "<b>fedct · dt</b>: 0.905 over 1 seed, privacy not stated, whose models learnt " \
           "next to nothing" in following
    assert "(a difference of 0.045)" in lead
    assert "a model must beat it clearly to have learnt anything" not in page


def test_a_report_of_one_configuration_draws_no_lone_communication_point():
    """A report of one configuration drew 'accuracy against communication' as one point
    on an empty log axis: nothing to compare, its bytes already in the table."""
    from fedlabels.reporting.report_figures import figures

    one = group_runs([_result("fedct", s, [0.7, 0.8]) for s in (0, 1)])
    two = group_runs([_result("fedct", 0, [0.7, 0.8]), _result("local", 0, [0.6])])
    assert [t for t, _ in figures(one, summary_rows(one))] == ["Accuracy per round"]
    assert "Accuracy against communication" in [t for t, _ in figures(two, summary_rows(two))]


def _majority_runs(dp_fedct: float, fedct: float, local: float) -> list:
    """DP-FedCT at ε = 1, FedCT and local-only with these final accuracies on a task whose
    training labels are 90 % class 0 (the majority-class baseline 0.900)."""
    dp = {"guarantee": "formal", "epsilon": 1.0, "delta": 1e-5}
    runs = [_result("dp-fedct", 0, [dp_fedct], privacy=dp), _result("fedct", 0, [fedct]),
            _result("local", 0, [local])]
    for r in runs:
        r.federation.update(client_class_counts=[[90, 10], [90, 10]], n_test=1000)
    return runs


def test_the_privacy_and_communication_figures_draw_the_majority_class_baseline():
    """On imbalanced classes DP-FedCT at ε = 1 and ε = 8, FedCT and local-only all sat at
    0.904-0.905, the accuracy of always answering the commonest class: the ε figure read
    as privacy at no cost, since only the round figure drew the baseline."""
    import matplotlib.pyplot as plt

    from fedlabels.reporting.report_figures import (
        EPSILON_AXIS,
        communication_figure,
        privacy_figure,
    )

    runs = _majority_runs(0.904, 0.905, 0.9)
    configs = group_runs(runs)
    rows = summary_rows(configs)
    for fig in (communication_figure(rows, runs),
                privacy_figure(rows, "epsilon_mean", "epsilon_std", EPSILON_AXIS, "t",
                               "no DP", runs=runs)):
        try:
            ax = fig.axes[0]
            (base,) = [ln for ln in ax.get_lines()
                       if ln.get_label().startswith("majority class (always '0')")]
            assert base.get_ydata()[0] == pytest.approx(0.9)  # 90 / (90 + 10)
            shown = [" ".join(t.get_text().split()) for t in fig.legends[0].get_texts()]
            assert base.get_label() in shown  # in the legend, wrapped or not
        finally:
            plt.close(fig)


def test_configurations_that_read_alike_are_told_apart_by_what_one_lacks():
    """An audited run beside a plain one: the plain one reads "no audit", not "(other
    settings)"."""
    from fedlabels.reporting.plots import setting_differences

    assert setting_differences([{"rounds": 5, "audit": {"attacks": ["loss"]}},
                                {"rounds": 5}]) == ["audit", "no audit"]
    assert setting_differences([{"quorum": 0.9}, {"quorum": None}]) == \
        ["quorum=0.9", "no quorum"]


def test_the_summary_table_says_where_each_configuration_trained(tmp_path):
    """summary.csv names the devices (with the GPU's name) and the precision of the runs."""
    gpu = {"asked": "cuda", "devices": ["cuda:0"], "precision": "bf16",
           "device_names": {"cuda:0": "NVIDIA H100 80GB HBM3"}}
    runs = [_result("fedct", 0, [0.6, 0.8]), _result("fedavg", 0, [0.7, 0.9])]
    runs[0].extra["device"] = {"asked": "cpu", "devices": ["cpu"], "precision": "fp32",
                               "device_names": {}}
    runs[1].extra["device"] = gpu
    rows = summary_rows(group_runs([*runs, _result("local", 0, [0.5])]))
    assert [(r["device"], r["precision"]) for r in rows] == [
        ("cpu", "fp32"), ("cuda:0 (NVIDIA H100 80GB HBM3)", "bf16"), (None, None)]
    for i, r in enumerate(runs):
        r.save_json(tmp_path / f"r{i}.json")
    assert main(["report", str(tmp_path / "r0.json"), str(tmp_path / "r1.json"),
                 "-o", str(tmp_path / "page.html")]) == 0
    with open(tmp_path / "page.summary.csv") as fh:
        table = list(csv.DictReader(fh))
    assert [(t["device"], t["precision"]) for t in table] == [
        ("cpu", "fp32"), ("cuda:0 (NVIDIA H100 80GB HBM3)", "bf16")]


def test_below_local_claims_harm_only_beyond_noise():
    """'collaborating made the clients worse' needs the difference's 95 % interval below 0:
    the paired t-interval over seeds (scipy's t.interval as the oracle), else binomial."""
    from scipy import stats

    from fedlabels.reporting.report import configuration_warnings
    from fedlabels.results.caveats import below_reference

    def warned(fed_accs: list[float]) -> str:
        runs = [_result("local", s, [a]) for s, a in enumerate((0.90, 0.86, 0.88))]
        runs += [_result("fedct", s, [a]) for s, a in enumerate(fed_accs)]
        configs = group_runs(runs)
        (line,) = [w for c, w in configuration_warnings(configs, summary_rows(configs))
                   if "local-only" in w]
        return line

    close = [0.89, 0.87, 0.86]  # below on average, but seed by seed +-: noise
    diffs = np.subtract(close, (0.90, 0.86, 0.88))
    lo, hi = stats.t.interval(0.95, 2, loc=diffs.mean(), scale=stats.sem(diffs))
    line = warned(close)
    assert "within noise" in line and "made the clients worse" not in line
    assert f"[{lo:+.3f}, {hi:+.3f}]" in line and "3 paired seeds" in line
    far = [0.70, 0.68, 0.69]
    diffs = np.subtract(far, (0.90, 0.86, 0.88))
    lo, hi = stats.t.interval(0.95, 2, loc=diffs.mean(), scale=stats.sem(diffs))
    line = warned(far)
    assert "made the clients worse" in line and f"[{lo:+.3f}, {hi:+.3f}]" in line
    # one seed each: the two accuracies' binomial noise on the test set
    se = np.sqrt((0.87 * 0.13 + 0.875 * 0.125) / 114)
    lo, hi = stats.norm.interval(0.95, loc=0.87 - 0.875, scale=se)
    line = below_reference(0.87, 0.875, "local", n_test=114)
    assert "within noise" in line and f"[{lo:+.3f}, {hi:+.3f}]" in line
    assert "made the clients worse" in below_reference(0.70, 0.875, "local", n_test=114)


def test_vul_interval_over_seeds_is_a_95_percent_t_interval(tmp_path):
    """Several seeds: the 'VUL 95 % interval' is the t-interval of the mean VUL (scipy's
    t.interval as the oracle), not mean ± one std (a ~68 % spread of single runs)."""
    from scipy import stats

    vuls = [0.58, 0.66, 0.61, 0.63]
    runs = [_result("fedct", s, [0.8], privacy={"vul": v, "vul_ci": [v - 0.1, v + 0.1]})
            for s, v in enumerate(vuls)]
    row = summary_rows(group_runs(runs))[0]
    lo, hi = stats.t.interval(0.95, len(vuls) - 1, loc=np.mean(vuls), scale=stats.sem(vuls))
    assert (row["vul_low"], row["vul_high"]) == (pytest.approx(lo), pytest.approx(hi))
    paths = []
    for i, r in enumerate(runs):
        paths.append(tmp_path / f"a{i}.json")
        r.save_json(paths[-1])
    assert main(["report", *map(str, paths), "-o", str(tmp_path / "rep")]) == 0
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "<th>VUL 95 % interval</th>" in html
    assert f"[{lo:.3f}, {hi:.3f}] (t, seeds)" in html


def test_equal_values_over_seeds_show_no_spread():
    """Three seeds with the same ε (a DP run's target): the cell is the ε alone, not
    '7.999997 ± 0.000000' from the mean of equal floats being an ulp off."""
    from fedlabels.reporting.report_page import cost_columns

    eps = 7.9999967814715784  # np.std([eps] * 3, ddof=1) is 1e-15, not 0
    dp = {"guarantee": "formal", "epsilon": eps, "delta": 1e-5}
    row = summary_rows(group_runs([_result("dp-fedct", s, [0.8], privacy=dp)
                                   for s in range(3)]))[0]
    assert (row["epsilon_mean"], row["epsilon_std"]) == (eps, 0.0)
    (cell,) = [c(row) for h, _, c in cost_columns() if h == "ε spent"]
    assert cell == "8.00"


def test_figure_bars_say_what_they_are_and_vul_bars_are_its_interval():
    """Every bar is labelled (± std over seeds), and the VUL figure's horizontal bar is the
    table's 95 % interval: a one-seed audit drew none though it has one."""
    import matplotlib.pyplot as plt

    from fedlabels.reporting.report_figures import (
        communication_figure,
        figures,
        privacy_figure,
    )

    audited = {"guarantee": "none", "vul": 0.62, "vul_ci": [0.55, 0.71]}
    runs = [_result("fedct", 0, [0.8], privacy=audited), _result("local", 0, [0.7])]
    configs = group_runs(runs)
    rows = summary_rows(configs)
    fig = communication_figure(rows)
    assert "bars: ± std over seeds" in fig.axes[0].get_ylabel()
    plt.close(fig)
    titles = [t for t, _ in figures(configs, rows)]
    assert "Privacy against utility: VUL (audited runs)" in titles
    fig = privacy_figure(rows, "vul_mean", ("vul_low", "vul_high"), "VUL", "t", "not audited")
    ax = fig.axes[0]
    (bar,) = [c for c in ax.containers if c.get_label() == rows[0]["configuration"]]
    (segments,) = [lc.get_segments() for lc in bar.lines[2]
                   if np.ptp(lc.get_segments()[0][:, 0]) > 0]
    assert segments[0][:, 0].tolist() == pytest.approx([0.55, 0.71])
    assert "vertical bars: ± std over seeds" in ax.get_ylabel()
    plt.close(fig)


def test_the_guarantee_says_its_unit_and_against_whom_in_table_and_figure(tmp_path):
    """Client-level DP-FedAvg (not against the server) and record-level DP-FedCT (against
    the server) both read 'formal' in the table, and their ε sat on one axis unexplained."""
    import matplotlib.pyplot as plt

    from fedlabels.reporting.report_figures import privacy_figure

    central = {"guarantee": "formal", "epsilon": 4.0, "delta": 1e-5,
               "neighbouring": "client-level: one client (all its records) added or removed",
               "guarantee_against": "anyone observing the global models (other clients, "
                                    "users of the final model); not the server"}
    local = {"guarantee": "formal", "epsilon": 8.0, "delta": 1e-5,
             "neighbouring": "record-level: one private record of one client",
             "guarantee_against": "the server and the other clients (everything a client "
                                  "sends), and anyone who sees the consensus"}
    runs = [_result("dp-fedavg", 0, [0.6], privacy=central),
            _result("dp-fedct", 0, [0.8], privacy=local), _result("fedct", 0, [0.8])]
    paths = [tmp_path / f"{i}.json" for i in range(3)]
    for res, path in zip(runs, paths, strict=True):
        res.save_json(path)
    assert main(["report", *map(str, paths), "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert ("<td>formal, client-level (one client added or removed), against anyone "
            "observing the global models; not the server</td>") in page
    assert "<td>formal, record-level, against the server and the other clients</td>" in page
    rows = summary_rows(group_runs(runs))
    fig = privacy_figure(rows, "epsilon_mean", "epsilon_std", "ε", "t", "no DP",
                         guarantee=True)
    entries = [" ".join(t.get_text().split()) for leg in fig.legends for t in leg.get_texts()]
    assert any("dp-fedavg" in e and "client-level" in e and "not the server" in e
               for e in entries)
    assert any("dp-fedct" in e and "record-level, against the server" in e for e in entries)
    assert "not comparable" in fig.axes[0].get_xlabel()  # two guarantees on one ε axis
    plt.close(fig)


def test_the_table_names_a_configuration_whole(tmp_path):
    """A name past 56 characters was cut in the HTML table too ('mechanis…'), hiding the
    options that define the configuration; the page has room for all of it."""
    res = _result("fedct", 0, [0.8])
    res.config["options"] = {"a_rather_long_option_name_indeed": 0.123456,
                             "mechanism": "dpsgd", "site_model": "private"}
    res.save_json(tmp_path / "r.json")
    assert main(["report", str(tmp_path / "r.json"), "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert ("<td>fedct · dt (a_rather_long_option_name_indeed=0.123456, mechanism=dpsgd, "
            "site_model=private)</td>") in page
    assert "…" not in page


def test_the_page_and_its_figures_say_what_ran(tmp_path, monkeypatch):
    """The page was titled 'fedlabels report' and its figures named no dataset, rounds or
    seeds: a figure copied out of the page said nothing of what it shows."""
    import matplotlib.pyplot as plt

    from fedlabels.reporting import report_figures

    runs = [_result("fedct", s, [0.7, 0.8]) for s in (0, 1)] + [_result("local", 0, [0.6])]
    paths = [tmp_path / f"{i}.json" for i in range(3)]
    for res, path in zip(runs, paths, strict=True):
        res.save_json(path)
    assert main(["report", *map(str, paths), "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "<title>fedlabels report: toy, m = 2, R = 2, seeds 0, 1</title>" in page
    assert '<img alt="Accuracy per round (toy, m = 2, R = 2, seeds 0, 1)"' in page
    configs = group_runs(runs)
    rows = summary_rows(configs)
    made = []
    real = report_figures.png
    monkeypatch.setattr(report_figures, "png",
                        lambda fig: made.append(fig.axes[0].get_title()) or real(fig))
    report_figures.figures(configs, rows)
    plt.close("all")
    assert made and all(t.endswith("\ntoy, m = 2, R = 2, seeds 0, 1") for t in made), made


def test_a_regression_report_keeps_its_communication_and_privacy_figures():
    """The summary figures plotted accuracy alone, so a regression report dropped 'against
    communication' and its DP runs' ε figure without a word; they now plot the RMSE."""
    from fedlabels.reporting.report_figures import figures

    dp = {"guarantee": "formal", "epsilon": 2.0, "delta": 1e-5}
    runs = [_result("fedct", 0, [0.8]), _result("dp-fedct", 0, [0.7], privacy=dp)]
    for res, rmse in zip(runs, (60.0, 70.0), strict=True):
        res.federation["task"] = "regression"
        for rec in res.rounds:
            rec.accuracies, rec.rmse, rec.r2 = None, [rmse] * 2, [0.1, 0.1]
    configs = group_runs(runs)
    rows = summary_rows(configs)
    assert rows[0]["accuracy_mean"] is None and rows[0]["rmse_mean"] == 60.0
    titles = [t for t, _ in figures(configs, rows)]
    assert titles == ["RMSE per round", "RMSE against communication",
                      "Privacy against utility: ε (DP runs)"]


def test_twelve_configurations_look_unlike_each_other_and_avoid_red_and_green():
    """Colours were matplotlib's C0..C9 by position: the 11th configuration looked exactly
    like the 1st, and C2/C3 set green against red, which a red-green colour-blind reader
    cannot tell apart. Each now has a colour-blind-safe colour and, with it, a marker no
    other configuration shares."""
    from matplotlib.colors import to_rgb

    from fedlabels.reporting.report_figures import communication_figure

    runs = [_result("fedct", 0, [0.5 + k / 40], rounds_config=k + 1) for k in range(12)]
    rows = summary_rows(group_runs(runs))
    fig = communication_figure(rows)
    looks = [(to_rgb(c.lines[0].get_color()), c.lines[0].get_marker())
             for c in fig.axes[0].containers]
    assert len(looks) == 12 and len(set(looks)) == 12
    for rgb, _ in looks:  # nothing pure red or pure green: (r, g, b) far from those
        r, g, b = rgb
        assert not (r > 0.75 and g < 0.3 and b < 0.3), rgb  # red
        assert not (g > 0.5 and r < 0.3 and b < 0.3), rgb  # green


def test_the_order_the_files_are_given_in_changes_no_value():
    """A configuration's runs were averaged in the order given: `report s0 s1 s2 s3` and
    `report s3 s1 s0 s2` wrote different last digits of the means and spreads and another
    seed list. Every row is now the same, whatever the order."""
    finals = [0.8998459852189635, 0.92817253863523, 0.9353851738248752, 0.9196018014341002]
    runs = [_result("fedct", seed, [0.5, acc]) for seed, acc in enumerate(finals)]
    given = summary_rows(group_runs(runs))
    shuffled = summary_rows(group_runs([runs[i] for i in (3, 1, 0, 2)]))
    assert given[0]["seeds"] == shuffled[0]["seeds"] == "0 1 2 3"
    # numpy's std of these four in the other order differs in the last digit
    assert np.std(finals, ddof=1) != np.std([finals[i] for i in (3, 1, 0, 2)], ddof=1)
    assert shuffled[0]["accuracy_std"] == given[0]["accuracy_std"] == np.std(finals, ddof=1)
    assert shuffled == given  # exactly: every float to its last digit


@pytest.mark.parametrize("change", [
    lambda d: d.update(rounds=5),
    lambda d: d.update(federation=[]),
    lambda d: d.update(config="zz"),
    lambda d: d.update(privacy="zz"),
    lambda d: d.update(method=5),
    lambda d: d["rounds"][0].update(accuracies="abc"),
    lambda d: d["rounds"][0].update(round="a"),
], ids=["rounds", "federation", "config", "privacy", "method", "accuracies", "round"])
def test_a_result_of_the_wrong_types_is_one_line_in_report_and_plot(tmp_path, capsys,
                                                                    change):
    """A forged or damaged result JSON (``"federation": []``, accuracies of text, ...) was
    an AttributeError/TypeError traceback (exit 1) in ``plot`` and ``report``."""
    data = json.loads(json.dumps(_result("fedct", 0, [0.5, 0.6]).to_dict()))
    change(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    for argv in (["plot", str(path), "-o", str(tmp_path / "p.png")],
                 ["report", str(path), "-o", str(tmp_path / "r.html")]):
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2 and "not a valid fedlabels result" in err, err
        assert err.count("\n") == 1, err


def test_a_result_nested_too_deep_is_one_line(tmp_path, capsys):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert main(["plot", str(path), "-o", str(tmp_path / "p.png")]) == 2
    err = capsys.readouterr().err
    assert "nested too deep" in err and err.count("\n") == 1, err


def test_a_result_that_is_a_device_or_a_pipe_is_refused_unread(tmp_path, capsys):
    """A result path linked to /dev/zero was read for ever (a MemoryError traceback once
    memory ran out), and a named pipe hung ``plot`` and ``report``."""
    from conftest import fed_fifo

    (tmp_path / "zero.json").symlink_to("/dev/zero")
    # a reader that opens the pipe gets "{}" (not a hang): the test then fails on the
    # message, before /dev/zero is read
    with fed_fifo(tmp_path / "pipe.json", b"{}"):
        _refused_unread(tmp_path, capsys)


def _refused_unread(tmp_path, capsys) -> None:
    for name in ("pipe.json", "zero.json"):
        for argv in (["plot", str(tmp_path / name), "-o", str(tmp_path / "p.png")],
                     ["report", str(tmp_path / name), "-o", str(tmp_path / "r.html")]):
            assert main(argv) == 2
            err = capsys.readouterr().err
            assert "is not a regular file" in err and err.count("\n") == 1, err


def test_epsilon_axis_and_column_say_spent_not_budget(monkeypatch):
    """A run's ``privacy.epsilon`` is what it spent, below its ``epsilon`` budget where
    clients sat rounds out: the ε axis said "total privacy budget" and put a run of budget
    8 at 5.5, beside a legend naming epsilon=8."""
    from fedlabels.reporting import report_figures
    from fedlabels.reporting.report_page import cost_columns

    spent = {"guarantee": "formal", "epsilon": 5.5, "delta": 1e-5,
             "target": {"epsilon": 8.0, "delta": 1e-5}}
    configs = group_runs([_result("dp-fedct", 0, [0.7], privacy=spent),
                          _result("fedct", 0, [0.8])])
    rows = summary_rows(configs)
    drawn = []
    monkeypatch.setattr(report_figures, "png", lambda fig: drawn.append(fig) or "")
    report_figures.figures(configs, rows)
    (axis,) = [f.axes[0] for f in drawn if "ε" in f.axes[0].get_xlabel()]
    (x,) = {round(float(line.get_xdata()[0]), 6) for line in axis.lines
            if len(line.get_xdata()) == 1}  # the DP run's point
    assert x == spent["epsilon"]  # what is drawn is what was spent ...
    label = axis.get_xlabel()
    assert "spent" in label and "total privacy budget" not in label  # ... and says so
    (header,) = [h for h, key, _ in cost_columns() if key == "epsilon_mean"]
    assert "spent" in header


def test_the_page_says_how_each_run_ran_and_what_its_guarantee_covers(tmp_path):
    """The page named each result by its file or repr alone: not the command that made
    it, not a Python run's partition or participation, not the neighbouring datasets or
    the adversary of a DP guarantee."""
    import html
    import shlex

    import fedlabels as fl

    cli = tmp_path / "cli.json"
    assert main(["-q", "run", "--method", "fedct", "--dataset", "wine", "--clients", "3",
                 "--rounds", "1", "--seed", "2", "--output", str(cli)]) == 0
    fed = fl.load_federation("wine", clients=3, partition="dirichlet:0.5", seed=0)
    python_run = fl.run("fedct", fed, model="dt", rounds=1, participation=2, seed=1,
                        progress=False)
    dp = fl.run("dp-fedct", "wine", clients=3, rounds=1, progress=False,
                options={"epsilon": 8, "mechanism": "xor"})
    out = tmp_path / "rep.html"
    fl.report([str(cli), python_run, dp], out)
    page = html.unescape(out.read_text())
    listed = page[page.index("<h2>Results"):]
    saved = json.loads(cli.read_text())
    assert shlex.join(saved["provenance"]["command_line"]) in listed  # the command
    for text in ("partition='dirichlet:0.5,0.5'", "participation=2", "seed=1"):
        assert text in listed, text  # a Python run's settings, from its record
    privacy = dp.privacy
    assert privacy["guarantee"] == "formal"
    for text in (privacy["guarantee_against"], privacy["neighbouring"]):
        assert text in listed
    # and what the guarantee leaves outside (a privacy officer's question): every value
    # the result names, with its reason (the page stated the rest of the guarantee only)
    assert privacy["outside_guarantee"]  # the test accuracies, the clients' sizes, ...
    for entry in privacy["outside_guarantee"]:
        assert f"{entry['name']} ({entry['reason']})" in listed
    assert "outside the guarantee: " in listed
    assert f"none ({python_run.privacy['reason']})" in listed


def test_each_dataset_names_its_own_positive_class(tmp_path):
    """The sentence naming the positive class of sensitivity and specificity came from the
    first configuration, so a report of two binary datasets named one dataset's class for
    both."""
    import html as html_module

    from fedlabels.reporting.report import write_report

    def binary(dataset: str, names: list[str], k: int) -> RunResult:
        result = _result("fedct", 0, [0.7, 0.8])
        result.dataset = dataset
        result.federation = {"n_clients": 2, "class_names": names}
        result.extra["clinical"] = {"positive_class": {"class": k, "name": names[k],
                                                       "rule": "the rarer training class"}}
        return result

    outputs, _ = write_report([binary("toy", ["benign", "malignant"], 1),
                               binary("other", ["sick", "well"], 0)], tmp_path / "r.html")
    page = html_module.unescape(outputs["report"].read_text())
    assert "malignant on toy (the rarer training class)" in page.replace("<b>", "").replace(
        "</b>", "")
    assert "sick on other" in page.replace("<b>", "").replace("</b>", "")
    outputs, _ = write_report([binary("toy", ["benign", "malignant"], 1)], tmp_path / "one.html")
    page = html_module.unescape(outputs["report"].read_text())
    assert "take <b>malignant</b> as the positive class" in page


def test_a_run_at_exactly_the_baseline_is_drawn_over_it():
    """FedCT's no-DP line at 0.900 in the ε figure, the majority class's value, was hidden
    under the grey baseline drawn after it at the same zorder: the baseline is drawn beneath
    every run, in each figure that draws it."""
    import matplotlib.pyplot as plt

    from fedlabels.reporting.report_figures import (
        EPSILON_AXIS,
        communication_figure,
        privacy_figure,
    )

    runs = _majority_runs(0.85, 0.9, 0.9)
    rows = summary_rows(group_runs(runs))
    for fig in (privacy_figure(rows, "epsilon_mean", "epsilon_std", EPSILON_AXIS, "t",
                               "no DP", runs=runs), communication_figure(rows, runs)):
        try:
            ax = fig.axes[0]
            artists = ax.get_children()
            order = sorted(range(len(artists)), key=lambda i: (artists[i].get_zorder(), i))
            drawn = [artists[i] for i in order]  # matplotlib's drawing order
            (base,) = [a for a in drawn if str(a.get_label()).startswith("majority class")]
            runs_drawn = [a for a in drawn if isinstance(a, plt.Line2D) and a is not base
                          and not str(a.get_label()).startswith("_")]
            runs_drawn += [a for c in ax.containers for a in c.get_children()]
            assert runs_drawn
            assert all(drawn.index(a) > drawn.index(base) for a in runs_drawn)
        finally:
            plt.close(fig)


def test_a_missing_column_at_predict_lists_the_columns_and_what_an_empty_cell_gets(tmp_path,
                                                                                   capsys):
    """predict on rows without 'dose' said 'lacks column(s) dose the models were trained on
    (4 columns)': not which four, nor whether the column may come with empty cells. It names
    them all and says whether the run fills an empty numeric cell (U's median) or refuses it;
    fedlabels predict names the CSV file."""
    import fedlabels as fl

    rng = np.random.default_rng(0)
    X = pd.DataFrame({"age": rng.normal(50, 9, 200), "dose": rng.normal(5, 2, 200),
                      "sex": rng.choice(["f", "m"], 200)})
    y = (X["age"] + 3 * X["dose"] > 65).astype(int)
    expected = "'age', 'dose', 'sex'"
    for missing, says in (("refuse", "the run filled no gaps (missing='refuse'), so an "
                                     "empty cell is refused"),
                          ("public-median", "an empty cell of a numeric column is filled "
                                            "with U's median")):
        fed = fl.make_federation(X, y, clients=3, seed=0, missing=missing)
        res = fl.run("fedct", fed, model="dt", rounds=1, progress=False)
        with pytest.raises(fl.FedLabelsError) as err:
            res.predict(X.drop(columns="dose"))
        text = str(err.value)
        assert "\n" not in text and f"(1 of the 3 the models were trained on: {expected})" \
            in text and says in text and "'dose'" in text
        if missing == "public-median":  # as the message says: an empty dose is filled
            assert len(res.predict(X.assign(dose=np.nan))) == len(X)
    with pytest.raises(fl.FedLabelsError, match=r"lacks column\(s\) 'sex' .* a categorical "
                       r"column needs a value in every row\.$"):
        res.predict(X.drop(columns="sex"))
    out = tmp_path / "r.json"
    res.save(out)
    X.drop(columns="dose").to_csv(tmp_path / "new.csv", index=False)
    assert main(["predict", str(out), str(tmp_path / "new.csv"), "-o",
                 str(tmp_path / "p.csv")]) == 2
    assert f"{tmp_path / 'new.csv'} lacks column(s) 'dose'" in capsys.readouterr().err


def _clinical_runs() -> list:
    """_majority_runs with each run's balanced accuracy and macro-F1 (accuracy 0.904, 0.905,
    0.9; balanced accuracy 0.61, 0.72, 0.55) and two-class confusion matrices."""
    runs = _majority_runs(0.904, 0.905, 0.9)
    for r, ba in zip(runs, (0.61, 0.72, 0.55), strict=True):
        r.extra["clinical"] = {
            "metrics": {"balanced_accuracy": {"mean": ba}, "macro_f1": {"mean": ba - 0.1}},
            "confusion_matrices": [[[880, 20], [60, 40]]] * 2}
    return runs


@pytest.mark.parametrize("metric", ["balanced_accuracy", "macro_f1"])
def test_the_communication_and_privacy_figures_plot_the_chosen_metric(metric, tmp_path):
    """With --metric balanced_accuracy the communication and ε figures plotted accuracy
    (and the majority class's accuracy as their baseline) while the table's headline was
    another metric; they plot it, with its baseline where it has one (a constant answer's
    balanced accuracy, 1/C) and none for a metric without one (macro-F1)."""
    import matplotlib.pyplot as plt

    from fedlabels.reporting.report import write_report
    from fedlabels.reporting.report_figures import (
        EPSILON_AXIS,
        communication_figure,
        figures,
        privacy_figure,
    )
    from fedlabels.reporting.report_page import HEADINGS

    runs = _clinical_runs()
    configs = group_runs(runs)
    rows = summary_rows(configs)
    wanted = {r["configuration"]: r[f"{metric}_mean"] for r in rows}
    assert wanted != {r["configuration"]: r["accuracy_mean"] for r in rows}
    for fig in (communication_figure(rows, runs, metric),
                privacy_figure(rows, "epsilon_mean", "epsilon_std", EPSILON_AXIS, "t",
                               "no DP", runs=runs, metric=metric)):
        try:
            ax = fig.axes[0]
            assert HEADINGS[metric] in ax.get_ylabel()
            assert "accuracy" not in ax.get_ylabel().replace("balanced accuracy", "")
            drawn = {ln.get_label(): ln for ln in ax.get_lines()}
            drawn.update({c.get_label().split("\n")[0]: c.lines[0] for c in ax.containers})
            for conf, value in wanted.items():  # a point, or a horizontal line for no DP
                line = drawn.get(conf) or next(ln for label, ln in drawn.items()
                                               if label.startswith(f"{conf}: "))
                assert line.get_ydata()[0] == pytest.approx(value)
            bases = [ln for label, ln in drawn.items() if label.startswith("majority class")]
            shown = " ".join(" ".join(t.get_text().split()) for t in fig.legends[0].get_texts())
            if metric == "balanced_accuracy":
                (base,) = bases
                assert base.get_ydata()[0] == pytest.approx(1 / 2)  # two classes
                assert "balanced accuracy 1/C = 0.500" in shown
            else:
                assert not bases and "majority class" not in shown
        finally:
            plt.close(fig)
    titles = [t for t, _ in figures(configs, rows, metric)]
    heading = HEADINGS[metric][0].upper() + HEADINGS[metric][1:]
    assert f"{heading} against communication" in titles
    assert "Accuracy per round" in titles  # the rounds record accuracy only
    outputs, _ = write_report(runs, tmp_path / "r.html", metric=metric)  # --metric reaches it
    assert f"<h2>{heading} against communication</h2>" in outputs["report"].read_text()


def test_the_round_figure_says_which_curve_hides_another():
    """Two configurations with the same mean every round (DP-FedCT at ε = 1 and ε = 4,
    both 0.439) drew one curve over the other, the hidden one's entry silent about it."""
    import matplotlib.pyplot as plt

    from fedlabels.reporting.report_figures import curves_figure

    results = [_result("dp-fedct", 0, [0.4, 0.439], privacy={"guarantee": "formal"}),
               _result("fedct", 0, [0.4, 0.439]), _result("fedavg", 0, [0.4, 0.5])]
    results[0].config["epsilon"] = 1.0
    configs = group_runs(results)
    rows = summary_rows(configs)
    fig = curves_figure(configs, rows)
    try:
        _, labels = fig.axes[0].get_legend_handles_labels()
        texts = [t.replace("\n    ", " ") for t in labels]
        hiding = [t for t in texts if "the same curve as" in t]
        first = configs[0].label
        assert hiding == [next(t for t in texts if t.startswith(configs[1].label))]
        assert hiding[0].endswith(f"(the same curve as {first})")
    finally:
        plt.close(fig)


@pytest.mark.parametrize("ends", [(12, 3, 5), (3, 12, 12)])
def test_a_sweep_says_how_many_of_its_seeds_were_interrupted(ends):
    """fedlabels plot's line of a configuration over seeds took its status and 'at round N'
    from the first seed alone: 'at the end' where seeds 1 and 2 stopped at rounds 3 and 5,
    '[interrupted after round 3 of 12]' where seed 0 alone stopped."""
    import matplotlib.pyplot as plt

    from fedlabels.reporting.plots import accuracy_figure

    runs = [_result("fedct", seed, list(np.linspace(0.5, 0.8, 12))[:n], rounds_config=12)
            for seed, n in enumerate(ends)]
    stopped = [n for n in ends if n < 12]
    fig = accuracy_figure(runs)
    try:
        _, labels = fig.axes[0].get_legend_handles_labels()
        (entry,) = [t.replace("\n    ", " ") for t in labels if t.startswith("fedct")]
        assert f"[{len(stopped)} of 3 seeds interrupted]" in entry
        assert "interrupted after" not in entry
        assert entry.endswith(f" at round {min(stopped)}")
    finally:
        plt.close(fig)


def test_report_names_the_checkpoints_kept_beside_its_results(tmp_path, capsys):
    """`fedlabels run -q` keeps its checkpoint without a word; `fedlabels report` of its
    result says on stderr how many are kept, their size and which to delete, not on the
    page."""
    from fedlabels.cli.run import size_text
    from fedlabels.runs.checkpoint import checkpoint_path
    from fedlabels.runs.journal import journal_path

    args = ["run", "--method", "fedct", "--clients", "3", "--model", "dt", "--rounds", "1",
            "--seed", "0", "--no-progress", "-q"]
    kept, without = tmp_path / "a.json", tmp_path / "b.json"
    assert main([*args, "--output", str(kept)]) == 0
    assert main([*args, "--output", str(without), "--no-checkpoint"]) == 0
    assert "checkpoint" not in "".join(capsys.readouterr())
    files = [checkpoint_path(kept), journal_path(checkpoint_path(kept))]
    size = sum(f.stat().st_size for f in files if f.is_file())
    assert main(["report", str(kept), str(without), "-o", str(tmp_path / "r.html")]) == 0
    out, err = capsys.readouterr()
    (line,) = [t for t in err.splitlines() if "checkpoint" in t]
    assert line.startswith("fedlabels: 1 checkpoint kept beside these results (")
    assert f"({size_text(size)} with its journal)" in line
    assert line.endswith(f": {checkpoint_path(kept)}") and "checkpoint" not in out
    assert "checkpoint.npz" not in (tmp_path / "r.html").read_text()
    assert main(["report", str(without), "-o", str(tmp_path / "s.html")]) == 0
    assert "checkpoint" not in "".join(capsys.readouterr())


def test_the_round_figure_says_how_many_seeds_were_interrupted():
    """The report's round figure named the first interrupted seed's status alone ('[seed
    1: interrupted after round 3 of 12]') where seeds 1 and 2 were."""
    import matplotlib.pyplot as plt

    from fedlabels.reporting.report_figures import curves_figure

    runs = [_result("fedct", seed, list(np.linspace(0.5, 0.8, 12))[:n], rounds_config=12)
            for seed, n in enumerate((12, 3, 5))]
    configs = group_runs(runs)
    fig = curves_figure(configs, summary_rows(configs))
    try:
        _, labels = fig.axes[0].get_legend_handles_labels()
        (entry,) = [t.replace("\n    ", " ") for t in labels if t.startswith("fedct")]
        assert "[2 of 3 seeds interrupted]" in entry and "seed 1:" not in entry
        assert entry.endswith(" at round 3")
    finally:
        plt.close(fig)
