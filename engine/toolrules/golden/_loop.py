"""Golden suite `loop`: the tool loop (rules/loop.yaml) on scripted conversations, with
the built-in tools in a temporary workspace.

Inputs: golden/loop/<name>.cases.yaml - `scenarios:` each {name, model, task, turns (raw
model outputs in the model's own format, or assistant message dicts), optional files
(the workspace before the run), settings (ToolLoop keyword arguments), trust, allowed,
denied, stream, expect: {stopped, files}}. Output: golden/loop/<name>.golden.yaml, each
scenario's transcript (what the model said, each call, what went back, notices) and how
it ended.

Invariants checked before anything is written: every `expect` holds (how the loop
stopped, the files it left), and the scenarios of a file together use every message of
rules/loop.yaml.
"""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ._core import GoldenFile, read_cases

__all__ = ["golden_files"]

_MAX_SHOWN = 400


def golden_files(engine: Any, root: Path) -> Iterable[GoldenFile]:
    base = root / "loop"
    if not base.is_dir():
        return
    for cases_path in sorted(base.glob("*.cases.yaml")):
        name = cases_path.name.removesuffix(".cases.yaml")
        data = read_cases(cases_path) or {}
        out: list[dict[str, Any]] = []
        problems: list[str] = []
        seen_text: list[str] = []
        for scenario in data.get("scenarios") or []:
            entry, texts, broken = _run(engine, scenario, data.get("files") or {})
            out.append(entry)
            seen_text.extend(texts)
            problems.extend(f"scenario {scenario.get('name')!r}: {p}" for p in broken)
        problems.extend(_uncovered(engine, seen_text))
        yield GoldenFile(path=f"loop/{name}.golden.yaml", content={"scenarios": out},
                         problems=problems, source=f"golden/loop/{cases_path.name}")


def _short(text: Any) -> str:
    """One line: text with its newlines escaped (JSON), cut at _MAX_SHOWN characters."""
    s = json.dumps(text, ensure_ascii=False, sort_keys=True)
    return s if len(s) <= _MAX_SHOWN else s[:_MAX_SHOWN] + f"... ({len(s)} chars)"


def _fed_back(text: str) -> str:
    """What went back to the model: an error body as its message and next step."""
    try:
        body = json.loads(text)
    except ValueError:
        return _short(text)
    if not isinstance(body, dict) or body.get("ok") is not False:
        return _short(text)
    message = (body.get("error") or {}).get("message")
    out = _short(message)
    if body.get("next_step"):
        out += " | next_step: " + _short(body["next_step"])
    return out


def _run(engine: Any, sc: dict[str, Any], default_files: dict[str, str]
         ) -> tuple[dict[str, Any], list[str], list[str]]:
    from ..clients._scripted import ScriptedModel
    from ..runtime import ToolExecutor, builtin_tools
    from ..runtime._loop import ToolLoop

    with tempfile.TemporaryDirectory(prefix="toolrules-golden-loop-") as tmp:
        ws = Path(tmp)
        files = {**default_files, **(sc.get("files") or {})}
        for rel, content in files.items():
            p = ws / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(content, encoding="utf-8")
        executor = ToolExecutor(builtin_tools(ws, engine=engine), workspace=ws,
                                trust=sc.get("trust", "workspace"), allowed=sc.get("allowed"),
                                denied=sc.get("denied"), engine=engine)
        model = ScriptedModel(sc["turns"], model=sc["model"], engine=engine)
        loop = ToolLoop(model, executor, engine=engine, **(sc.get("settings") or {}))

        async def collect() -> list[Any]:
            return [e async for e in loop.events(sc.get("task", "Do the task."),
                                                 stream=bool(sc.get("stream")))]
        events = asyncio.run(collect())
        after = {p.relative_to(ws).as_posix(): p.read_text(encoding="utf-8", errors="replace")
                 for p in sorted(ws.rglob("*")) if p.is_file()}
    transcript: list[str] = []
    texts: list[str] = []
    text_run: list[str] = []

    def flush() -> None:
        if text_run:
            transcript.append(f"{kind_round}text: {_short(''.join(text_run))}")
            text_run.clear()

    kind_round = ""
    for e in events:
        kind = e.type.value
        if kind == "text":
            kind_round = f"[{e.round}] "
            text_run.append(e.content or "")
            continue
        flush()
        prefix = f"[{e.round}] "
        if kind == "tool_call":
            transcript.append(f"{prefix}call {e.call.name}({_short(e.call.arguments)})")
        elif kind == "tool_result":
            r = e.result
            if r.ok:
                status = "ok"
            else:
                err = r.tool_error
                status = ((err.details or {}).get("error") if err is not None else None) or "failed"
            ran = "" if e.executed else ", not run"
            transcript.append(f"{prefix}result {e.call.name} [{status}{ran}]: "
                              f"{_fed_back(e.content or '')}")
            texts.append(e.content or "")
        elif kind == "notice":
            transcript.append(f"{prefix}notice {e.notice}: {_short(e.content)}")
            texts.append(e.content or "")
        elif kind == "reasoning":
            transcript.append(f"{prefix}reasoning: {_short(e.content)}")
    flush()
    outcome = events[-1].outcome
    for req in model.requests:
        texts.extend(str(m.content) for m in req.messages if m.role == "user")
    entry: dict[str, Any] = {"name": sc.get("name"), "model": sc["model"],
                             "stopped": outcome.stopped, "rounds": outcome.rounds,
                             "tool_calls": outcome.tool_calls, "content": outcome.content,
                             "offered": [", ".join(t.name for t in r.tools) or "(none)"
                                         for r in model.requests],
                             "transcript": transcript}
    changed = {k: v for k, v in after.items() if files.get(k) != v}
    if changed:
        entry["files_changed"] = {k: _short(v) for k, v in changed.items()}
    problems: list[str] = []
    expect = sc.get("expect") or {}
    if "stopped" in expect and expect["stopped"] != outcome.stopped:
        problems.append(f"expected stopped={expect['stopped']!r}, got {outcome.stopped!r}")
    for rel, want in (expect.get("files") or {}).items():
        if after.get(rel) != want:
            problems.append(f"expected {rel} to hold {want!r}, found {after.get(rel)!r}")
    for rel in expect.get("absent") or ():
        if rel in after:
            problems.append(f"expected no {rel}, but the run left one")
    return entry, texts, problems


def _uncovered(engine: Any, texts: list[str]) -> list[str]:
    """Messages of rules/loop.yaml that no scenario made the loop say."""
    table = engine.ruleset.table("loop") or {}
    blob = "\n".join(texts)
    out = []
    for key, template in (table.get("messages") or {}).items():
        # the longest placeholder-free piece of the text must show up somewhere
        pieces = [p.strip() for p in re.split(r"\{\w+\}", str(template))]
        probe = max(pieces, key=len)
        if probe and probe not in blob:
            out.append(f"rules/loop.yaml message {key!r} is used by no scenario")
    return out
