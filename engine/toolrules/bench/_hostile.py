"""Hostile shapes: mutations of a real output of each dialect that used to crash the
parser, make streaming disagree with parsing the whole text, or run slowly.

Each dialect's first plain golden case with one call and a string argument is the
sample; the mutations replace that argument's value, cut the text, repeat it, or stretch
its header. Marker runs, whitespace and soup come from the compiled dialect's own
markers. The dialect bench times them (µs per KB, whole and streamed) and the property
tests check that every split of them gives what parse() gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = ["RUN_SIZES", "Sample", "Shape", "hostile_shapes", "sample", "word_runs"]

# Runs of word characters around the old payload-head limit (256) and far past it.
RUN_SIZES = (255, 256, 257, 1_000, 200_000)


@dataclass(frozen=True)
class Sample:
    """One real output of a dialect, and where its first string argument's value stands
    (`start`/`end` include the value's quotes when the format quotes it)."""

    text: str
    tools: Any
    prompt: str | None
    name: str
    key: str
    start: int
    end: int
    quoted: bool


@dataclass(frozen=True)
class Shape:
    label: str
    text: str
    tools: Any
    prompt: str | None


_QUOTES = ('<|"|>', '"', "'")


def sample(engine: Any, dialect: str, cases_dir: Path) -> Sample | None:
    """The first golden case of `dialect` that parses to exactly one call, cleanly, with a
    string argument whose value occurs once in the text."""
    path = cases_dir / f"{dialect}.cases.yaml"
    if not path.is_file():
        return None
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    for case in data.get("cases") or []:
        if case.get("model") or case.get("repairs") or case.get("finish_reason") == "length":
            continue
        tools = case.get("tools", data.get("tools"))
        prompt = case.get("generation_prompt", data.get("generation_prompt"))
        text = case["text"]
        parser = engine.text_parser(dialect=dialect, tools=tools, generation_prompt=prompt,
                                    ids="sequential")
        result = parser.parse(text)
        if len(result.tool_calls) != 1 or result.warnings or result.repairs:
            continue
        call = result.tool_calls[0]
        for key, value in call.arguments.items():
            if not isinstance(value, str) or len(value) < 3 or text.count(value) != 1:
                continue
            i = text.index(value)
            j = i + len(value)
            for q in _QUOTES:
                if text[i - len(q):i] == q and text[j:j + len(q)] == q:
                    return Sample(text, tools, prompt, call.name, key, i - len(q), j + len(q),
                                  True)
            return Sample(text, tools, prompt, call.name, key, i, j, False)
    return None


def _markers(d: Any) -> list[str]:
    out: set[str] = set()
    for region in d.regions:
        out |= set(region.exits.actions)
    for c in d.calls:
        out |= set(c.open) | set(c.close)
    return sorted(m for m in out if len(m.strip()) > 1)


def hostile_shapes(engine: Any, dialect: str, cases_dir: Path, big: int = 200_000,
                   run: int = 20_000, depth: int = 5_000,
                   dense: int | None = None) -> list[Shape]:
    """The hostile inputs for `dialect`: `big` characters for huge arguments, `run` for
    whitespace/marker runs and long headers, `depth` brackets for deep nesting, `dense`
    (default `big`) characters of one-token-per-character values."""
    dense = big if dense is None else dense
    d = engine.dialect(dialect)
    out: list[Shape] = []
    s = sample(engine, dialect, cases_dir)
    if s is not None:
        pre, post, value = s.text[:s.start], s.text[s.end:], s.text[s.start:s.end]
        # typed as an array, so formats that write values as text decode the nesting too
        decoding = s.tools if s.quoted else [{"type": "function", "function": {
            "name": s.name, "parameters": {"type": "object",
                                           "properties": {s.key: {"type": "array"}}}}}]

        def at_value(label: str, new: str, tools: Any = s.tools) -> None:
            out.append(Shape(label, pre + new + post, tools, s.prompt))

        q = '"' if s.quoted else ""
        at_value("nested-brackets", "[" * depth + "]" * depth, decoding)
        at_value("nested-unclosed", "[" * depth, decoding)
        at_value("nested-objects", '{"a": ' * (depth // 2) + "1" + "}" * (depth // 2), decoding)
        at_value("nested-parens", "(" * depth + ")" * depth, decoding)
        at_value("flat-brackets", "[" + "[1]," * (dense // 4) + "[1]]", decoding)
        at_value("trailing-commas", "[" + "1," * (dense // 2) + "]", decoding)
        at_value("big-argument", q + "x" * big + q)
        at_value("escapes", q + '\\"\\\\\\n' * (big // 6) + q)
        at_value("spaces-before-value", " " * run + value)
        out.append(Shape("unclosed-then-spaces", pre + value + " " * run, s.tools, s.prompt))
        out.append(Shape("many-calls", s.text * max(1, big // len(s.text) // 4), s.tools,
                         s.prompt))
        cut = s.text[:(s.start + s.end) // 2]
        out.append(Shape("repeated-cut-calls", cut * max(1, run // len(cut)), s.tools,
                         s.prompt))
        named = s.text.find(s.name)
        if named >= 0:
            head, rest = s.text[:named], s.text[named:]
            out.append(Shape("long-unclosed-header", head + "h" * run, s.tools, s.prompt))
            out.append(Shape("long-header", head + "h" * run + rest, s.tools, s.prompt))
            for k in (4090, 4095, 4096, 4097, 4100):  # around the header limit
                out.append(Shape(f"header-{k}", head + "h" * (k - len(s.name)) + rest,
                                 s.tools, s.prompt))
    markers = _markers(d)
    for m in markers:
        out.append(Shape(f"repeated {m!r}", m * max(1, run // len(m)), None, None))
    opens = sorted({m for c in d.calls for m in c.open})
    for m in opens:
        out.append(Shape(f"{m!r} then spaces", m + " " * run, None, None))
        out.append(Shape(f"{m!r} then text", m + "x" * run, None, None))
    if markers:
        soup = "".join(m + " x" for m in markers)
        out.append(Shape("marker soup", soup * max(1, run // len(soup)), None, None))
    out.append(Shape("spaces", " " * run, None, None))
    out.append(Shape("newlines", "\n" * run, None, None))
    return out


def _word(n: int) -> str:
    """n word characters, as a digest or a long identifier writes them."""
    unit = "deadbeef0123456789_cafe"
    return (unit * (n // len(unit) + 1))[:n]


def word_runs(engine: Any, dialect: str, cases_dir: Path,
              sizes: tuple[int, ...] = RUN_SIZES) -> list[Shape]:
    """Runs of word characters (a hex digest, a long identifier) wherever a reply can hold
    them: at its start, after prose, before a call, in place of a call's name, inside its
    payload and its value, and right after each of the dialect's markers."""
    d = engine.dialect(dialect)
    s = sample(engine, dialect, cases_dir)
    out: list[Shape] = []
    for n in sizes:
        w = _word(n)
        out.append(Shape(f"run-{n} at the start", w, None, None))
        out.append(Shape(f"run-{n} after prose", "The hash is " + w, None, None))
        if s is not None:
            tools, prompt = s.tools, s.prompt
            out.append(Shape(f"run-{n} then a call", w + "\n" + s.text, tools, prompt))
            out.append(Shape(f"run-{n} at the start of a call's place", w + s.text, tools,
                             prompt))
            named = s.text.find(s.name)
            if named >= 0:
                out.append(Shape(f"run-{n} as the call's name", s.text[:named] + w +
                                 s.text[named + len(s.name):], tools, prompt))
            value = s.text[s.start:s.end]
            q = value[0] if s.quoted else ""
            out.append(Shape(f"run-{n} inside the payload", s.text[:s.start] + w +
                             s.text[s.end:], tools, prompt))
            if q:
                out.append(Shape(f"run-{n} inside the value", s.text[:s.start] + q + w + q +
                                 s.text[s.end:], tools, prompt))
        for m in _markers(d):
            out.append(Shape(f"run-{n} after {m!r}", m + w, None, None))
    return out
