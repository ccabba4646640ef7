"""Bench section `runtime`: the tool loop's cost per model turn.

A scripted model calls one of 20 trivial (async, return "ok") tools per turn for 10
rounds, then answers: 11 model turns per task. Each task gets a fresh executor session,
ScriptedModel and ToolLoop, and the whole task is timed (wall clock; nothing subtracted):
parsing the model's output, guardrails, the executor's policy pipeline, tool results,
trace records. Paths: native tools (OpenAI-format assistant messages, gpt-4o), native
with the model's raw-text dialect (Qwen3), and emulated (Llama 3 8B via Ollama: raw text
read with the emulation's dialect, prompts built on request).

When pydantic_ai is importable, its agent loop does the same work in the same run
(`FunctionModel` returning a tool call per turn, 20 tools, 10 rounds), interleaved with
ours round by round so that machine load hits both alike.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .._types import Tool

__all__ = ["bench"]

TOOLS = 20
ROUNDS = 10
TURNS = ROUNDS + 1
_SCHEMA = {"type": "object", "properties": {"x": {"type": "string", "description": "An x."}},
           "required": ["x"]}


def _turns(kind: str) -> list[Any]:
    names = [f"tool_{i % TOOLS}" for i in range(ROUNDS)]
    if kind == "native":
        turns: list[Any] = [{"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": n, "arguments": json.dumps({"x": f"v{i}"})}}]}
            for i, n in enumerate(names)]
    elif kind == "dialect":
        turns = ['<tool_call>\n' + json.dumps({"name": n, "arguments": {"x": f"v{i}"}})
                 + '\n</tool_call>' for i, n in enumerate(names)]
    else:
        turns = [json.dumps({"name": n, "parameters": {"x": f"v{i}"}}) for i, n in enumerate(names)]
    return turns + ["All done."]


_MODELS = {"native": "gpt-4o", "dialect": "Qwen/Qwen3-8B", "emulated": "llama3:8b"}
_LABELS = {"native": "native (OpenAI messages, gpt-4o)",
           "dialect": "native, raw-text dialect (Qwen3-8B)",
           "emulated": "emulated (llama3:8b, JSON text)"}


def _ours(engine: Any, kind: str) -> Callable[[], Awaitable[Any]]:
    from ..clients._scripted import ScriptedModel
    from ..runtime import ToolExecutor, ToolRegistry
    from ..runtime._loop import ToolLoop

    registry = ToolRegistry(engine=engine)

    async def trivial(x: str) -> str:
        return "ok"

    for i in range(TOOLS):
        registry.add(Tool(f"tool_{i}", f"Tool number {i}: looks up item {i} of the catalogue.",
                          _SCHEMA), trivial, kind="read")
    turns = _turns(kind)
    model_id = _MODELS[kind]

    async def task() -> Any:
        executor = ToolExecutor(registry, engine=engine)
        model = ScriptedModel(turns, model=model_id, engine=engine)
        out = await ToolLoop(model, executor, max_rounds=TURNS, engine=engine).run("Go.")
        if out.stopped != "done" or out.tool_calls != ROUNDS:
            raise RuntimeError(f"bench task went wrong: {out!r}")
        return out
    return task


def _theirs() -> Callable[[], Awaitable[Any]] | None:
    try:
        from pydantic_ai import Agent
        from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
        from pydantic_ai.models.function import AgentInfo, FunctionModel
    except ImportError:
        return None

    def respond(messages: list[Any], info: AgentInfo) -> ModelResponse:
        n = sum(1 for m in messages if isinstance(m, ModelResponse))
        if n < ROUNDS:
            return ModelResponse(parts=[ToolCallPart(tool_name=f"tool_{n % TOOLS}",
                                                     args={"x": f"v{n}"}, tool_call_id=f"c{n}")])
        return ModelResponse(parts=[TextPart("All done.")])

    agent: Any = Agent(FunctionModel(respond))
    for i in range(TOOLS):
        async def tool(x: str) -> str:
            """Looks up an item of the catalogue.

            Args:
                x: An x.
            """
            return "ok"
        tool.__name__ = f"tool_{i}"
        agent.tool_plain(tool)

    async def task() -> Any:
        out = await agent.run("Go.")
        if out.output != "All done.":
            raise RuntimeError(f"bench task went wrong: {out.output!r}")
        return out
    return task


async def _measure(tasks: dict[str, Callable[[], Awaitable[Any]]], rounds: int,
                   per_round: int) -> dict[str, float]:
    """Median wall seconds per model turn of each task, interleaved round by round."""
    for task in tasks.values():  # warm-up: caches, compiled rules, imports
        for _ in range(3):
            await task()
    samples: dict[str, list[float]] = {k: [] for k in tasks}
    for _ in range(rounds):
        for key, task in tasks.items():
            t0 = time.perf_counter()
            for _ in range(per_round):
                await task()
            samples[key].append((time.perf_counter() - t0) / per_round / TURNS)
    return {k: statistics.median(v) for k, v in samples.items()}


def bench(engine: Any, quick: bool) -> list[tuple[str, str]]:
    tasks = {kind: _ours(engine, kind) for kind in _MODELS}
    theirs = _theirs()
    if theirs is not None:
        tasks["pydantic_ai"] = theirs
    per_turn = asyncio.run(_measure(tasks, 3 if quick else 7, 5 if quick else 20))
    out = [(f"ToolLoop per turn, {_LABELS[k]}", f"{per_turn[k] * 1e6:.0f} us")
           for k in _MODELS]
    if theirs is None:
        out.append(("pydantic_ai (not installed: pip install toolrules[bench])", "-"))
        return out
    base = per_turn["pydantic_ai"]
    out.append(("pydantic_ai Agent + FunctionModel per turn, same work",
                f"{base * 1e6:.0f} us"))
    for k in _MODELS:
        out.append((f"ratio ToolLoop / pydantic_ai, {k} (goal <= 0.20)",
                    f"{per_turn[k] / base:.2f}"))
    return out
