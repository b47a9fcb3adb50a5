"""Extreme privacy and graph parameters found by a sweep of every `fedlabels run` flag with
bad values (2026-11-28): each used to end in a traceback (or a worker killed for memory);
each is now one line naming the option and its range, exit 2, before any training."""

from __future__ import annotations

import json

import pytest

from fedlabels.cli import main

BASE = ["run", "--dataset", "breast_cancer", "--clients", "3", "--rounds", "1",
        "--no-progress", "--no-checkpoint", "--workers", "1"]

REFUSED = [  # (arguments, what the line names) ; the crash each gave before
    (["--method", "dp-fedavg", "--epsilon", "1e200"], "epsilon must lie in (0, 1e+06]"),
    # scipy: "The function value at x=0.1 is NaN"
    (["--method", "dp-fedavg", "--noise-multiplier", "1e200"], "noise_multiplier must lie"),
    # OverflowError in RDP
    (["--method", "dp-pate", "--noise-sigma", "1e200"], "noise_sigma must lie"),  # Overflow
    (["--method", "fredy", "--epsilon-per-query", "1e308"], "epsilon_per_query must lie"),
    # dp_accounting: "eps must be > 0. Got inf"
    (["--method", "xclp", "--lsh-bits", "99999999999999999999"], "lsh_bits must lie in [1, 65536]"),
    # "Maximum allowed dimension exceeded" (1e8 bits: a 37 GiB projection)
    (["--method", "xclp", "--labeled-fraction", "0"], "labeled_fraction must lie in (0, 1]"),
    # a run, then "no labelled point among the participating clients"
    (["--method", "dp-fedct", "--epsilon", "1e6"], "per bit is above 700"),  # ZeroDivisionError
    (["--method", "dp-fedct", "--mechanism", "kary", "--epsilon", "1e6"],
     "per label is above 700"),  # OverflowError: math range error
    # counts that set a run's length: each ran until Ctrl-C (the method's flag or --opt)
    (["--rounds", str(10 ** 30)], "rounds must be an integer in [1, 1000000], got 1000000"),
    (["--period", "1000001"], "period must be an integer in [1, 1000000], got 1000001"),
    (["--model", "mlp(hidden=4)", "--warmup-steps", str(10 ** 30)],
     "fedct option warmup_steps must lie in [0, 1000000]"),
    (["--model", "mlp(hidden=4)", "--finetune-steps", "1000001"],
     "fedct option finetune_steps must lie in [0, 1000000]"),
    (["--method", "feddf", "--opt", f"server_steps={10 ** 30}"],
     "feddf option server_steps must lie in [1, 1000000]"),
    (["--method", "ds-fl", "--opt", f"distill_steps={10 ** 30}"], "distill_steps must lie in"),
    (["--method", "fedmd", "--opt", f"transfer_steps={10 ** 30}"], "transfer_steps must lie"),
    (["--method", "fedmd", "--opt", f"digest_steps={10 ** 30}"], "digest_steps must lie in"),
    (["--method", "pate", "--opt", f"teacher_steps={10 ** 30}"],
     "pate option teacher_steps must lie in [1, 1000000]"),
    (["--method", "dp-fedct", "--epsilon", "8", "--opt", "mechanism=subsample-aggregate",
      "--opt", f"teacher_steps={10 ** 30}"], "dp-fedct option teacher_steps must lie in"),
    (["--method", "dp-fedct", "--epsilon", "8", "--opt", "mechanism=dpsgd", "--opt",
      "site_model=private", "--opt", f"finetune_steps={10 ** 30}"], "finetune_steps must lie"),
    (["--method", "dp-fedct", "--epsilon", "8", "--opt", "sensitivity=empirical", "--opt",
      f"sensitivity_steps={10 ** 30}"], "sensitivity_steps must lie in [1, 1000000]"),
    (["--method", "fredy", "--epsilon", "8", "--queries", "20", "--opt",
      f"teacher_rounds={10 ** 30}"], "fredy option teacher_rounds must lie in [1, 1000000]"),
    # OverflowError in subsample_aggregate.record_parts (walkY)
    (["--method", "dp-fedct", "--epsilon", "8", "--opt", "mechanism=subsample-aggregate",
      "--opt", f"teachers={10 ** 30}"], "dp-fedct option teachers must lie in [2, 1000000]"),
    # ran, and the result's privacy statement named 10**30 records per client (walkY)
    (["--method", "dp-fedct", "--epsilon", "100", "--opt", "mechanism=kary", "--opt",
      "sensitivity=empirical", "--opt", f"sensitivity_neighbours={10 ** 30}"],
     "dp-fedct option sensitivity_neighbours must lie in [1, 100000]"),
]


@pytest.mark.parametrize(("args", "names"), REFUSED,
                         ids=[" ".join(a[1:]) for a, _ in REFUSED])
def test_extreme_value_is_one_line_exit_2(args: list[str], names: str, tmp_path,
                                          capsys) -> None:
    out = tmp_path / "run.json"
    assert main([*BASE, *args, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fedlabels: error: ") and names in err[0], err
    assert not out.exists()


def test_dpsgd_at_a_huge_epsilon_runs_without_pld_blowing_up(tmp_path) -> None:
    """dp-fedct with DP-SGD at ε = 100,000 had its worker killed for memory (PLD's grid at
    σ = 0.001); it now runs and reports RDP's ε, within the target."""
    out = tmp_path / "run.json"
    assert main([*BASE, "--method", "dp-fedct", "--mechanism", "dpsgd", "--model",
                 "mlp(hidden=8)", "--period", "5", "--epsilon", "1e5", "-o", str(out)]) == 0
    privacy = json.loads(out.read_text())["privacy"]
    assert privacy["accountant"] == "rdp" and 0 < privacy["epsilon"] <= 1e5
    assert "pld" not in privacy["epsilon_by_accountant"]


@pytest.mark.parametrize(("args", "names"), [
    (["--audit-refs", "0"], "--audit-refs 0: the attacker trains 1 to 256"),  # after the run
    (["--audit-refs", "99999999999"], "1 to 256 reference models"),  # 1.82 TiB array
    (["--audit-aug", "99999999999"], "1 to 256 perturbed copies"),  # 1.07 PiB array
    (["--audit-views", "-1"], "--audit-views -1"),  # was taken as 0 (every round)
])
def test_audit_counts_are_checked_before_the_run(args: list[str], names: str, tmp_path,
                                                 capsys, monkeypatch) -> None:
    import fedlabels.audit.core as core

    def no_run(*a: object, **k: object) -> None:
        raise AssertionError("the federated run started")

    monkeypatch.setattr(core, "simulate", no_run)
    out = tmp_path / "audit.json"
    assert main(["audit", "--dataset", "breast_cancer", "--clients", "3", "--rounds", "1",
                 "--no-progress", *args, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and names in err[0], err


@pytest.mark.parametrize(("argv", "names"), [
    (["deploy", "certs", "--host", ""], "--host '' is neither an IP address"),  # x509 error
    (["deploy", "certs", "--host", "a b"], "--host 'a b'"),  # was written into the SAN
    (["deploy", "certs", "--host", "localhost", "--days", "3000000"],
     "1 to 36500 days"),  # OverflowError: date value out of range
    (["deploy", "local", "--reply-timeout", "0"], "--reply-timeout: give a number of seconds"),
    # started Flower, then "no reply within 0 s"
    (["deploy", "local", "--node-timeout", "-1"], "--node-timeout"),  # ran with -1
    (["deploy", "local", "--timeout", "nan"], "--timeout"),  # ran without a timeout
    (["deploy", "prepare", "--reply-timeout", "-5"], "--reply-timeout"),  # written to the app
    (["deploy", "local", "--timeout", "1e308"], "--timeout: give a number of seconds in "
     "(0, 604800]"),  # started Flower, then "timestamp out of range for platform time_t"
    (["deploy", "local", "--reply-timeout", "604801"], "--reply-timeout: give a number of "
     "seconds in (0, 604800] (at most one week), got '604801'"),
    (["deploy", "local", "--node-timeout", "1e308"], "--node-timeout: give a number"),
    (["deploy", "prepare", "--reply-timeout", "1e308"], "--reply-timeout: give a number of "
     "seconds in (0, 604800]"),  # written to the app
    (["deploy", "prepare", "--node-timeout", "1e300"], "--node-timeout: give a number"),
    (["inspect", "missing.json", "--top", "-1"], "--top must be >= 0"),  # printed as if 0
    (["bound", "sensitivity", "--unlabeled", "0", "--stability-rate", "0.1"],
     "|U| must be >= 1"),  # printed "0 of |U|=0 labels"
])
def test_other_commands_refuse_in_one_line(argv: list[str], names: str, tmp_path,
                                           capsys) -> None:
    if argv[:2] == ["deploy", "certs"]:
        pytest.importorskip("cryptography")
        argv = [*argv, "--out-dir", str(tmp_path / "certs")]
    elif argv[:2] == ["deploy", "prepare"]:
        argv = [*argv, "--out-dir", str(tmp_path / "app")]
    elif argv[:2] == ["deploy", "local"]:
        argv = [*argv, "-o", str(tmp_path / "run.json")]
    assert _exit_code(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and names in err[0], err
    assert not list(tmp_path.iterdir())  # nothing written


def _exit_code(argv: list[str]) -> object:
    """``main``'s return value, or the code of the SystemExit argparse raises."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def test_a_long_host_name_gets_a_certificate(tmp_path) -> None:
    """A host name over 64 characters is valid (SAN), but a common name holds 64: it used to
    fail with x509's ValueError."""
    pytest.importorskip("cryptography")
    from cryptography import x509

    host = f"{'a' * 60}.{'b' * 60}.example.com"
    assert main(["deploy", "certs", "--host", host, "--out-dir", str(tmp_path)]) == 0
    cert = x509.load_pem_x509_certificate((tmp_path / "server.crt").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert host in names.get_values_for_type(x509.DNSName)


@pytest.mark.parametrize(("argv", "names"), [
    (["run", "--dataset", "wine", "--clients", "3", "--rounds", "1", "--opt", "quorum=0.5",
      "--opt", "quorum=0.6"], "--opt quorum is given twice (0.5 and 0.6)"),  # ran with 0.6
    (["run", "--dataset", "wine", "--clients", "3", "--rounds", "1", "--opt", "quorum=0.5",
      "--quorum", "0.6"], "--opt quorum=0.5 and --quorum 0.6"),  # ran with 0.6
    (["run", "--dataset", "wine", "--clients", "3", "--rounds", "1", "-o", ""],
     "output is empty"),  # wrote under results/
    (["predict", "missing.json", "new.csv", "-o", "PRED", "--sep", ""],
     "sep must be one character"),  # read with ','
])
def test_contradicting_or_empty_values_are_refused(argv: list[str], names: str, tmp_path,
                                                   capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    argv = [str(tmp_path / "p.csv") if a == "PRED" else a for a in argv]
    assert _exit_code(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and names in err[0], err
    assert not list(tmp_path.iterdir())  # nothing written (results/ included)


def test_a_week_is_the_longest_deploy_timeout() -> None:
    from fedlabels.cli import build_parser

    args = build_parser().parse_args(["deploy", "local", "--timeout", "604800",
                                      "--reply-timeout", "604800", "--node-timeout", "0.5"])
    assert (args.timeout, args.reply_timeout, args.node_timeout) == (604800, 604800, 0.5)


def test_resume_refuses_rounds_beyond_the_bound(tmp_path, capsys) -> None:
    """`resume --rounds N` extends a run to N rounds: the same bound as `run --rounds`."""
    out = tmp_path / "run.json"
    assert main(["run", "--dataset", "wine", "--clients", "3", "--rounds", "1", "--model",
                 "dt", "--no-progress", "--workers", "1", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["resume", str(out), "--rounds", str(10 ** 30), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rounds must be an integer in [1, 1000000]" in err[0], err
