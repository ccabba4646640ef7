"""Agent conversations as their clients send them, for the chat-template tests.

Each fixture is (client API, request body): what Claude Code, Codex and an OpenAI chat
client put on the wire in the shapes that real chat templates refuse or drop - a system
message in the middle, two leading system/developer messages, consecutive user turns, a
tool result next to a user turn, calls without content, text beside calls. `texts(...)`
lists every text a client sent, so a test can check each reaches the rendered prompt.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["FIXTURES", "texts"]

_BASH = {"name": "Bash", "description": "Run a shell command",
         "input_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                          "required": ["command"]}}
_READ = {"name": "Read", "description": "Read a file",
         "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}},
                          "required": ["file_path"]}}

# Claude Code 2.1 (Anthropic Messages): two system blocks, a reminder inside the first user
# turn, text beside a call, a tool result and the user's words in one turn, then a system
# message in the middle of the conversation.
CLAUDE_CODE = {
    "model": "MODEL", "max_tokens": 512, "stream": False,
    "system": [{"type": "text", "text": "You are Claude Code, a coding agent (cc-sys-1)."},
               {"type": "text", "text": "Working directory: /work/app (cc-sys-2)."}],
    "tools": [_BASH, _READ],
    "messages": [
        {"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>cc-reminder-1</system-reminder>"},
            {"type": "text", "text": "List the files please (cc-user-1)."}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "I will list them (cc-text-beside-call)."},
            {"type": "tool_use", "id": "toolu_01", "name": "Bash",
             "input": {"command": "ls cc-arg-1"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": "a.py b.py (cc-result-1)"},
            {"type": "text", "text": "Now read a.py (cc-user-2)."}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_02", "name": "Read",
             "input": {"file_path": "cc-arg-2.py"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_02", "content": "print(1) (cc-result-2)"}]},
        {"role": "system", "content": "The user switched to plan mode (cc-sys-mid)."},
        {"role": "user", "content": "What does it print? (cc-user-3)"},
    ],
}

# Codex 0.169 (OpenAI Responses): `instructions` plus a developer message, then the user,
# a function call with no text, its output, and the user again.
CODEX = {
    "model": "MODEL", "stream": False,
    "instructions": "You are Codex, a coding agent (cx-instructions).",
    "tools": [{"type": "function", "name": "shell", "description": "Run a command",
               "parameters": {"type": "object",
                              "properties": {"command": {"type": "array",
                                                         "items": {"type": "string"}}},
                              "required": ["command"]}}],
    "input": [
        {"type": "message", "role": "developer",
         "content": [{"type": "input_text", "text": "Sandbox: workspace-write (cx-developer)."}]},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "<environment_context>cx-env</environment_context>"}]},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "Create hello.txt (cx-user-1)."}]},
        {"type": "function_call", "call_id": "call_cx1", "name": "shell",
         "arguments": json.dumps({"command": ["touch", "cx-arg-1.txt"]})},
        {"type": "function_call_output", "call_id": "call_cx1", "output": "done (cx-result-1)"},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "Thanks, and now? (cx-user-2)"}]},
    ],
}

# OpenAI chat: two leading system messages, consecutive user turns, calls with no content
# key, a tool result followed by a user turn.
CHAT_TWO_SYSTEMS = {
    "model": "MODEL",
    "tools": [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}],
    "messages": [
        {"role": "system", "content": "You are helpful (oa-sys-1)."},
        {"role": "system", "content": "Answer briefly (oa-sys-2)."},
        {"role": "user", "content": "Hi (oa-user-1)."},
        {"role": "user", "content": "Weather in Paris? (oa-user-2)"},
        {"role": "assistant", "tool_calls": [
            {"id": "call_w1", "type": "function",
             "function": {"name": "get_weather", "arguments": json.dumps({"city": "oa-arg-Paris"})}}]},
        {"role": "tool", "tool_call_id": "call_w1", "content": "sunny (oa-result-1)"},
        {"role": "user", "content": "And tomorrow? (oa-user-3)"},
    ],
}

# OpenAI chat: an assistant turn that opens the conversation, text beside two parallel
# calls, and a system message after everything else.
CHAT_ASSISTANT_FIRST = {
    "model": "MODEL",
    "tools": CHAT_TWO_SYSTEMS["tools"],
    "messages": [
        {"role": "assistant", "content": "Hello, how can I help? (oa2-greeting)"},
        {"role": "user", "content": "Weather in Rome and Oslo (oa2-user-1)."},
        {"role": "assistant", "content": "Checking both (oa2-text-beside-calls).", "tool_calls": [
            {"id": "call_r", "type": "function",
             "function": {"name": "get_weather", "arguments": json.dumps({"city": "oa2-Rome"})}},
            {"id": "call_o", "type": "function",
             "function": {"name": "get_weather", "arguments": json.dumps({"city": "oa2-Oslo"})}}]},
        {"role": "tool", "tool_call_id": "call_r", "content": "rain (oa2-result-r)"},
        {"role": "tool", "tool_call_id": "call_o", "content": "snow (oa2-result-o)"},
        {"role": "system", "content": "Keep it short (oa2-sys-late)."},
    ],
}

FIXTURES: dict[str, tuple[str, dict[str, Any]]] = {
    "claude-code-2.1": ("anthropic", CLAUDE_CODE),
    "codex-0.169": ("openai-responses", CODEX),
    "chat-two-systems": ("openai", CHAT_TWO_SYSTEMS),
    "chat-assistant-first": ("openai", CHAT_ASSISTANT_FIRST),
}


def texts(body: dict[str, Any]) -> list[str]:
    """Every text a client request carries: system texts, message texts, tool results and
    the string values of call arguments (each fixture text carries a unique marker)."""
    out: list[str] = []

    def walk(value: Any, key: str | None = None) -> None:
        if isinstance(value, str):
            if key in ("text", "content", "instructions", "output"):
                out.append(value)
            elif key == "arguments":
                walk(json.loads(value), "args")
            elif key in ("args", "command", "city", "file_path"):
                out.append(value)
            return
        if isinstance(value, list):
            for v in value:
                walk(v, key if key in ("args", "command") else None)
            return
        if isinstance(value, dict):
            for k, v in value.items():
                if k in ("tools", "model", "type", "role", "id", "call_id", "tool_use_id",
                         "tool_call_id", "name"):
                    continue
                walk(v, k if key not in ("args", "input") else "args")

    walk({k: v for k, v in body.items() if k in ("system", "messages", "input", "instructions")})
    return [t for t in out if t.strip()]
