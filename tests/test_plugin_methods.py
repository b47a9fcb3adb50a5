"""A method from another installed package: found through the ``fedlabels.methods`` entry
points, listed by ``fedlabels methods``, run by ``fedlabels run`` and over the Flower loopback
grid, checked by :func:`fedlabels.testing.check_method`; broken copies fail the check they
break, and a broken plug-in is one line naming its package, leaving the other methods be."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fedlabels as fl
import fedlabels.methods.registry as registry
from conftest import digits_with_sizes
from fedlabels.comm import Message, unpack_labels
from fedlabels.core.errors import FedLabelsError
from fedlabels.method.options import OPTION_USERS
from fedlabels.testing import ContractViolation, check_method

SRC = Path(__file__).resolve().parents[1] / "src"

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def _documented_module() -> str:
    """The one-module method of docs/architecture.md, "Writing a method", as written."""
    block = re.search(r"## Writing a method.*?```python\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert block, "docs/architecture.md lost its method module"
    return block.group(1)


def _dist(root: Path, package: str, entry_points: str) -> None:
    info = root / f"{package}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))


#: a plug-in whose option, declared flag=True, is named like a `fedlabels run` option
CLASH_MODULE = """
from dataclasses import dataclass

from fedlabels.method.options import option
from fedlabels_echo import Echo, EchoOptions


@dataclass(frozen=True)
class ClashOptions(EchoOptions):
    output: str = option("x", "where to write", kind=str, flag=True)


class Clash(Echo):
    name = "clash"
    options_class = ClashOptions
"""


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Installed plug-in packages on sys.path: ``fedlabels_echo`` (the documented echo
    method), ``fedlabels_broken`` (whose module fails to import) and ``fedlabels_clash``
    (an option named like a CLI option); the registry is restored after."""
    root = tmp_path / "site"
    root.mkdir()
    (root / "fedlabels_echo.py").write_text(_documented_module())
    _dist(root, "fedlabels_echo", "[fedlabels.methods]\necho = fedlabels_echo:Echo\n")
    (root / "fedlabels_broken.py").write_text("raise ImportError('needs numpy 0.1')\n")
    (root / "fedlabels_clash.py").write_text(CLASH_MODULE)
    _dist(root, "fedlabels_clash", "[fedlabels.methods]\nclash = fedlabels_clash:Clash\n")
    _dist(root, "fedlabels_broken", "[fedlabels.methods]\nbroken = fedlabels_broken:Broken\n")
    monkeypatch.syspath_prepend(str(root))
    before = (dict(registry.METHODS), dict(registry.PLUGINS), dict(registry.PLUGIN_ERRORS),
              set(registry._LOADED), {k: list(v) for k, v in OPTION_USERS.items()})
    yield root
    for saved, live in zip(before, (registry.METHODS, registry.PLUGINS, registry.PLUGIN_ERRORS,
                                    registry._LOADED, OPTION_USERS), strict=True):
        live.clear()
        live.update(saved)  # type: ignore[attr-defined]
    sys.modules.pop("fedlabels_echo", None)
    sys.modules.pop("fedlabels_broken", None)
    sys.modules.pop("fedlabels_clash", None)


def _cli(root: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(root)])}
    return subprocess.run([sys.executable, "-m", "fedlabels", *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300)


def test_cli_lists_and_runs_the_plugin_and_names_the_broken_package(plugins: Path,
                                                                      tmp_path: Path) -> None:
    listed = _cli(plugins, "methods", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "every client trains alone" in listed.stdout and "rounds_of_silence" in listed.stdout
    assert "fedct" in listed.stdout  # the built-in methods are still there
    assert "clash " in listed.stdout  # its `output` option is no flag: the CLI still builds
    broken = [line for line in listed.stderr.splitlines() if "broken" in line]
    assert len(broken) == 1 and "fedlabels_broken" in broken[0] and "ImportError" in broken[0]
    assert "Traceback" not in listed.stderr

    out = tmp_path / "echo.json"
    ran = _cli(plugins, "run", "--method", "echo", "--dataset", "breast_cancer", "--clients",
               "3", "--model", "dt", "--rounds", "2", "--opt", "rounds_of_silence=1",
               "--output", str(out), "--no-progress", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    result = json.loads(out.read_text())
    assert result["method"] == "echo"
    assert [r["server"] for r in result["rounds"]] == [{}, {"replies": 3.0}]
    assert result["threat_model"]["payloads"][0]["message"] == "echo.labels"
    assert registry.available_methods()["echo"] is registry.get_method("echo")
    assert registry.PLUGINS == {"clash": "fedlabels_clash", "echo": "fedlabels_echo"}

    refused = _cli(plugins, "run", "--method", "broken", "--rounds", "1", cwd=tmp_path)
    assert refused.returncode == 2
    assert "fedlabels_broken" in refused.stderr and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_a_plugin_option_given_as_a_flag_says_to_use_opt(plugins: Path,
                                                        tmp_path: Path) -> None:
    refused = _cli(plugins, "run", "--method", "echo", "--rounds-of-silence", "1", cwd=tmp_path)
    assert refused.returncode == 2
    assert "--rounds-of-silence is an option of method 'echo', not a flag: give it as " \
           "--opt rounds_of_silence=VALUE" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_api_finds_the_plugin_and_reports_the_broken_one(plugins: Path,
                                                         breast_cancer_fed: Any) -> None:
    result = fl.run("echo", breast_cancer_fed, model="dt", rounds=2, seed=0,
                    options={"rounds_of_silence": 1})
    assert result.method == "echo" and result.final["mean_accuracy"] > 0.5
    assert type(registry.get_method("echo")).__module__ == "fedlabels_echo"
    with pytest.raises(FedLabelsError, match=r"'broken' \(package fedlabels_broken.*"
                                             r"ImportError: needs numpy 0\.1"):
        registry.get_method("broken")
    with pytest.raises(FedLabelsError, match="did you mean 'rounds_of_silence'"):
        fl.run("echo", breast_cancer_fed, options={"rounds_of_silenc": 1})


def test_a_plugin_option_given_as_a_keyword_says_where_it_goes(plugins: Path,
                                                              breast_cancer_fed: Any) -> None:
    # no plug-in looked up yet: the message must still know rounds_of_silence is echo's
    with pytest.raises(FedLabelsError, match=r"'rounds_of_silence' is a method option: put "
                                             r"it in options=\{'rounds_of_silence': \.\.\.\}"):
        fl.run("echo", breast_cancer_fed, rounds_of_silence=1)


def _sent_labels(fed: Any, **kw: Any) -> tuple[dict[int, np.ndarray], Any]:
    """Each client's echo labels of the last round it answered, as the server got them."""
    from fedlabels.engines.inprocess import simulate
    from fedlabels.learners import as_models

    sent: dict[int, np.ndarray] = {}

    class Observing:
        def __init__(self, inner: Any) -> None:
            self.inner = inner
            self.client_ids = inner.client_ids

        def exchange(self, messages: Any, rnd: int) -> dict[int, Message]:
            replies = self.inner.exchange(messages, rnd)
            for cid, reply in replies.items():
                if reply.kind == "echo.labels":
                    sent[cid] = unpack_labels(reply.arrays["labels"], len(fed.X_public),
                                              fed.n_classes)
            return replies

    result = simulate(registry.get_method("echo"), fed, as_models("dt"), rounds=3, period=5, seed=0,
                      progress=False, wrap_grid=Observing, **kw)
    return sent, result


def test_a_malicious_client_corrupts_what_the_plugin_declares(plugins: Path) -> None:
    """What an attack corrupts comes from the plug-in's own threat model (its hard labels
    on U), not from a list of methods elsewhere; unequal clients, three of five per round."""
    fed = digits_with_sizes((40, 90, 60, 120, 75), n_unlabeled=150, n_test=100)
    honest, _ = _sent_labels(fed, participation=3)
    attacked, result = _sent_labels(fed, participation=3, malicious=1, attack="flip")
    [bad] = result.extra["malicious"]["clients"]
    assert result.extra["malicious"]["sends"] == "labels y -> C-1-y"
    assert set(honest) == set(attacked) and bad in attacked  # the same seeded participants
    for cid in attacked:
        expected = fed.n_classes - 1 - honest[cid] if cid == bad else honest[cid]
        assert np.array_equal(attacked[cid], expected), cid


def test_check_method_passes_for_the_plugin_over_every_check(plugins: Path) -> None:
    """Over the Flower loopback grid too: its ClientApp resolves "echo" by name."""
    pytest.importorskip("flwr")
    assert check_method("echo", model="dt") == ["declarations", "options", "determinism",
                                                "payloads", "state", "flower"]


def _broken_copy(plugins: Path, name: str, reply: Any) -> Any:
    """A copy of echo named ``name`` whose client reply is ``reply(client, labels_message)``."""
    import fedlabels_echo as echo  # type: ignore[import-not-found]

    class Client(echo.EchoClient):
        def train(self, message: Message) -> Message:
            return reply(self, super().train(message))

    class Copy(echo.Echo):
        def make_client(self, cid: int, data: Any, learner: Any, ctx: Any,
                        X_public: Any, X_test: Any, y_test: Any) -> Any:
            return Client(cid, data, learner, ctx.settings, X_public, X_test, y_test)

    Copy.name = name
    return Copy()


def test_check_method_names_the_check_a_broken_copy_fails(plugins: Path) -> None:
    def undeclared(client: Any, labels: Message) -> Message:  # sends a value it hides
        return Message(labels.kind, arrays={**labels.arrays,
                                            "confidence": np.ones(3, np.float32)})

    with pytest.raises(ContractViolation, match=r"check 'payloads'.*echo\.labels: arrays "
                                                r"'confidence'") as err:
        check_method(_broken_copy(plugins, "echo-undeclared", undeclared), model="dt",
                     checks=["declarations", "options", "payloads"])
    assert err.value.check == "payloads" and isinstance(err.value, AssertionError)

    def forgetful(client: Any, labels: Message) -> Message:  # a counter it never declares
        client.calls = getattr(client, "calls", 0) + 1
        c = client.settings.n_classes
        y = unpack_labels(labels.arrays["labels"], len(client.public), c)
        from fedlabels.comm import pack_labels

        return Message(labels.kind, arrays={"labels": pack_labels((y + client.calls) % c, c)})

    with pytest.raises(ContractViolation, match=r"check 'state'.*answers 'echo\.train' "
                                                r"differently") as err:
        check_method(_broken_copy(plugins, "echo-forgetful", forgetful), model="dt")
    assert err.value.check == "state"
    assert "echo-forgetful" not in registry.METHODS  # check_method registers only meanwhile


@pytest.mark.parametrize("leak", ["private_rows", "private_labels", "rows_as_float64"])
def test_check_method_looks_inside_a_declared_payload(plugins: Path, leak: str) -> None:
    """A declared key is not enough: raw private rows under it, or the client's private
    labels sent as "hard labels on U", are caught (they passed on their names alone)."""
    from fedlabels.comm import pack_labels

    def leaky(client: Any, labels: Message) -> Message:
        X, y = client.data.X, client.data.y
        value = {"private_rows": np.asarray(X, np.float32),
                 "rows_as_float64": np.asarray(X, np.float64)[::-1].copy(),
                 "private_labels": pack_labels(y, client.settings.n_classes)}[leak]
        return Message(labels.kind, arrays={"labels": value})

    needle = "holds rows of client 0's private data" if leak != "private_labels" \
        else "declared as hard labels on U"
    with pytest.raises(ContractViolation, match=rf"check 'payloads'.*{needle}"):
        check_method(_broken_copy(plugins, f"echo-{leak}", leaky), model="dt",
                     checks=["declarations", "options", "payloads"])


def test_check_method_catches_a_server_that_forgets_across_a_resume(plugins: Path) -> None:
    """A server counter outside ``state_attrs`` passed every check, and a resumed run
    quietly diverged from the uninterrupted one; the state check now resumes a run."""
    import fedlabels_echo as echo  # type: ignore[import-not-found]

    class Server(echo.EchoServer):
        def run_round(self, rnd: int, grid: Any) -> dict[str, float]:
            self.calls = getattr(self, "calls", 0) + 1  # never declared: lost on resume
            return {**super().run_round(rnd, grid), "calls": float(self.calls)}

    class Forgetful(echo.Echo):
        def make_server(self, ctx: Any, n_public: int, learners: Any,
                        client_sizes: Any) -> Any:
            return Server(ctx.settings)

    Forgetful.name = "echo-server-forgets"
    with pytest.raises(ContractViolation, match=r"check 'state'.*interrupted after round 1 "
                                                r"and resumed .* from round 2 on"):
        check_method(Forgetful(), model="dt", checks=["declarations", "options", "state"])


def test_a_package_installed_into_a_folder_already_on_the_path_is_found(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The entry points are read once and kept, but installing a package into a folder on
    ``sys.path`` (a new ``.dist-info`` there) makes the next lookup read them again."""
    from fedlabels.methods.discovery import group_entry_points

    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    os.utime(root, ns=(1, 1))  # an old folder: the install below changes its time
    assert "late" not in {e.name for e in group_entry_points()}
    _dist(root, "fedlabels_late", "[fedlabels.methods]\nlate = fedlabels_late:Late\n")
    assert "late" in {e.name for e in group_entry_points()}
