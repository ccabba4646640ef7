"""Golden suite `dialects`: hand-written raw outputs per dialect, generated parses.

Inputs: golden/dialects/<dialect>.cases.yaml

    tools: [...]                  # OpenAI-format tools offered (default for every case)
    generation_prompt: "..."      # optional default
    cases:
      - name: parallel
        text: "<tool_call>...</tool_call>"
        finish_reason: stop       # optional (length = cut off by max_tokens)
        markers_in_text: true     # optional: the text itself mentions markers (reasoning)
        generation_prompt: ...    # optional per case
        model: ID                 # optional: the model's quirks and decline calls apply

A cases file whose name is not a dialect holds cases for several (golden/dialects/
hostile.cases.yaml): each of its cases says `dialect: ID`.

Output: golden/dialects/<dialect>.golden.yaml: content, reasoning, calls (name, arguments,
and the id only when the format wrote one), repairs and warnings per case.

Invariants (regen refuses to write when one breaks): every way of streaming the text
(one delta, one character per delta, seeded random groupings) gives exactly the
non-streamed parse; reasoning and tool names never contain a marker of the dialect;
arguments are JSON objects.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ._core import GoldenFile, read_cases

__all__ = ["dialect_markers", "golden_files", "splits", "stream_parse"]


def splits(text: str, seed: int) -> list[str]:
    """`seed` 0 gives one character per delta; any other seeds random groups of 1..8
    characters."""
    if seed == 0:
        return list(text)
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(text):
        k = rng.randint(1, 8)
        out.append(text[i:i + k])
        i += k
    return out


def stream_parse(parser: Any, deltas: Iterable[str], finish: str | None) -> dict[str, Any]:
    """Accumulate a stream the way a client merges deltas."""
    content, reasoning, calls = [], [], {}
    stream = parser.stream()

    def take(chunks: list[Any]) -> None:
        for ch in chunks:
            t = str(ch.type)
            if t == "text":
                content.append(ch.content)
            elif t == "reasoning":
                reasoning.append(ch.content)
            elif t == "tool_start":
                calls[ch.index] = [ch.tool_name, []]
            elif t == "tool_args":
                calls[ch.index][1].append(ch.args_delta)

    for d in deltas:
        take(stream.feed(d))
    take(stream.close(finish_reason=finish))
    return {"content": "".join(content) or None, "reasoning": "".join(reasoning) or None,
            "calls": [(n, json.loads("".join(a))) for _, (n, a) in sorted(calls.items())]}


def summary(result: Any) -> dict[str, Any]:
    return {"content": result.content, "reasoning": result.reasoning_content,
            "calls": [(c.name, c.arguments) for c in result.tool_calls]}


def dialect_markers(d: Any) -> set[str]:
    """Every literal marker a compiled dialect knows (for leak checks)."""
    out: set[str] = set()
    for region in d.regions:
        out |= set(region.exits.actions)
    for c in d.calls:
        out |= set(c.open) | set(c.close)
        if c.header is not None:
            out |= {m for m in c.header.ends.actions if len(m) > 1}
        p = c.payload.param
        if p is not None:
            out |= {m for m in p.open + p.close + p.value_open if len(m) > 1 and "{key}" not in m}
    if d.messages is not None:
        out |= set(d.messages.header_end.actions)
    return {m for m in out if len(m.strip()) > 1}


def _case_output(parser: Any, text: str, finish: str | None,
                 markers_allowed: bool = False) -> tuple[dict[str, Any], list[str]]:
    problems: list[str] = []
    result = parser.parse(text, finish_reason=finish)
    whole = summary(result)
    for seed in (None, 0, 1, 2, 3):
        deltas = [text] if seed is None else splits(text, seed)
        got = stream_parse(parser, deltas, finish)
        if got != whole:
            label = "one delta" if seed is None else ("1-char deltas" if seed == 0 else f"split seed {seed}")
            problems.append(f"stream ({label}) differs from parse: {got!r} != {whole!r}")
    markers = dialect_markers(parser.dialect)
    texts = [result.reasoning_content or ""] + [c.name for c in result.tool_calls]
    leaked = sorted(m for m in markers if any(m in t for t in texts))
    if leaked and not markers_allowed:
        problems.append(f"markers leaked into reasoning or names: {leaked}")
    for c in result.tool_calls:
        if not isinstance(c.arguments, dict):
            problems.append(f"arguments of {c.name} are not an object")
    out: dict[str, Any] = {"content": result.content, "reasoning": result.reasoning_content,
                           "calls": []}
    for c in result.tool_calls:
        call: dict[str, Any] = {"name": c.name, "arguments": c.arguments}
        if c.id is not None and not c.id.startswith("call_"):
            call["id"] = c.id
        out["calls"].append(call)
    if result.repairs:
        out["repairs"] = list(result.repairs)
    if result.warnings:
        out["warnings"] = list(result.warnings)
    return out, problems


def golden_files(engine: Any, root: Path) -> Iterable[GoldenFile]:
    known = set(engine.ruleset.ids("dialect"))
    for cases_path in sorted((root / "dialects").glob("*.cases.yaml")):
        name = cases_path.name.removesuffix(".cases.yaml")
        data = read_cases(cases_path) or {}
        problems: list[str] = []
        cases = data.get("cases", [])
        multi = name not in known and bool(cases) and all(c.get("dialect") for c in cases)
        if name not in known and not multi:
            problems.append(f"no dialect {name!r} in rules/dialects/ (a file of cases for "
                            "several dialects names one in every case: `dialect: ID`)")
            yield GoldenFile(path=f"dialects/{name}.golden.yaml", content={}, problems=problems,
                             source=f"golden/dialects/{cases_path.name}")
            continue
        out: dict[str, Any] = {}
        for case in cases:
            tools = case.get("tools", data.get("tools"))
            gp = case.get("generation_prompt", data.get("generation_prompt"))
            dialect = case["dialect"] if multi else name
            if dialect not in known:
                problems.append(f"{case['name']}: no dialect {dialect!r} in rules/dialects/")
                continue
            parser = engine.text_parser(case.get("model"), dialect=dialect, tools=tools,
                                        generation_prompt=gp, ids="sequential",
                                        repairs=case.get("repairs"))
            finish = case.get("finish_reason", "stop")
            result, case_problems = _case_output(parser, case["text"], finish,
                                                 bool(case.get("markers_in_text")))
            out[case["name"]] = result
            problems.extend(f"{case['name']}: {p}" for p in case_problems)
        yield GoldenFile(path=f"dialects/{name}.golden.yaml", content=out, problems=problems,
                         source=f"golden/dialects/{cases_path.name}")
