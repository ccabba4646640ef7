"""Bench section `emulation`: prompt rendering, call validation and error mapping
(median CPU time per call)."""

from __future__ import annotations

import statistics
import time
from typing import Any

from .._types import Capability, Tool, ToolCall

__all__ = ["bench"]


def _tools(n: int) -> list[Tool]:
    return [Tool(
        name=f"tool_{i}",
        description=f"Tool number {i}: reads or changes resource {i} of the workspace. "
                    "Returns a short summary of what it did.",
        parameters={"type": "object", "properties": {
            "path": {"type": "string", "description": "Path relative to the workspace"},
            "limit": {"type": "integer", "minimum": 1, "description": "Maximum items"},
            "mode": {"type": "string", "enum": ["fast", "full"], "description": "How hard"},
            "tags": {"type": "array", "items": {"type": "string"}},
        }, "required": ["path"]},
    ) for i in range(n)]


def _per_call(fn: Any, quick: bool, target: float = 0.3) -> float:
    """Median CPU seconds per call over several rounds (about `target` seconds in all).

    CPU time of this process, not wall time: the figure does not grow when other
    processes compete for the machine."""
    fn()
    t0 = time.process_time()
    fn()
    once = max(time.process_time() - t0, 1e-6)
    rounds = 3 if quick else 7
    number = max(1, int(target / (3 if quick else 1) / rounds / once))
    results = []
    for _ in range(rounds):
        t0 = time.process_time()
        for _ in range(number):
            fn()
        results.append((time.process_time() - t0) / number)
    return statistics.median(results)


def bench(engine: Any, quick: bool) -> list[tuple[str, str]]:
    tools = _tools(50)
    out: list[tuple[str, str]] = []
    trained = next((s for s in engine.emulation_styles() if s.trained), None)
    cases = [("json style", {"capability": Capability()}),
             ("compact (4k window: budget applies)", {"capability": Capability(
                 context_window=4096)}),
             ("xml style with guidance examples", {"capability": Capability(
                 emulation_style="xml", prompt_guidance=True)})]
    if trained is not None:
        cases.append((f"trained format ({trained.template})", {"style": trained.name}))
    for label, kwargs in cases:
        seconds = _per_call(lambda kw=kwargs: engine.render_emulation(tools, **kw), quick)
        out.append((f"render_emulation, 50 tools, {label}", f"{seconds * 1e3:.3f} ms"))
    call = ToolCall("1", "tool_7", {"path": "a.txt", "limit": 3, "tags": ["x"]})
    seconds = _per_call(lambda: engine.render_call(call, tools, style="xml"), quick)
    out.append(("render_call (xml)", f"{seconds * 1e6:.1f} us"))
    index = {t.name: t for t in tools}
    bad = ToolCall("2", "tool_7", {"path": 3, "limit": "x", "mode": "slow"})
    for label, c in (("valid", call), ("invalid, 3 errors", bad)):
        seconds = _per_call(lambda c=c: engine.check_tool_call(c, index), quick)
        out.append((f"validate_tool_call, {label}", f"{1 / seconds:,.0f} calls/s"))
    seconds = _per_call(lambda: engine.format_validation_errors_for_retry(
        engine.validate_tool_call(bad, index), bad, index), quick)
    out.append(("validation errors + retry feedback with corrected call",
                f"{seconds * 1e3:.3f} ms"))
    exc = ConnectionResetError("Connection reset by peer")
    seconds = _per_call(lambda: engine.tool_error(exc, "web_fetch"), quick)
    out.append(("ToolError.from_exception", f"{1 / seconds:,.0f} errors/s"))
    return out
