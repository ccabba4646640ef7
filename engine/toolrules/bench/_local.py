"""Bench section `local`: the embedded model (rules/local.yaml; Gemma 3 270M by default)
on a small tool-calling task set, with and without constrained decoding.

Sixteen requests, four per tool (read_file, get_weather, send_email, calculate), each a
one-turn conversation offering all four tools. Three ways of asking:

- constrained, tool_choice required: every answer must be one call, decoded under
  `Engine.call_grammar`; reported: calls that are schema-valid (the claim: 100 %), the
  right tool chosen (tool-selection accuracy), the request's key argument right;
- constrained, tool_choice auto: the model may answer in text; the same figures over
  the answers that call a tool;
- unconstrained (auto, constrained=False): what the model writes on its own, read with
  the same dialect: answers holding a call, calls that are schema-valid and name an
  offered tool (usable), the right tool.

Greedy decoding (temperature 0, a fixed sampling seed): the figures repeat run to run on one build of
llama.cpp. Skipped when llama_cpp or the weights are not installed.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._types import Tool

__all__ = ["TASKS", "TOOLS", "LocalRun", "bench", "run_tasks"]

TOOLS: tuple[Tool, ...] = (
    Tool("read_file", "Read a text file from the workspace and return its contents.",
         {"type": "object", "properties": {
             "path": {"type": "string", "description": "File path, relative to the workspace."},
             "max_lines": {"type": "integer", "minimum": 1,
                           "description": "Return at most this many lines."}},
          "required": ["path"]}),
    Tool("get_weather", "Current weather for a city.",
         {"type": "object", "properties": {
             "city": {"type": "string", "description": "City name."},
             "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
          "required": ["city"]}),
    Tool("send_email", "Send an email.",
         {"type": "object", "properties": {
             "to": {"type": "string", "description": "Recipient address."},
             "subject": {"type": "string"},
             "body": {"type": "string"}},
          "required": ["to", "subject", "body"]}),
    Tool("calculate", "Apply an arithmetic operation to two numbers.",
         {"type": "object", "properties": {
             "a": {"type": "number"}, "b": {"type": "number"},
             "op": {"type": "string", "enum": ["add", "subtract", "multiply", "divide"]}},
          "required": ["a", "b", "op"]}),
)

# (request, the tool that serves it, its key argument)
TASKS: tuple[tuple[str, str, tuple[str, Any]], ...] = (
    ("Read the file notes.txt", "read_file", ("path", "notes.txt")),
    ("Show me what is in config.yaml", "read_file", ("path", "config.yaml")),
    ("Open README.md and print it", "read_file", ("path", "README.md")),
    ("What does the file todo.txt say?", "read_file", ("path", "todo.txt")),
    ("What is the weather in Paris?", "get_weather", ("city", "Paris")),
    ("Is it raining in London right now?", "get_weather", ("city", "London")),
    ("How warm is it in Tokyo, in fahrenheit?", "get_weather", ("city", "Tokyo")),
    ("Weather for Berlin please", "get_weather", ("city", "Berlin")),
    ("Send an email to bob@example.com saying the build is green", "send_email",
     ("to", "bob@example.com")),
    ("Email alice@example.com with subject Lunch: are you free at noon?", "send_email",
     ("to", "alice@example.com")),
    ("Write to ops@example.com that the server is down", "send_email",
     ("to", "ops@example.com")),
    ("Mail carol@example.com: the report is attached", "send_email",
     ("to", "carol@example.com")),
    ("What is 12 times 7?", "calculate", ("op", "multiply")),
    ("Add 3.5 and 4", "calculate", ("op", "add")),
    ("Divide 100 by 8", "calculate", ("op", "divide")),
    ("Subtract 9 from 20", "calculate", ("op", "subtract")),
)


@dataclass
class LocalRun:
    """One way of asking, over the task set."""

    label: str
    answers: int = 0
    with_call: int = 0
    valid: int = 0
    right_tool: int = 0
    right_argument: int = 0
    seconds: float = 0.0
    outputs: list[tuple[str, Any]] = field(default_factory=list)

    def share(self, part: int, whole: int) -> str:
        return f"{part}/{whole} ({100.0 * part / whole:.0f} %)" if whole else "0/0"


def run_tasks(model: Any, engine: Any, *, tool_choice: Any = "required",
              constrained: bool = True, tasks: Sequence[tuple[str, str, tuple[str, Any]]] = TASKS,
              max_tokens: int = 96, label: str = "") -> LocalRun:
    """Ask `model` every task once; count calls, valid calls, right tools."""
    run = LocalRun(label)
    start = time.perf_counter()
    for request, tool, (key, value) in tasks:
        parsed = model.generate_sync([{"role": "user", "content": request}], list(TOOLS),
                                     tool_choice, max_tokens=max_tokens, constrained=constrained)
        run.answers += 1
        run.outputs.append((request, parsed))
        if not parsed.tool_calls:
            continue
        run.with_call += 1
        call = parsed.tool_calls[0]
        ok = all(not engine.validate_tool_call(c, list(TOOLS)) for c in parsed.tool_calls)
        run.valid += int(ok)
        run.right_tool += int(call.name == tool)
        got = call.arguments.get(key) if isinstance(call.arguments, dict) else None
        run.right_argument += int(call.name == tool and isinstance(got, str)
                                  and got.lower() == str(value).lower())
    run.seconds = time.perf_counter() - start
    return run


def _available(engine: Any) -> str | None:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return "llama_cpp is not installed (pip install 'toolrules[local]')"
    from ..clients._local import default_gguf

    try:
        default_gguf(engine)
    except (ImportError, OSError) as exc:
        return str(exc)
    return None


def bench(engine: Any, quick: bool) -> list[tuple[str, str]]:
    why = _available(engine)
    if why is not None:
        return [("skipped", why)]
    from ..clients._local import LocalModel

    model = LocalModel(engine=engine).load()
    n = len(TASKS)
    out: list[tuple[str, str]] = [("model", f"{model.model} ({model.gguf.rsplit('/', 1)[-1]}); "
                                            f"{n} requests, 4 tools, greedy")]
    req = run_tasks(model, engine, tool_choice="required", constrained=True)
    out += [
        ("constrained, required: answers that call a tool", req.share(req.with_call, n)),
        ("constrained, required: calls schema-valid", req.share(req.valid, req.with_call)),
        ("constrained, required: tool-selection accuracy", req.share(req.right_tool, n)),
        ("constrained, required: key argument right", req.share(req.right_argument, n)),
        ("constrained, required: seconds per answer", f"{req.seconds / n:.2f}"),
    ]
    auto = run_tasks(model, engine, tool_choice="auto", constrained=True)
    out += [
        ("constrained, auto: answers that call a tool", auto.share(auto.with_call, n)),
        ("constrained, auto: calls schema-valid", auto.share(auto.valid, auto.with_call)),
        ("constrained, auto: right tool (of all requests)", auto.share(auto.right_tool, n)),
        ("constrained, auto: seconds per answer", f"{auto.seconds / n:.2f}"),
    ]
    free = run_tasks(model, engine, tool_choice="auto", constrained=False)
    out += [
        ("unconstrained: answers holding a call", free.share(free.with_call, n)),
        ("unconstrained: usable calls (schema-valid) of all requests", free.share(free.valid, n)),
        ("unconstrained: right tool (of all requests)", free.share(free.right_tool, n)),
        ("unconstrained: seconds per answer", f"{free.seconds / n:.2f}"),
    ]
    if quick:
        return out
    # The rules turn the prompt's example calls off for this model; what they would give:
    with tempfile.TemporaryDirectory() as overlay:
        (Path(overlay) / "models").mkdir()
        (Path(overlay) / "models" / "zz-bench-guidance.yaml").write_text(
            f"overrides:\n  - id: {model.model}\n    set: {{prompt_guidance: true}}\n",
            encoding="utf-8")
        from .._engine import load

        with_examples = load(paths=[overlay], use_env=False, cache=False)
        guided = LocalModel(model.gguf, as_model=model.model, engine=with_examples)
        g = run_tasks(guided, with_examples, tool_choice="required", constrained=True)
    out += [
        ("with example calls in the prompt, required: calls schema-valid",
         g.share(g.valid, g.with_call)),
        ("with example calls in the prompt, required: tool-selection accuracy",
         g.share(g.right_tool, n)),
        ("with example calls in the prompt, required: key argument right",
         g.share(g.right_argument, n)),
    ]
    return out
