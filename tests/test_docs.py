"""Every example in the documentation runs, and shows what it really prints.

Collected automatically: every `docs/**/*.md` page (pages added later are covered with no
edit here) and README.md. Conventions (docs/development.md explains them to authors):

- ```` ```console ```` blocks: a line starting with `$ ` is a command (a trailing `\\`
  continues it on the next line); the lines after it, up to the next `$ ` or the end of
  the block, are its expected output (stdout and stderr as a terminal shows them). A line
  `...` alone stands for any number of lines, and `...` inside a line for any text. A
  command must exit 0, unless its output ends with a line `[exit N]` giving its status.
- ```` ```python ```` blocks run in order in one namespace per page (top-level `await`
  works). `expr  # -> REPR` checks the value's repr (also as a comment line of its own
  right after the statement); a ```` ```text ```` block right after a python block is
  what the block prints. `...` is a wildcard in both.
- A fenced block with `title="NAME"` (any language) is written to the file NAME in the
  page's working directory before the blocks after it run, so a page can show the file a
  command reads.
- `<!-- docs-test: skip (the reason) -->` on the line before a block skips it (it needs a
  real model, a key, npm, a server ...); the reason is required.

Each page runs in a fresh temporary directory, with a private rule cache and home.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import functools
import io
import itertools
import os
import re
import subprocess
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import toolrules

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
PAGES = sorted(DOCS.rglob("*.md")) + [REPO / "README.md"]
SKIP = re.compile(r"^<!--\s*docs-test:\s*skip\s*(?:\((?P<reason>[^)]*)\))?\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})\s*(?P<info>.*)$")
TITLE = re.compile(r'title="(?P<name>[^"]+)"')
EXIT = re.compile(r"^\[exit (\d+)\]$")
COMMAND_TIMEOUT = 300


@dataclass
class Block:
    lang: str
    info: str
    text: str
    line: int                      # 1-based line of the opening fence
    skip: str | None = None        # the reason, when skipped
    output: Block | None = None    # a ```text block right after a python block
    used_as_output: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def parse_blocks(markdown: str) -> list[Block]:
    """The fenced blocks of a page, in order, with their skip markers."""
    lines = markdown.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = len(m["indent"]), m["fence"], m["info"].strip()
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            close = lines[j].strip()
            if close.startswith(fence[0] * len(fence)) and set(close) == {fence[0]}:
                break
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        prev = i - 1
        while prev >= 0 and not lines[prev].strip():
            prev -= 1
        skip = None
        if prev >= 0:
            s = SKIP.match(lines[prev].strip())
            if s:
                skip = (s["reason"] or "").strip()
                if not skip:
                    raise AssertionError(f"line {prev + 1}: a docs-test skip needs a reason: "
                                         "<!-- docs-test: skip (why) -->")
        lang = info.split()[0].lstrip(".{") if info else ""
        blocks.append(Block(lang, info, "\n".join(body), i + 1, skip))
        i = j + 1
    for a, b in itertools.pairwise(blocks):
        if a.lang == "python" and b.lang == "text" and "title=" not in b.info:
            a.output, b.used_as_output = b, True
    return blocks


# ---------------------------------------------------------------- matching with `...`

def _line_pattern(expected: str) -> re.Pattern[str]:
    return re.compile(".*?".join(re.escape(part) for part in expected.split("...")), re.S)


def lines_match(expected: list[str], actual: list[str]) -> bool:
    """`...` alone on a line matches any lines (none too); inside a line, any text."""
    exp = [e.rstrip() for e in expected]
    act = [a.rstrip() for a in actual]

    @functools.cache
    def go(i: int, j: int) -> bool:
        if i == len(exp):
            return j == len(act)
        if exp[i].strip() == "...":
            return any(go(i + 1, k) for k in range(j, len(act) + 1))
        return j < len(act) and _line_pattern(exp[i]).fullmatch(act[j]) is not None \
            and go(i + 1, j + 1)

    return go(0, 0)


def _trim(lines: list[str]) -> list[str]:
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    while lines and not lines[0].strip():
        lines = lines[1:]
    return lines


# ---------------------------------------------------------------- console blocks

def console_commands(text: str) -> list[tuple[str, list[str], int]]:
    """(command, expected output lines, expected exit status) for each `$ ` command."""
    out: list[tuple[str, list[str], int]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("$ "):
            if line.strip():
                raise AssertionError(f"console block: output before any `$ ` command: {line!r}")
            i += 1
            continue
        cmd = line[2:]
        while cmd.endswith("\\") and i + 1 < len(lines):
            i += 1
            cmd = cmd + "\n" + lines[i]  # bash reads backslash-newline as one line
        expected: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].startswith("$ "):
            expected.append(lines[i])
            i += 1
        expected = _trim(expected)
        status = 0
        if expected and EXIT.match(expected[-1].strip()):
            status = int(EXIT.match(expected[-1].strip())[1])  # type: ignore[index]
            expected = _trim(expected[:-1])
        out.append((cmd, expected, status))
    return out


def _environment(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TOOLRULES_", "OPENAI_", "ANTHROPIC_", "GEMINI_"))}
    bindir = str(Path(sys.executable).parent)
    env.update(PATH=bindir + os.pathsep + env.get("PATH", ""), HOME=str(work / ".home"),
               XDG_CACHE_HOME=str(work / ".cache"), TOOLRULES_CACHE_DIR=str(work / ".rules-cache"),
               NO_COLOR="1", TERM="dumb", COLUMNS="100", PYTHONIOENCODING="utf-8",
               PYTHONUNBUFFERED="1",
               TOOLRULES_CACHE="1")
    return env


def run_console(block: Block, work: Path, where: str) -> None:
    for cmd, expected, status in console_commands(block.text):
        proc = subprocess.run(["bash", "-c", cmd], cwd=work, env=_environment(work),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=COMMAND_TIMEOUT, stdin=subprocess.DEVNULL)
        actual = _trim(proc.stdout.splitlines())
        if proc.returncode != status:
            raise AssertionError(f"{where}: `{cmd}` exited {proc.returncode}, expected {status}"
                                 f"\n--- output:\n{proc.stdout}")
        if not lines_match(expected, actual):
            raise AssertionError(f"{where}: `{cmd}` printed something else\n--- expected:\n"
                                 + "\n".join(expected) + "\n--- actual:\n" + "\n".join(actual))


# ---------------------------------------------------------------- python blocks

def _arrow_comments(source: str) -> dict[int, str]:
    """line -> the text after `# ->` in a comment on that line."""
    out: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and tok.string.startswith("# ->"):
            out[tok.start[0]] = tok.string[4:].strip()
    return out


def _expectations(tree: ast.Module, source: str) -> dict[int, str]:
    """statement index -> expected repr, from `# ->` comments on its last line or on the
    comment lines right after it."""
    arrows = _arrow_comments(source)
    lines = source.splitlines()
    out: dict[int, str] = {}
    used: set[int] = set()
    for k, stmt in enumerate(tree.body):
        end = stmt.end_lineno or stmt.lineno
        parts = []
        if end in arrows:
            parts.append(arrows[end])
            used.add(end)
        n = end + 1
        while n in arrows and lines[n - 1].lstrip().startswith("#"):
            parts.append(arrows[n])
            used.add(n)
            n += 1
        if parts:
            if not isinstance(stmt, ast.Expr):
                raise AssertionError(f"line {stmt.lineno}: `# ->` follows a statement that "
                                     "has no value (write the expression on its own line)")
            out[k] = "\n".join(parts)
    stray = sorted(set(arrows) - used)
    if stray:
        raise AssertionError(f"`# ->` on line(s) {stray} is not after a top-level expression")
    return out


def run_python(block: Block, namespace: dict[str, Any], where: str) -> None:
    source = block.text
    tree = ast.parse(source)
    expected = _expectations(tree, source)
    printed = io.StringIO()
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    with contextlib.redirect_stdout(printed):
        for k, stmt in enumerate(tree.body):
            line = block.line + stmt.lineno
            if isinstance(stmt, ast.Expr):
                code = compile(ast.Expression(stmt.value), f"<{where}:{line}>", "eval",
                               flags=flags)
            else:
                code = compile(ast.Module([stmt], []), f"<{where}:{line}>", "exec", flags=flags)
            try:
                value = eval(code, namespace)  # the docs' own example code
                if asyncio.iscoroutine(value):
                    value = asyncio.run(value)
            except Exception as exc:
                raise AssertionError(f"{where}, line {line}: {type(exc).__name__}: {exc}") from exc
            if k in expected:
                want = expected[k]
                if not _line_pattern(want).fullmatch(repr(value)):
                    raise AssertionError(f"{where}, line {line}: expected {want}\n"
                                         f"            got {value!r}")
    if block.output is not None:
        want_lines = _trim(block.output.text.splitlines())
        got = _trim(printed.getvalue().splitlines())
        if not lines_match(want_lines, got):
            raise AssertionError(f"{where}: the block printed something else\n--- expected:\n"
                                 + "\n".join(want_lines) + "\n--- actual:\n" + "\n".join(got))


# ---------------------------------------------------------------- the pages

def _page_id(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_page_examples(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = parse_blocks(page.read_text(encoding="utf-8"))
    work = tmp_path / "work"
    work.mkdir()
    for key, value in _environment(work).items():
        if key.startswith(("TOOLRULES_", "XDG_", "HOME")):
            monkeypatch.setenv(key, value)
    for key in [k for k in os.environ if k.startswith(("OPENAI_", "ANTHROPIC_", "GEMINI_"))]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(work)
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    ran = 0
    for block in blocks:
        where = f"{_page_id(page)}:{block.line}"
        title = TITLE.search(block.info)
        if title:
            target = (work / title["name"]).resolve()
            assert work.resolve() in target.parents, f"{where}: title outside the page"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.text + "\n", encoding="utf-8")
            continue
        if block.skip is not None or block.used_as_output:
            continue
        if block.lang == "console":
            run_console(block, work, where)
            ran += 1
        elif block.lang in ("python", "py"):
            run_python(block, namespace, where)
            ran += 1
    # a page may have no runnable example; what it has must have run or been skipped
    assert ran >= 0


# ---------------------------------------------------------------- the conventions themselves

def test_pages_are_collected():
    ids = {_page_id(p) for p in PAGES}
    assert "README.md" in ids and "docs/index.md" in ids
    assert len(ids) > 20


def test_ellipsis_matching():
    assert lines_match(["a", "...", "d"], ["a", "b", "c", "d"])
    assert lines_match(["a", "...", "d"], ["a", "d"])
    assert lines_match(["x ... z"], ["x yy z"])
    assert not lines_match(["a", "d"], ["a", "b", "d"])
    assert not lines_match(["a"], ["a", "b"])


def test_console_parsing():
    cmds = console_commands("$ echo hi \\\n  there\nhi there\n$ false\n[exit 1]\n$ true")
    assert cmds[0][1] == ["hi there"] and cmds[1] == ("false", [], 1) and cmds[2][1] == []


def test_a_skip_needs_a_reason():
    with pytest.raises(AssertionError, match="needs a reason"):
        parse_blocks("<!-- docs-test: skip -->\n```console\n$ x\n```\n")
    b = parse_blocks("<!-- docs-test: skip (needs a key) -->\n\n```python\nx\n```\n")
    assert b[0].skip == "needs a key"


def test_arrow_comments_are_checked(tmp_path):
    block = parse_blocks("```python\nx = 2\nx + 1  # -> 3\nx * 10\n# -> 2...\n```\n")[0]
    run_python(block, {}, "t")
    bad = parse_blocks("```python\n1 + 1  # -> 3\n```\n")[0]
    with pytest.raises(AssertionError, match="expected 3"):
        run_python(bad, {}, "t")


def test_python_output_block():
    blocks = parse_blocks("```python\nprint('a')\nprint('b')\n```\n\n```text\na\n...\n```\n")
    run_python(blocks[0], {}, "t")
    wrong = parse_blocks("```python\nprint('a')\n```\n```text\nb\n```\n")
    with pytest.raises(AssertionError, match="printed something else"):
        run_python(wrong[0], {}, "t")


def test_api_reference_lists_every_public_name():
    text = (DOCS / "reference" / "python-api.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^::: toolrules\.(\w+)", text, re.M))
    missing = sorted(set(toolrules.__all__) - {"__version__"} - listed)
    assert not missing, f"add to docs/reference/python-api.md: {missing}"


def test_generated_reference_pages_cover_every_kind_table_and_check():
    from toolrules.rules._checks import LINT_CHECKS
    from toolrules.rules._schema_docs import lint_checks_markdown, schemas_markdown
    from toolrules.rules._schemas import KIND_SCHEMAS, TABLE_SCHEMAS

    schemas = schemas_markdown()
    for kind in KIND_SCHEMAS:
        assert f"### `{kind}`" in schemas
    for table in TABLE_SCHEMAS:
        assert f"### `{table}.yaml`" in schemas
    # nested fields, list items and free-keyed mappings all get a row
    assert "| `defaults.native_tools` | boolean |" in schemas
    assert "| `capabilities[].when` |" in schemas
    checks = lint_checks_markdown()
    assert all(f"| `{c.id}` |" in checks for c in LINT_CHECKS)
    hook = (DOCS / "_hooks" / "generated_pages.py").read_text(encoding="utf-8")
    assert "reference/rule-schemas.md" in hook and "reference/lint-checks.md" in hook
