"""The commands and snippets in README.md and docs/*.md stay true to the code.

Without running anything heavy: every ```python block compiles and names no private
``fedlabels`` attribute; every ``fedlabels ...`` command line in a shell block is accepted
by the CLI's parser and (run, audit, deploy) by the checks ``fedlabels`` makes before
loading data (method, flags the method takes, ``--opt`` keys and values); every
``fedlabels ...`` mention in the prose (also one wrapped over lines) names an existing
subcommand and only its flags, and one that is a whole run, audit or deploy command passes
the same checks as a shell line; an error shown after ``$ fedlabels ...`` is the error the
CLI gives; every ``benchmarks/X.py`` command, in a shell block or the prose, uses only flags
that X.py declares; every relative link reaches an existing file and heading; and every
subcommand and user-facing flag of ``fedlabels`` is named in the docs.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import functools
import io
import re
import shlex
import sys
from pathlib import Path

import pytest

from fedlabels.cli import _leaf_parsers, build_parser
from fedlabels.cli.method_flags import method_flags
from fedlabels.cli.run_options import config_from_args
from fedlabels.core.errors import FedLabelsError

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = {"bash", "console", "sh", "shell", ""}  # "" : unlabelled blocks hold commands too
PLACEHOLDER = re.compile(r"^(\.\.\.|[A-Z][A-Z_]*(\.json)?|[A-Z]\d?|\[.*)$")  # ..., N, X.json
#: A command line whose config check needs what only the reader has: a model directory (the
#: parse and flag checks still apply). ``module:mynets:`` gets the docs' own ``make_net``.
NEEDS_USER_FILES = ("hf(model_dir=/models/",)
#: Programs other than fedlabels whose flags the docs quote (not checkable here).
EXTERNAL_FLAGS = {
    "--address", "--head", "--num-cpus",  # ray start (docs/engines.md)
    "--dist", "--durations",              # pytest (pytest-xdist)
    "--index-url",                        # pip (docs/neural.md: torch for CUDA)
    "--rm",                               # docker compose run
    "--trusted-entities",                 # flower-supernode (why fedlabels does not use it)
}


def _blocks(path: Path) -> list[tuple[str, int, list[str]]]:
    """(language, line of the opening fence, lines) of each fenced block."""
    out, lang, start, lines = [], None, 0, []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        opening = re.match(r"^\s*```(\S*)", line)
        if lang is None and opening:
            lang, start, lines = opening.group(1), i, []
        elif lang is not None and re.match(r"^\s*```\s*$", line):
            out.append((lang, start, lines))
            lang = None
        elif lang is not None:
            lines.append(line)
    return out


def _shell_lines(path: Path) -> list[tuple[int, str, str]]:
    """(line number, logical line with continuations joined, the line after it) of shell
    blocks; ``B="..."`` / ``COMMON='...'`` variables expanded."""
    out = []
    for lang, start, lines in _blocks(path):
        if lang not in SHELL:
            continue
        logical: list[tuple[int, str]] = []
        cur, first = "", 0
        for j, line in enumerate(lines):
            if not cur:
                first = start + 1 + j
            if line.rstrip().endswith("\\"):
                cur += line.rstrip()[:-1] + " "
                continue
            if re.match(r"^\s*\w+='[^']*$", cur + line):  # COMMON='... over several lines
                cur += line + " "
                continue
            logical.append((first, cur + line))
            cur = ""
        vars_: dict[str, str] = {}
        for k, (n, text) in enumerate(logical):
            assign = re.match(r"^\s*(\w+)=([\"'])(.*)\2\s*$", text, re.DOTALL)
            if assign:
                vars_[assign.group(1)] = assign.group(3).replace("\n", " ")
                continue
            for name, value in vars_.items():
                text = text.replace(f"${name}", value)
            nxt = logical[k + 1][1] if k + 1 < len(logical) else ""
            out.append((n, text.strip(), nxt.strip()))
    return out


def _fedlabels_commands() -> list[tuple[str, str, str]]:
    """(where, command, following line) of each ``fedlabels`` command in a shell block."""
    out = []
    for path in DOCS:
        for n, text, nxt in _shell_lines(path):
            text = text.removeprefix("$ ")
            text = re.sub(r"^(?:[A-Z_]+=\S*\s+)+", "", text)  # PYTHONPATH=. fedlabels ...
            text = re.sub(r"^for .*?; do\s+(?:for .*?; do\s+)*", "", text)  # the loop's body
            if text.startswith("fedlabels ") or text == "fedlabels":
                out.append((f"{path.relative_to(ROOT)}:{n}", text, nxt))
    return out


def _argv(command: str) -> list[str]:
    """The arguments after ``fedlabels``: shell comments, redirections and ``...`` dropped,
    loop variables given a value."""
    for var, value in (("$model", "dt"), ("$m", "fedct"), ("$s", "0")):
        command = command.replace(f'"{var}"', value).replace(var, value)
    argv = []
    for token in shlex.split(command, comments=True)[1:]:
        if token in (">", "2>", "|", "&&", ";", "&", "2>&1") or token.startswith(">"):
            break
        if token != "...":
            argv.append(token)
    return argv


@functools.cache
def _parser() -> argparse.ArgumentParser:
    return build_parser()


def _parse(argv: list[str]) -> tuple[argparse.Namespace | None, str]:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return _parser().parse_args(argv), ""
    except SystemExit as exc:
        return None, err.getvalue().strip() if exc.code else ""


COMMANDS = _fedlabels_commands()


def test_the_docs_have_commands_to_check():
    assert len(COMMANDS) > 50  # the extraction still finds the docs' command lines


def _write_mynets(folder: Path) -> None:
    """``mynets.py`` as docs/neural.md tells the reader to write it: its ``make_net`` block
    up to the federation it then loads."""
    block = next("\n".join(lines) for lang, _, lines in _blocks(ROOT / "docs" / "neural.md")
                 if lang == "python" and any("def make_net" in x for x in lines))
    (folder / "mynets.py").write_text(block.split("\nfed = ")[0], encoding="utf-8")


def _refusal(command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """What ``fedlabels`` says against ``command`` before loading data: "" when it accepts
    it, the error line otherwise, None when it only prints (``--version``, ``-h``)."""
    if "module:mynets:" in command:
        _write_mynets(tmp_path)
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.delitem(sys.modules, "mynets", raising=False)  # this test's file
    ns, error = _parse(_argv(command))
    if ns is None and not error:  # --version, -h
        return None
    if ns is not None and getattr(ns, "command", None) in ("run", "audit", "deploy") \
            and hasattr(ns, "opt") and not getattr(ns, "config", None) \
            and not any(s in command for s in NEEDS_USER_FILES):
        try:
            config_from_args(ns, simulator=ns.command == "run")
        except FedLabelsError as exc:
            error = f"fedlabels: error: {exc}"
    return error


@pytest.mark.parametrize("where,command,after", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_documented_command_is_accepted(where, command, after, tmp_path, monkeypatch):
    expected_error = after.startswith("fedlabels: error:") and command.startswith("fedlabels")
    error = _refusal(command, tmp_path, monkeypatch)
    if error is None:
        return
    if expected_error:  # a transcript: the docs show the error the CLI gives
        assert error == after, f"{where}: `{command}` now says\n{error}\nthe docs show\n{after}"
    else:
        assert not error, f"{where}: `{command}` is refused: {error}"


def _parser_of(words: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The (sub)command parser that ``words`` select and the words after them."""
    parser = _parser()
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        rest = [w for w in words if not w.startswith("-")]
        if not subs or not rest or rest[0] not in subs[0].choices:
            return parser, words
        words = words[words.index(rest[0]) + 1:]
        parser = subs[0].choices[rest[0]]


def _lines(path: Path) -> list[tuple[int, str, bool]]:
    """Each line of ``path`` with its number and whether it lies in a fenced code block (an
    opening fence counts as inside, a closing one as outside)."""
    out, inside = [], False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            inside = not inside
        out.append((n, line, inside))
    return out


def _code_spans(pattern: str) -> list[tuple[str, str]]:
    """(where, text) of each code span of the prose that ``pattern`` (its group 1: the text)
    matches, also one that a paragraph wraps over several lines (the prose gives most
    figures' commands that way); its whitespace joined to single spaces."""
    out = []
    for path in DOCS:
        prose = [(n, "" if inside or line.lstrip().startswith("```") else line)
                 for n, line, inside in _lines(path)]
        text = "\n".join(line for _, line in prose)
        starts = [0]
        for _, line in prose:
            starts.append(starts[-1] + len(line) + 1)
        for m in re.finditer(pattern, text):
            if "\n\n" not in m.group(1):  # a code span ends with its paragraph
                n = prose[bisect.bisect_right(starts, m.start()) - 1][0]
                out.append((f"{path.relative_to(ROOT)}:{n}", " ".join(m.group(1).split())))
    return out


def _inline_mentions() -> list[tuple[str, str]]:
    """(where, mention) of each ``fedlabels ...`` code span in the prose."""
    return _code_spans(r"`(fedlabels(?: [^`]*)?)`")


INLINE = _inline_mentions()
#: Prose mentions that are whole commands: a run, audit or deploy with its data set, no
#: ``...`` and no placeholder (``N``, ``X.json``); these get the checks a shell line gets.
WHOLE = [(w, m) for w, m in INLINE
         if re.match(r"fedlabels (?:--threads \d+ |-q )?(?:run|audit|deploy local) ", m)
         and "--dataset" in m and "..." not in m
         and not any(PLACEHOLDER.match(t) for t in m.replace("=", " ").split())]


def test_the_prose_has_whole_commands_to_check():
    assert len(WHOLE) > 12  # the extraction still finds them (wrapped ones too)


@pytest.mark.parametrize("where,command", WHOLE, ids=[w for w, _ in WHOLE])
def test_whole_command_in_the_prose_is_accepted(where, command, tmp_path, monkeypatch):
    """A command quoted in a paragraph, often the one a figure beside it was measured with,
    parses and passes the checks made before loading data (a misspelt flag, option key or
    value fails here, as it would for the reader who copies it)."""
    error = _refusal(command, tmp_path, monkeypatch)
    assert not error, f"{where}: `{command}` is refused: {error}"


@pytest.mark.parametrize("where,mention", INLINE, ids=[w for w, _ in INLINE])
def test_inline_mention_names_a_subcommand_and_its_flags(where, mention):
    """Prose mentions are often partial (``fedlabels resume X.json [--rounds N]``,
    ``fedlabels bound convergence|sensitivity``): each alternative must be a subcommand and
    each flag one of the selected subcommand's."""
    words = mention.replace("[", " ").replace("]", " ").split()[1:]
    for alternative in (words[:1] and words[1].split("|") if len(words) > 1 else [None]):
        chosen = words if alternative is None else [words[0], alternative, *words[2:]]
        parser, rest = _parser_of(chosen)
        known = {s for p in (parser, *_leaf_parsers(parser)) for a in p._actions
                 for s in a.option_strings} | {"--version", "--threads", "-q", "-v"}
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        plain = [w for w in rest if not w.startswith("-") and not PLACEHOLDER.match(w)]
        if subs and plain and plain[0] == rest[0]:
            pytest.fail(f"{where}: `{mention}`: no subcommand {plain[0]!r} "
                        f"(there are {', '.join(subs[0].choices)})")
        flags = [w.split("=")[0] for w in rest if w.startswith("-") and w != "-"]
        unknown = [f for f in flags if f not in known]
        assert not unknown, f"{where}: `{mention}`: {parser.prog} has no {', '.join(unknown)}"


def test_python_snippets_compile_and_use_public_names():
    """Each block compiles, names no private attribute, and a block that uses ``fl.`` has
    ``import fedlabels as fl`` (in it or an earlier block of its page: a reader copies from
    the top; a snippet of docs/models.md used ``fl`` on a page that never imported it)."""
    count = 0
    for path in DOCS:
        imported = False
        for lang, start, lines in _blocks(path):
            if lang not in ("python", "py"):
                continue
            count += 1
            code = "\n".join(lines)
            where = f"{path.relative_to(ROOT)}:{start}"
            compile(code, where, "exec")  # a SyntaxError names the block
            private = re.findall(r"\bfl\.(_\w+)|from fedlabels[\w.]* import .*\b(_\w+)", code)
            assert not private, f"{where}: private names {private}"
            imported = imported or "import fedlabels as fl" in code
            assert imported or not re.search(r"\bfl\.", code), f"{where}: `fl` is not imported"
    assert count >= 10


def _benchmark_lines() -> list[tuple[str, str, str]]:
    """(where, script, its arguments) of each ``benchmarks/X.py`` command line, in a shell
    block or a code span of the prose."""
    lines = [(f"{path.relative_to(ROOT)}:{n}", line)
             for path in DOCS for n, line, _ in _shell_lines(path)]
    lines += _code_spans(r"`([^`]*benchmarks/\w+\.py[^`]*)`")
    return [(where, m.group(1), m.group(2)) for where, line in lines
            for m in re.finditer(r"(benchmarks/\w+\.py)([^|;&#]*)", line)]


BENCH = _benchmark_lines()


@pytest.mark.parametrize("where,script,args", BENCH, ids=[b[0] for b in BENCH])
def test_benchmark_command_uses_declared_flags(where, script, args):
    source = (ROOT / script).read_text(encoding="utf-8")
    declared = set(re.findall(r"""["'](--[a-z][a-z0-9-]*)["']""", source)) | {"--help"}
    try:
        tokens = shlex.split(args, comments=True)
    except ValueError:  # an unbalanced quote inside a quoted variable value
        tokens = args.split()
    flags = [t.split("=")[0] for t in tokens if t.startswith("--")]
    unknown = [f for f in flags if f not in declared]
    assert not unknown, f"{where}: {script} declares no {', '.join(unknown)}"


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but - and _ dropped."""
    return re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower()).replace(" ", "-")


@functools.cache
def _anchors(path: Path) -> set[str]:
    out: set[str] = set()
    for _, line, inside in _lines(path):
        heading = None if inside else re.match(r"^#+\s+(.*?)\s*$", line)
        if heading:
            base, k = _slug(heading.group(1)), 1
            name = base
            while name in out:
                name, k = f"{base}-{k}", k + 1
            out.add(name)
        out |= set(re.findall(r'<a (?:name|id)="([^"]+)"', line))
    return out


def test_relative_links_reach_files_and_headings():
    broken = []
    for path in DOCS:
        for n, line, inside in _lines(path):
            if inside:
                continue
            for target in re.findall(r"\]\(([^)\s]+)\)", line):
                if re.match(r"[a-z]+:", target):
                    continue
                file, _, anchor = target.partition("#")
                dest = (path.parent / file).resolve() if file else path
                where = f"{path.relative_to(ROOT)}:{n} ({target})"
                if not dest.exists():
                    broken.append(f"{where}: no such file")
                elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                    broken.append(f"{where}: no such heading")
    assert not broken, "\n".join(broken)


#: a table's second line: ``|---|:---:|``
TABLE_DELIMITER = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?$")


def _table_row(line: str) -> bool:
    """Whether ``line`` is a table's row (``| a | b |``; ``|U| = 20`` wrapped in prose is
    not: it does not end with a bar)."""
    text = line.strip()
    return len(text) > 1 and text.startswith("|") and text.endswith("|")


def test_every_table_is_whole():
    """docs/xclp.md's methods table had a paragraph between its rows, and docs/engines.md's
    engines table a blank line: the rows after it rendered as a line of text with bars. Each
    table starts after a blank line (or a comment) with a header and its delimiter row."""
    broken = []
    for path in DOCS:
        lines = _lines(path)
        for k, (n, line, inside) in enumerate(lines):
            if inside or not _table_row(line) or (k and _table_row(lines[k - 1][1])):
                continue
            before = lines[k - 1][1].strip() if k else ""
            follows = lines[k + 1][1].strip() if k + 1 < len(lines) else ""
            if before and not before.startswith("<!--"):
                broken.append(f"{path.relative_to(ROOT)}:{n}: a table row after prose")
            elif not TABLE_DELIMITER.match(follows):
                broken.append(f"{path.relative_to(ROOT)}:{n}: a table without its delimiter "
                              "row (|---|) below the header, or split by a blank line")
    assert not broken, "\n".join(broken)


def _doc_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in DOCS)


def test_every_flag_in_the_docs_exists():
    """A ``--flag`` anywhere in the docs is one of fedlabels' flags, one that a script or
    module of this repository declares (benchmarks, ``python -m fedlabels.deploy...``, the
    Flower commands fedlabels builds), or one of :data:`EXTERNAL_FLAGS`."""
    parser = _parser()
    known = {s for p in (parser, *_leaf_parsers(parser)) for a in p._actions
             for s in a.option_strings} | EXTERNAL_FLAGS
    for f in [*ROOT.glob("benchmarks/*.py"), *ROOT.glob("benchmarks/*.sh"),
              *ROOT.glob("scripts/*"), *ROOT.glob("src/fedlabels/**/*.py")]:
        if f.is_file():
            known |= set(re.findall(r"""["'](--[a-z][a-z0-9-]*)["']""",
                                    f.read_text(encoding="utf-8")))
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", _doc_text()))
    assert not named - known, f"the docs name flags nothing declares: {sorted(named - known)}"


def test_every_subcommand_and_flag_is_documented():
    """Each subcommand is shown as ``fedlabels NAME`` and each user-facing flag (not -h, not
    a hidden former flag) appears in the docs; a method's generated flag counts as
    documented where its option name (``warmup_steps``) is."""
    text = _doc_text()
    parser = _parser()
    missing = []
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in subs.choices.items():
        if f"fedlabels {name}" not in text and f"fedlabels -q {name}" not in text:
            missing.append(f"fedlabels {name}")
        nested = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
        missing += [f"fedlabels {name} {n}" for n in (nested[0].choices if nested else ())
                    if f"{name} {n}" not in text]
    generated = {spec.flag: spec.name for spec in method_flags().values()}
    for p in (parser, *_leaf_parsers(parser)):
        for action in p._actions:
            if not action.option_strings or action.help == argparse.SUPPRESS or isinstance(
                    action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            if not any(re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text) or (
                    flag in generated and re.search(rf"\b{generated[flag]}\b", text))
                       for flag in action.option_strings):  # -q documents -q/--quiet
                missing.append(f"{p.prog} {'/'.join(action.option_strings)}")
    assert not missing, f"not documented: {sorted(set(missing))}"


def test_every_flag_says_what_it_does():
    """``fedlabels X -h`` explains each user-facing flag (``demo --output-dir`` had none)."""
    parser = _parser()
    silent = [f"{p.prog} {'/'.join(a.option_strings)}"
              for p in (parser, *_leaf_parsers(parser)) for a in p._actions
              if a.option_strings and a.help is None]
    assert not silent, f"flags without help: {silent}"


def _node_configs() -> list[tuple[str, str]]:
    """(where, text) of each SuperNode ``--node-config`` example (one naming
    ``partition-id``) in the docs and the Compose files: from the flag to the end of its
    code span, the shell's ``&``, the blank line or the Compose service's next key."""
    found = []
    for path in [*DOCS, *sorted((ROOT / "deploy" / "compose").glob("*.yml"))]:
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"--node-config", text):
            window = re.split(r"`|\n\s*\n|\n\s*volumes:|['\"]\s*&",
                              text[m.end():], maxsplit=1)[0]
            if "partition-id=" in window:
                line = text.count("\n", 0, m.start()) + 1
                found.append((f"{path.relative_to(ROOT)}:{line}", window))
    return found


def test_every_site_set_up_names_a_plan_or_the_opt_in():
    """A site without ``privacy-plan`` refuses every run unless ``trust-coordinator=true``:
    a ``--node-config`` example with neither shows a site that takes part in nothing."""
    configs = _node_configs()
    assert len(configs) >= 3, configs  # deployment.md's two, site.yml's
    bare = [where for where, text in configs
            if "privacy-plan=" not in text and "trust-coordinator=true" not in text]
    assert not bare, bare


def test_help_that_names_the_checkpoint_file_names_its_journal():
    """A checkpoint is ``X.checkpoint.npz`` and its journal ``X.checkpoint.journal``: one
    copied, moved or deleted without the other cannot be resumed, so help text that names
    the one names the other (``resume -h`` and ``run --no-checkpoint`` named the .npz
    alone)."""
    parser = _parser()
    texts = []
    for p in (parser, *_leaf_parsers(parser)):
        texts += [(p.prog, p.description), (p.prog, p.epilog)]
        for a in p._actions:
            texts.append((f"{p.prog} {'/'.join(a.option_strings)}", a.help))
            if isinstance(a, argparse._SubParsersAction):
                texts += [(f"{p.prog} {c.dest}", c.help) for c in a._choices_actions]
    alone = [where for where, text in texts
             if text and "checkpoint.npz" in text and "checkpoint.journal" not in text]
    assert not alone, alone
