"""A chat session on the tool loop (`toolrules chat`): the conversation that persists across
user turns, the `::` commands (`::help`, `::model`, ...), switching models mid-session with
the capabilities re-resolved, trust changes, the tool set, saving a transcript.

Nothing here touches a terminal: `cli/_chat.py` reads input and prints what this module
returns, so every behaviour can be tested without one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import sys
import traceback
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .._errors import ToolrulesError
from .._types import Capability, Message, ModelSpec
from ..rules._default import resolve_engine
from ._events import LoopEvent, LoopOutcome, message_dict
from ._executor import ToolExecutor
from ._registry import ToolRegistry

__all__ = [
    "COMMANDS",
    "CapabilityChange",
    "ChatCommand",
    "ChatSession",
    "McpRow",
    "ModelInfo",
    "ModelSpecError",
    "ModelSwitch",
    "ParsedInput",
    "ToolRow",
    "ToolsFileError",
    "TrustChange",
    "build_registry",
    "capability_changes",
    "command_spans",
    "load_tools_file",
    "model_info",
    "parse_input",
    "resolve_model",
]


class ModelSpecError(ToolrulesError, ValueError):
    """A model SPEC that names no usable model (bad syntax, missing script, unknown provider,
    missing key). `source` says where the problem is: "spec" (its shape, the provider or
    options it names: a usage error), "script" (the scripted: file) or "provider" (the
    client could not be set up, e.g. no API key)."""

    def __init__(self, message: str, source: str = "spec"):
        super().__init__(message)
        self.source = source


class ToolsFileError(ToolrulesError, ValueError):
    """A `--tools FILE.py` that cannot be loaded or defines no tools."""


# ---------------------------------------------------------------- `::` commands

@dataclass(frozen=True, slots=True)
class ChatCommand:
    name: str
    usage: str
    help: str


COMMANDS: tuple[ChatCommand, ...] = (
    ChatCommand("help", "::help", "show these commands"),
    ChatCommand("tools", "::tools", "the tools, their trust levels and which are offered"),
    ChatCommand("trust", "::trust [LEVEL]", "show or change the trust level"),
    ChatCommand("model", "::model [SPEC]", "show the model, or switch (capabilities are "
                "resolved again and the changes shown; the conversation continues)"),
    ChatCommand("mcp", "::mcp [add|remove NAME]", "the MCP servers and their tools, or add "
                "(start) or remove (stop) a server's tools"),
    ChatCommand("save", "::save PATH", "write the conversation as JSON messages"),
    ChatCommand("history", "::history", "the conversation so far"),
    ChatCommand("clear", "::clear", "start a new conversation (same model and tools)"),
    ChatCommand("exit", "::exit", "leave (also Ctrl-D)"),
)
_BY_NAME = {c.name: c for c in COMMANDS}
_ALIASES = {"quit": "exit", "q": "exit", "?": "help"}
_COMMAND = re.compile(r"::([A-Za-z?][\w-]*)?")


@dataclass(frozen=True, slots=True)
class ParsedInput:
    """A line the user typed: a `::` command (`command` set, "" for a bare or malformed
    `::`) or a message for the model (`command` None)."""

    command: str | None
    args: str
    raw: str

    @property
    def known(self) -> bool:
        return self.command in _BY_NAME


def parse_input(text: str) -> ParsedInput:
    """`::save notes.json` -> command "save", args "notes.json"; anything not starting with
    `::` is a message (`good::bad` and `a::b` stay text)."""
    raw = text.strip()
    if not raw.startswith("::"):
        return ParsedInput(None, "", raw)
    m = _COMMAND.match(raw)
    name = ((m.group(1) if m else None) or "").lower()
    rest = raw[m.end():] if m else raw[2:]
    if rest and not rest[0].isspace():  # `::foo!x`: not a command word
        return ParsedInput(name + rest.split()[0], "", raw)
    return ParsedInput(_ALIASES.get(name, name), rest.strip(), raw)


def command_spans(line: str) -> list[tuple[str, str]]:
    """How to colour a line as it is typed: (kind, text) pieces covering the line, kind one
    of "text" (a message), "command" (a known `::word`), "unknown" (any other `::word`),
    "args" (what follows a command)."""
    stripped = line.lstrip()
    if not stripped.startswith("::"):
        return [("text", line)] if line else []
    lead = line[: len(line) - len(stripped)]
    m = _COMMAND.match(stripped)
    end = m.end() if m else 2
    word = stripped[:end]
    name = word[2:].lower()
    known = _ALIASES.get(name, name) in _BY_NAME
    out = [("text", lead)] if lead else []
    out.append(("command" if known else "unknown", word))
    if stripped[end:]:
        out.append(("args", stripped[end:]))
    return out


# ---------------------------------------------------------------- models

@dataclass(frozen=True, slots=True)
class ModelInfo:
    """A model as the session resolved it: the SPEC typed, the id its capabilities come
    from, the parsed id and the capability."""

    spec: str
    model_id: str
    parsed: ModelSpec
    capability: Capability

    @property
    def tool_calling(self) -> str:
        cap = self.capability
        return "native" if cap.native_tools else f"emulated ({cap.emulation_style} prompt)"

    @property
    def family(self) -> str:
        version = ".".join(str(v) for v in self.parsed.version)
        return f"{self.parsed.family} {version}".strip()

    def notes(self) -> list[str]:
        """Say so when the id is unknown or a custom model inherits a family."""
        if not self.parsed.known:
            return [f"unknown model {self.model_id!r}: conservative defaults, tools emulated "
                    f"with {self.capability.emulation_style} prompts"]
        if self.parsed.custom:
            return [f"custom model {self.model_id!r}: inherits the {self.family} capabilities"]
        return []

    def rows(self) -> list[tuple[str, str]]:
        """(label, value) lines that describe the model: what `::model` shows."""
        cap = self.capability
        out = [("model", self.model_id), ("spec", self.spec), ("family", self.family),
               ("tool calling", self.tool_calling), ("dialect", _value("dialect", cap.dialect))]
        differs = cap.non_default()
        for f in fields(Capability):
            if f.name in ("native_tools", "emulation_style", "dialect"):
                continue
            if f.name in _ALWAYS_SHOWN or f.name in differs:
                out.append((_label(f.name), _value(f.name, getattr(cap, f.name))))
        return out


@dataclass(frozen=True, slots=True)
class CapabilityChange:
    field: str
    label: str
    old: str
    new: str


@dataclass(frozen=True, slots=True)
class ModelSwitch:
    old: ModelInfo
    new: ModelInfo
    changes: tuple[CapabilityChange, ...]


# What `::model` always shows; other fields only where the rules set them.
_ALWAYS_SHOWN = ("dialect", "parallel_tools", "context_window", "max_output_tokens",
                 "reasoning", "tool_streaming")


def _label(name: str) -> str:
    return {"context_window": "context window", "max_output_tokens": "max output tokens",
            "supports_tool_choice_required": "tool_choice required",
            "supports_forced_tool_choice": "forced tool choice"}.get(name,
                                                                     name.replace("_", " "))


def _value(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None or value == ():
        return "-"
    if isinstance(value, int):
        return f"{value:,} tokens" if name in ("context_window", "max_output_tokens") \
            else str(value)
    text = ", ".join(str(v) for v in value) if isinstance(value, tuple) else str(value)
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."  # a value, not a document


def model_info(spec: str, client: Any, engine: Any = None) -> ModelInfo:
    """Resolve what the loop will use for `client` (its `as_model` when it has one: the id
    whose capabilities and dialect apply)."""
    eng = resolve_engine(engine)
    model_id = getattr(client, "as_model", None) or client.model
    return ModelInfo(spec, model_id, eng.parse_model_id(model_id), eng.capability(model_id))


def capability_changes(old: ModelInfo, new: ModelInfo) -> tuple[CapabilityChange, ...]:
    """What differs between two models: family, native vs emulated (and the emulation
    style), the dialect, then every other capability field in Capability's order."""
    out: list[CapabilityChange] = []
    if old.family != new.family:
        out.append(CapabilityChange("family", "family", old.family, new.family))
    if old.tool_calling != new.tool_calling:
        out.append(CapabilityChange("native_tools", "tool calling", old.tool_calling,
                                    new.tool_calling))
    for f in sorted(fields(Capability), key=lambda f: f.name != "dialect"):
        if f.name in ("native_tools", "emulation_style") or f.name.startswith("turn_"):
            # turn constraints say how a conversation is fitted to the model's chat
            # template (each rewrite is recorded where it happens), not what it can do
            continue
        a, b = getattr(old.capability, f.name), getattr(new.capability, f.name)
        if a != b:
            out.append(CapabilityChange(f.name, _label(f.name), _value(f.name, a),
                                        _value(f.name, b)))
    return tuple(out)


def resolve_model(spec: str, *, engine: Any = None, base_url: str | None = None) -> Any:
    """A model client for SPEC: `scripted:FILE.yaml`, `PROVIDER:MODEL` (through
    `toolrules.connect`, `base_url` for local servers) or `local` (the embedded model).
    Any problem is a ModelSpecError that says what is wrong."""
    from ..clients._connect import connect
    from ..clients._scripted import ScriptedModel

    spec = spec.strip()
    if spec.startswith("scripted:"):
        path = spec[len("scripted:"):]
        if not path:
            raise ModelSpecError("scripted: needs a file (scripted:session.yaml with "
                                 "`model: ID` and `turns: [...]`)", "script")
        try:
            return ScriptedModel.from_file(path, engine=engine)
        except (ToolrulesError, ValueError, TypeError, KeyError, OSError) as exc:
            raise ModelSpecError(f"model {spec!r}: {_text(exc)}", "script") from None
    try:
        if spec == "local":
            return connect("local", engine=engine)
        provider, sep, model = spec.partition(":")
        if not sep or not provider or not model:
            raise ModelSpecError(f"model spec {spec!r} is not PROVIDER:MODEL, local or "
                                 "scripted:FILE.yaml")
        return connect(provider, model=model, base_url=base_url, engine=engine)
    except ModelSpecError:
        raise
    except (ValueError, TypeError, KeyError) as exc:  # the names or options are wrong
        raise ModelSpecError(f"model {spec!r}: {_text(exc)}") from None
    except (ToolrulesError, ImportError, OSError) as exc:  # what they name is not usable
        raise ModelSpecError(f"model {spec!r}: {_text(exc)}", "provider") from None


def _text(exc: BaseException) -> str:
    """The message of an error (a KeyError's str() would quote it)."""
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)


# ---------------------------------------------------------------- tools

def load_tools_file(path: str | Path, *, engine: Any = None) -> ToolRegistry:
    """The tools of a Python file: a `ToolRegistry` named `registry` (its functions
    registered with `@registry.tool`), or the file's only ToolRegistry. The file runs as
    Python code: it is the user's own program, like a conftest.py."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ToolsFileError(f"tools file {str(path)!r} does not exist")
    if p.suffix != ".py":
        raise ToolsFileError(f"tools file {str(path)!r} is not a .py file (write a Python "
                             "file with `registry = toolrules.ToolRegistry()` and "
                             "`@registry.tool` functions)")
    digest = hashlib.sha256(str(p.resolve()).encode()).hexdigest()[:12]
    name = f"toolrules_chat_tools_{digest}"
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None:
        raise ToolsFileError(f"tools file {str(path)!r} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pydantic look their module up
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        line = ""
        for frame in traceback.extract_tb(exc.__traceback__):
            if frame.filename and Path(frame.filename).resolve() == p.resolve():
                line = f":{frame.lineno}"
        raise ToolsFileError(f"{p}{line}: {type(exc).__name__}: {exc}") from None
    registry = getattr(module, "registry", None)
    if not isinstance(registry, ToolRegistry):
        found = [v for v in vars(module).values() if isinstance(v, ToolRegistry)]
        if len(found) != 1:
            raise ToolsFileError(
                f"{p}: defines no ToolRegistry named `registry`" +
                (f" (it has {len(found)} registries)" if found else "") +
                "; write `registry = toolrules.ToolRegistry()` and decorate the tool "
                "functions with `@registry.tool`")
        registry = found[0]
    if not len(registry):
        raise ToolsFileError(f"{p}: `registry` holds no tools (decorate functions with "
                             "`@registry.tool`)")
    return registry


def build_registry(sources: Sequence[str], workspace: str | Path | None, *,
                   engine: Any = None) -> ToolRegistry:
    """The session's tools from `--tools` values: `builtin` (the built-in tools), `none`
    (no tools), or a Python file (its tools replace built-ins of the same name)."""
    from ._builtins import builtin_tools

    sources = list(sources) or ["builtin"]
    if "none" in sources and len(sources) > 1:
        raise ToolsFileError("--tools none cannot be combined with other tool sources")
    registry = ToolRegistry(engine=engine, workspace=workspace)
    for source in sources:
        if source == "none":
            continue
        if source == "builtin":
            registry.include(builtin_tools(workspace, engine=engine))
        else:
            registry.include(load_tools_file(source, engine=engine), replace=True)
    return registry


@dataclass(frozen=True, slots=True)
class ToolRow:
    """A tool as `::tools` lists it: `offered` to the model or not, and why not."""

    name: str
    description: str
    level: str
    kind: str
    offered: bool
    why_not: str | None = None


@dataclass(frozen=True, slots=True)
class McpRow:
    """An MCP server as `::mcp` lists it: added to the session (with its state and tool
    count) or only declared (rules/mcp/NAME.yaml)."""

    name: str
    added: bool
    state: str
    tools: int
    launch: str
    description: str = ""


@dataclass(frozen=True, slots=True)
class TrustChange:
    old: str
    new: str
    offered: tuple[str, ...]
    levels: tuple[str, ...]


# ---------------------------------------------------------------- the session

class ChatSession:
    """A conversation with a model that may call tools: each `turn` runs the tool loop once
    over the whole conversation plus the new user message, and keeps the loop's messages
    (calls and results included) for the next turn.

    `model` a model client, `executor` a ToolExecutor, `spec` how the model was named (for
    `::model`), `base_url` reused when the model is switched; `max_rounds`, `stream` and
    other keyword arguments go to each ToolLoop.
    """

    def __init__(self, model: Any, executor: ToolExecutor, *, spec: str | None = None,
                 engine: Any = None, system: str | None = None, stream: bool = True,
                 base_url: str | None = None, max_rounds: int | None = None,
                 **loop_options: Any):
        self.engine = resolve_engine(engine if engine is not None else executor.engine)
        self.model = model
        self.executor = executor
        self.system = system
        self.stream = stream
        self.base_url = base_url
        self.max_rounds = max_rounds
        self.loop_options = loop_options
        self.info = model_info(spec or str(model.model), model, self.engine)
        self.messages: list[Message] = []
        self.last_outcome: LoopOutcome | None = None
        self.clear()

    @property
    def spec(self) -> str:
        return self.info.spec

    # ------------------------------------------------------------ talking

    async def turn(self, text: str) -> AsyncIterator[LoopEvent]:
        """The loop's events for one user message. The conversation grows only when the
        loop ends (an interrupted or failed turn leaves it as it was)."""
        from ._loop import ToolLoop

        loop = ToolLoop(self.model, self.executor, self.max_rounds, engine=self.engine,
                        **self.loop_options)
        task = [*self.messages, Message(role="user", content=text)]
        async for event in loop.events(task, stream=self.stream):
            if event.outcome is not None:
                self.messages = list(event.outcome.messages)
                self.last_outcome = event.outcome
            yield event

    def clear(self) -> None:
        """A new conversation: only the system prompt stays."""
        self.messages = [Message(role="system", content=self.system)] if self.system else []
        self.last_outcome = None

    # ------------------------------------------------------------ commands' state changes

    def set_trust(self, level: str) -> TrustChange:
        """Change the trust level (a level of the session's policy); the tools offered from
        the next model turn on follow it."""
        policy = self.executor.policy
        if level not in policy.levels:
            raise ValueError(f"unknown trust level {level!r}; the levels of policy "
                             f"{policy.id!r} are {', '.join(policy.levels)}")
        old = self.executor.trust
        self.executor.trust = level
        return TrustChange(old, level, tuple(t.name for t in self.executor.visible_tools()),
                           tuple(policy.levels))

    def switch_model(self, spec: str) -> ModelSwitch:
        """Use another model from the next turn on (the conversation stays): the new
        model's capabilities are resolved and compared with the old one's.
        On error (ModelSpecError) the session keeps its model."""
        client = resolve_model(spec, engine=self.engine, base_url=self.base_url)
        new = model_info(spec, client, self.engine)
        old = self.info
        self.model, self.info = client, new
        return ModelSwitch(old, new, capability_changes(old, new))

    def tool_rows(self) -> list[ToolRow]:
        """Every registered tool (hidden ones aside), in registration order."""
        ex = self.executor
        offered = {t.name for t in ex.visible_tools()}
        rows = []
        for entry in ex.registry:
            if entry.hidden:
                continue
            level = ex.level_of(entry)
            why = None
            if entry.name not in offered:
                if entry.name in ex.denied:
                    why = "denied"
                elif ex.allowed is not None and entry.name not in ex.allowed:
                    why = "not in --allow"
                else:
                    why = f"needs trust {level}"
            first = (entry.tool.description or "").strip().split("\n", 1)[0]
            rows.append(ToolRow(entry.name, first, level, entry.kind, entry.name in offered,
                                why))
        return rows

    # ------------------------------------------------------------ MCP servers

    def mcp_rows(self) -> list[McpRow]:
        """The servers added to this session, then the declared ones not added."""
        from ..mcp import server_names, server_spec

        registry = self.executor.registry
        servers = registry.mcp_servers()
        counts: dict[str, int] = {}
        for name in registry.names():
            info = registry.mcp_tool(name)
            if info is not None:
                counts[info.server] = counts.get(info.server, 0) + 1
        rows = [McpRow(n, True, s.state, counts.get(n, 0), s.describe(), s.spec.description)
                for n, s in servers.items()]
        for n in server_names(self.engine):
            if n not in servers:
                spec = server_spec(n, self.engine)
                rows.append(McpRow(n, False, "declared", 0, spec.display(),
                                   spec.description))
        return rows

    def add_mcp(self, name: str) -> list[str]:
        """Start declared server `name` and offer its tools from the next turn on; the
        names of its tools. An unknown name or a server that fails raises (McpError,
        UnknownRuleError) and leaves nothing running."""
        registry = self.executor.registry
        registry.add_mcp(name)
        try:
            registry.start_mcp()
        except BaseException:
            if name in registry.mcp_servers():
                registry.remove_mcp(name)
            raise
        return [n for n in registry.names()
                if (info := registry.mcp_tool(n)) is not None and info.server == name]

    def remove_mcp(self, name: str) -> None:
        """Stop server `name`; its tools are no longer offered (KeyError if not added)."""
        self.executor.registry.remove_mcp(name)

    def close(self) -> None:
        """Stop the session's MCP servers."""
        self.executor.registry.close()

    # ------------------------------------------------------------ transcript

    def transcript(self) -> list[dict[str, Any]]:
        """The conversation as JSON-ready messages (role, content, tool_calls with id, name
        and arguments, tool_call_id ...), readable back with `coerce_messages`."""
        return [message_dict(m) for m in self.messages]

    def save(self, path: str | Path) -> tuple[Path, int]:
        """Write the transcript as a JSON list of messages; (path, bytes written)."""
        p = Path(path).expanduser()
        data = json.dumps(self.transcript(), ensure_ascii=False, indent=2, default=str) + "\n"
        p.write_text(data, encoding="utf-8")
        return p, len(data.encode())
