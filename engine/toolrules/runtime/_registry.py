"""ToolRegistry: the tools an application offers, each with its handler and execution
metadata (trust tier, read/write class, hidden, confirmation).

Tools come from Python callables (schema from type hints through pydantic, descriptions
from the docstring), from `Tool` objects or OpenAI-format dicts plus a handler, and from
YAML files (skills: a tool described in YAML) whose handler is a registered Python callable or an argv
template run like `run_command`.
"""

from __future__ import annotations

import inspect
import re
import threading
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._types import Tool, coerce_tool
from ..calls._engineering import ToolClassification, classify_tool
from ..calls._policy import provider_name_patterns
from ..rules._default import resolve_engine
from ._context import ToolContext

__all__ = ["RegisteredTool", "ToolRegistry", "parse_docstring"]

KINDS = ("read", "write")


@dataclass(frozen=True)
class RegisteredTool:
    """A tool, its handler and how it may run."""

    tool: Tool
    handler: Callable[..., Any]
    tier: str | None = None
    """The trust level it needs (a policy level naming the tool wins)."""
    kind: str = "write"
    """read (may run in parallel with other reads) or write."""
    hidden: bool = False
    """Never offered to the model; only `execute(..., origin="app")` may call it."""
    requires_confirmation: bool = False
    paths: tuple[str, ...] = ()
    """Arguments that are workspace paths (checked by the policy before the call runs)."""
    command: str | None = None
    """The argument holding a command line (checked against the command allowlist)."""
    context: str | None = None
    """The handler parameter that receives the ToolContext."""
    arguments_model: Any = None
    """The pydantic model built from the signature (turns JSON into typed values)."""
    timeout: float | None = None

    @property
    def name(self) -> str:
        return self.tool.name

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.handler)

    def bind(self, arguments: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        """The keyword arguments for the handler: typed values, plus the context."""
        kwargs: dict[str, Any]
        if self.arguments_model is not None:
            model = self.arguments_model.model_validate(dict(arguments))
            kwargs = {k: getattr(model, k) for k in type(model).model_fields}
        else:
            kwargs = dict(arguments)
        if self.context:
            kwargs[self.context] = ctx
        return kwargs


# ---------------------------------------------------------------- docstrings

_GOOGLE_PARAMS = re.compile(r"^(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|"
                            r"Other Parameters):\s*$")
_GOOGLE_OTHER = re.compile(r"^(Returns?|Yields?|Raises|Attributes|See Also|Todo):\s*$")
_NUMPY_HEADER = re.compile(r"^-{3,}\s*$")
_NUMPY_PARAMS = ("Parameters", "Other Parameters", "Keyword Arguments")
_NUMPY_OTHER = ("Returns", "Return", "Yields", "Raises", "Attributes", "See Also", "Warns")
_REST_FIELD = re.compile(r"^:(param|parameter|arg|argument|key|keyword)\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")
_REST_OTHER = re.compile(r"^:(type|rtype|returns?|raises?|yields?|var|ivar|cvar)\b[^:]*:")
_GOOGLE_ITEM = re.compile(r"^(\*{0,2}\w+)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")
_NUMPY_ITEM = re.compile(r"^(\w+)\s*(?::\s*(.*))?$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description, parameter name -> description) from a Google, NumPy or reST docstring.

    The description is the text outside parameter, return and raise sections."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    desc: list[str] = []
    params: dict[str, str] = {}
    i = 0
    n = len(lines)
    while i < n:
        line = lines[i]
        stripped = line.strip()
        # NumPy: a title line underlined with dashes
        if i + 1 < n and _NUMPY_HEADER.match(lines[i + 1].strip()) and stripped:
            title = stripped
            i += 2
            block: list[str] = []
            while i < n and not (i + 1 < n and _NUMPY_HEADER.match(lines[i + 1].strip())
                                 and lines[i].strip()):
                block.append(lines[i])
                i += 1
            if title in _NUMPY_PARAMS:
                _numpy_items(block, params)
            elif title not in _NUMPY_OTHER:
                desc.extend([title, *block])
            continue
        if _GOOGLE_PARAMS.match(stripped) or _GOOGLE_OTHER.match(stripped):
            is_params = bool(_GOOGLE_PARAMS.match(stripped))
            base = _indent(line)
            i += 1
            block = []
            while i < n and (not lines[i].strip() or _indent(lines[i]) > base):
                block.append(lines[i])
                i += 1
            if is_params:
                _google_items(block, params)
            continue
        m = _REST_FIELD.match(stripped)
        if m or _REST_OTHER.match(stripped):
            text = [m.group(3)] if m else []
            i += 1
            while i < n and lines[i].strip() and _indent(lines[i]) > _indent(line):
                text.append(lines[i].strip())
                i += 1
            if m:
                params[m.group(2)] = " ".join(t for t in text if t).strip()
            continue
        desc.append(line)
        i += 1
    while desc and not desc[-1].strip():
        desc.pop()
    return "\n".join(desc).strip(), params


def _google_items(block: list[str], params: dict[str, str]) -> None:
    lines = [ln for ln in block if ln.strip()]
    if not lines:
        return
    base = min(_indent(ln) for ln in lines)
    name: str | None = None
    for ln in lines:
        if _indent(ln) == base:
            m = _GOOGLE_ITEM.match(ln.strip())
            name = m.group(1).lstrip("*") if m else None
            if name is not None and m is not None:
                params[name] = m.group(3).strip()
        elif name is not None:
            params[name] = (params[name] + " " + ln.strip()).strip()


def _numpy_items(block: list[str], params: dict[str, str]) -> None:
    lines = [ln for ln in block if ln.strip()]
    if not lines:
        return
    base = min(_indent(ln) for ln in lines)
    names: list[str] = []
    for ln in lines:
        if _indent(ln) == base:
            names = []
            head = ln.strip().split(":", 1)[0]
            for part in head.split(","):
                m = _NUMPY_ITEM.match(part.strip())
                if m:
                    names.append(m.group(1))
                    params.setdefault(m.group(1), "")
        else:
            for nm in names:
                params[nm] = (params[nm] + " " + ln.strip()).strip()


# ---------------------------------------------------------------- schemas from signatures

def _strip_titles(node: Any, in_properties: bool = False) -> Any:
    """pydantic titles every model and field; a model gains nothing from them. Property
    *names* called `title` are kept."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for k, v in node.items():
            if k == "title" and not in_properties and isinstance(v, str):
                continue
            out[k] = _strip_titles(v, in_properties=(k in ("properties", "$defs")
                                                     and not in_properties))
        return out
    if isinstance(node, list):
        return [_strip_titles(v) for v in node]
    return node


def schema_from_callable(fn: Callable[..., Any], name: str, param_docs: Mapping[str, str]
                         ) -> tuple[dict[str, Any], Any, str | None]:
    """(JSON Schema, pydantic model, context parameter) for `fn`'s signature."""
    try:
        from pydantic import ConfigDict, Field, create_model
    except ImportError as exc:  # pragma: no cover - pydantic is in the `tools` extra
        raise ImportError("tools from Python callables need pydantic: "
                          "pip install 'toolrules[tools]'") from exc
    sig = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise TypeError(f"tool {name!r}: cannot read the type hints of "
                        f"{getattr(fn, '__qualname__', fn)!r}: {exc}") from exc
    fields: dict[str, Any] = {}
    context: str | None = None
    for pname, p in sig.parameters.items():
        ann = hints.get(pname, Any)
        if ann is ToolContext:
            context = pname
            continue
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"tool {name!r}: *{pname} / **{pname} cannot be described as "
                            "tool parameters; name each parameter")
        if p.kind is p.POSITIONAL_ONLY:
            raise TypeError(f"tool {name!r}: positional-only parameter {pname!r}; tool "
                            "arguments are passed by name")
        if pname.startswith("_"):
            raise TypeError(f"tool {name!r}: parameter {pname!r} starts with an underscore")
        default = ... if p.default is p.empty else p.default
        fields[pname] = (ann, Field(default, description=param_docs.get(pname) or None))
    model_name = "".join(w.capitalize() for w in re.split(r"[^A-Za-z0-9]+", name)) or "Tool"
    model = create_model(f"{model_name}Arguments", __config__=ConfigDict(extra="forbid"),
                         **fields)
    schema = _strip_titles(model.model_json_schema())
    schema.setdefault("properties", {})
    schema["type"] = "object"
    return schema, model, context


# ---------------------------------------------------------------- the registry

class ToolRegistry:
    """The tools an application offers and their handlers.

        registry = ToolRegistry()

        @registry.tool
        def get_weather(city: str, unit: Literal["c", "f"] = "c") -> dict:
            '''Current weather for a city.

            Args:
                city: City name, e.g. "Paris".
                unit: c for Celsius, f for Fahrenheit.
            '''
    """

    def __init__(self, *, engine: Any = None, workspace: str | Path | None = None):
        self._engine = engine
        self.workspace = Path(workspace) if workspace is not None else None
        self._tools: dict[str, RegisteredTool] = {}
        self._handlers: dict[str, Callable[..., Any]] = {}
        self._mcp: dict[str, Any] = {}            # server name -> McpServer
        self._mcp_pending: list[str] = []         # added, tools not registered yet
        self._mcp_tools: dict[str, Any] = {}      # registry name -> McpTool
        self._mcp_lock = threading.RLock()

    @property
    def engine(self) -> Any:
        return resolve_engine(self._engine)

    # ------------------------------------------------------------ registering

    def tool(self, fn: Callable[..., Any] | None = None, *, name: str | None = None,
             description: str | None = None, tier: str | None = None, kind: str | None = None,
             hidden: bool = False, requires_confirmation: bool = False,
             paths: Sequence[str] = (), timeout: float | None = None) -> Any:
        """Register a function as a tool (`@registry.tool` or `@registry.tool(...)`).

        The JSON Schema comes from the type hints (pydantic), the description and the
        parameter descriptions from the docstring (Google, NumPy or reST style). A
        parameter annotated `ToolContext` receives the call's context instead."""

        def register(func: Callable[..., Any]) -> Callable[..., Any]:
            tool_name = str(name or getattr(func, "__name__", ""))
            desc, param_docs = parse_docstring(inspect.getdoc(func))
            schema, model, context = schema_from_callable(func, tool_name, param_docs)
            tool = Tool(name=tool_name, description=description if description is not None
                        else desc, parameters=schema)
            self._register(RegisteredTool(
                tool=tool, handler=func, tier=tier, kind=self._kind(tool, kind), hidden=hidden,
                requires_confirmation=requires_confirmation, paths=tuple(paths),
                context=context, arguments_model=model, timeout=timeout))
            return func

        if fn is not None:
            return register(fn)
        return register

    def add(self, tool: Any, handler: Callable[..., Any], *, tier: str | None = None,
            kind: str | None = None, hidden: bool = False, requires_confirmation: bool = False,
            paths: Sequence[str] = (), command: str | None = None, context: str | None = None,
            timeout: float | None = None, replace: bool = False) -> RegisteredTool:
        """Register a `Tool` (or an OpenAI-format / bare function dict) with its handler,
        called as `handler(**arguments)` (plus `context=` when `context` names the
        parameter that takes the ToolContext)."""
        if not callable(handler):
            raise TypeError(f"the handler of {getattr(tool, 'name', tool)!r} is not callable")
        t = coerce_tool(tool)
        if not isinstance(t.parameters, Mapping) or t.parameters.get("type", "object") != "object":
            raise ValueError(f"tool {t.name!r}: parameters must be an object schema")
        if context is None:
            for pname, p in _signature_params(handler):
                if p.annotation is ToolContext or p.annotation == "ToolContext":
                    context = pname
        entry = RegisteredTool(tool=t, handler=handler, tier=tier, kind=self._kind(t, kind),
                               hidden=hidden, requires_confirmation=requires_confirmation,
                               paths=tuple(paths), command=command, context=context,
                               timeout=timeout)
        self._register(entry, replace=replace)
        return entry

    def add_mcp(self, server: Any = None, *, command: str | Sequence[str] | None = None,
                url: str | None = None, name: str | None = None,
                headers: Mapping[str, str] | None = None, **options: Any) -> Any:
        """Offer the tools of an MCP server (needs the `mcp` extra). Returns its McpServer.

            registry.add_mcp("filesystem")           # rules/mcp/filesystem.yaml (overlays too)
            registry.add_mcp(command="npx -y @modelcontextprotocol/server-everything",
                             name="everything")
            registry.add_mcp(url="http://127.0.0.1:8931/mcp", name="remote",
                             headers={"Authorization": "Bearer ${MCP_TOKEN}"})

        The server starts when its tools are first needed (listing or calling), is reused
        for every call and stops with `close()`. Its tools are named `<namespace>_<tool>`,
        their schemas normalized and their trust level and read/write class taken from
        their annotations (rules/mcp.yaml) or the server rule's `tools:` entries; every
        call runs through the ToolExecutor like any tool. `options`: env, cwd, namespace,
        timeout, startup_seconds, restarts, include, exclude."""
        from ..mcp import McpServer, McpServerSpec, command_spec, server_spec, url_spec
        from ..mcp._rules import with_options

        if isinstance(server, McpServerSpec):
            spec = with_options(server, **options)
        elif isinstance(server, str) and command is None and url is None:
            spec = with_options(server_spec(server, self.engine), **options)
        elif command is not None and url is None and server is None:
            spec = command_spec(command, name=name, source="Python", **options)
        elif url is not None and command is None and server is None:
            spec = url_spec(url, name=name or "remote", headers=headers, **options)
        else:
            raise TypeError("add_mcp takes a declared server name, an McpServerSpec, "
                            "command=... or url=... (exactly one)")
        with self._mcp_lock:
            if spec.name in self._mcp:
                raise ValueError(f"MCP server {spec.name!r} is already added; pass name= to "
                                 "add another one")
            mcp = McpServer(spec, workspace=self.workspace, engine=self._engine)
            self._mcp[spec.name] = mcp
            self._mcp_pending.append(spec.name)
        return mcp

    def remove_mcp(self, name: str) -> None:
        """Stop MCP server `name` and drop its tools."""
        with self._mcp_lock:
            server = self._mcp.pop(name, None)
            if server is None:
                raise KeyError(f"no MCP server {name!r} in this registry (have: "
                               f"{', '.join(self._mcp) or 'none'})")
            if name in self._mcp_pending:
                self._mcp_pending.remove(name)
            for tool_name, info in list(self._mcp_tools.items()):
                if info.server == name:
                    self.remove(tool_name)
        server.close()

    def mcp_servers(self) -> dict[str, Any]:
        """Server name -> McpServer, for the servers added to this registry."""
        return dict(self._mcp)

    def mcp_tool(self, name: str) -> Any:
        """The McpTool behind registry tool `name` (server, its own tool name, what decided
        its trust level), or None for other tools."""
        self._materialize()
        return self._mcp_tools.get(name)

    def start_mcp(self) -> None:
        """Start every added MCP server now and register its tools (otherwise this happens
        when the tools are first needed). Raises McpError naming the server that failed."""
        self._materialize()

    def _materialize(self) -> None:
        if not self._mcp_pending:
            return
        from ..mcp._client import CONTEXT_PARAMETER

        with self._mcp_lock:
            while self._mcp_pending:
                name = self._mcp_pending[0]
                server = self._mcp[name]
                try:
                    infos = server.tools(taken=set(self._tools))
                except BaseException:
                    self._mcp_pending.pop(0)
                    self._mcp.pop(name, None)
                    server.close()
                    raise
                self._mcp_pending.pop(0)
                for info in infos:
                    self._register(RegisteredTool(
                        tool=info.tool, handler=server.handler(info), tier=info.tier,
                        kind=info.kind, hidden=info.hidden,
                        requires_confirmation=info.requires_confirmation, paths=info.paths,
                        context=CONTEXT_PARAMETER, timeout=info.timeout))
                    self._mcp_tools[info.name] = info

    def close(self) -> None:
        """Stop every MCP server of this registry (their tools fail after this)."""
        with self._mcp_lock:
            servers = list(self._mcp.values())
            self._mcp_pending.clear()
        for server in servers:
            server.close()

    def __enter__(self) -> ToolRegistry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def handler(self, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Name a Python callable for YAML tool files (`handler: NAME`)."""

        def register(func: Callable[..., Any]) -> Callable[..., Any]:
            self._handlers[name] = func
            return func

        return register

    def include(self, other: ToolRegistry, *, replace: bool = False) -> None:
        """Add every tool of `other` (e.g. the built-in tools next to your own)."""
        for entry in other:
            self._register(entry, replace=replace)
        if self.workspace is None:
            self.workspace = other.workspace

    def load_yaml(self, path: str | Path, handlers: Mapping[str, Callable[..., Any]] | None = None
                  ) -> list[str]:
        """Register the tools of a YAML file; returns their names.

        Each entry has `name`, `description`, `parameters` (JSON Schema) and either
        `handler: NAME` (a callable registered with `registry.handler(NAME)` or passed in
        `handlers`; YAML never names importable code) or `command: [argv, "{param}"]` (an
        argv template: each `{param}` is replaced by that argument's text, no shell; it
        runs through the policy's command allowlist and limits like `run_command`).
        Optional: tier, kind, hidden, requires_confirmation, paths, timeout."""
        from ._commands import command_template_handler

        p = Path(path)
        import yaml  # only for YAML tool files

        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise ValueError(f"{p}: cannot read tool file: {exc}") from exc
        entries = data.get("tools") if isinstance(data, Mapping) else data
        if not isinstance(entries, list):
            raise ValueError(f"{p}: expected `tools:` with a list of tool definitions")
        known = {**self._handlers, **(handlers or {})}
        names: list[str] = []
        for i, e in enumerate(entries):
            where = f"{p}: tools[{i}]"
            if not isinstance(e, Mapping) or not isinstance(e.get("name"), str):
                raise ValueError(f"{where}: each tool needs a `name`")
            where = f"{p}: tool {e['name']!r}"
            unknown = set(e) - {"name", "description", "parameters", "handler", "command",
                                "tier", "kind", "hidden", "requires_confirmation", "paths",
                                "timeout"}
            if unknown:
                raise ValueError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
            params = e.get("parameters") or {"type": "object", "properties": {}}
            if not isinstance(params, Mapping):
                raise ValueError(f"{where}: parameters must be a JSON Schema object")
            has_handler, has_command = "handler" in e, "command" in e
            if has_handler == has_command:
                raise ValueError(f"{where}: give exactly one of `handler` or `command`")
            paths = tuple(e.get("paths") or ())
            if has_handler:
                func = known.get(e["handler"])
                if func is None:
                    raise ValueError(f"{where}: handler {e['handler']!r} is not registered; "
                                     "register it with registry.handler(NAME) or pass "
                                     "handlers={NAME: function}")
                context = None
            else:
                argv = e["command"]
                if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
                    raise ValueError(f"{where}: command must be a list of strings (an argv "
                                     "template such as [wc, -l, '{path}'])")
                props = set(params.get("properties") or {})
                for a in argv:
                    for ref in re.findall(r"\{(\w+)\}", a):
                        if ref not in props:
                            raise ValueError(f"{where}: command refers to {{{ref}}}, which is "
                                             "not a parameter")
                func = command_template_handler(tuple(argv))
                context = "context"
            tool = Tool(name=e["name"], description=str(e.get("description") or "").strip(),
                        parameters=dict(params))
            self._register(RegisteredTool(
                tool=tool, handler=func,
                tier=e.get("tier") or ("shell" if has_command else None),
                kind=self._kind(tool, e.get("kind")), hidden=bool(e.get("hidden", False)),
                requires_confirmation=bool(e.get("requires_confirmation", False)), paths=paths,
                context=context, timeout=e.get("timeout")))
            names.append(tool.name)
        return names

    def _kind(self, tool: Tool, kind: str | None) -> str:
        if kind is not None:
            if kind not in KINDS:
                raise ValueError(f"tool {tool.name!r}: kind must be read or write, not {kind!r}")
            return kind
        found = classify_tool(tool, engine=self._engine)
        # Unclassified tools run alone: parallel runs are only for known reads.
        return "read" if found is ToolClassification.READ else "write"

    def _register(self, entry: RegisteredTool, replace: bool = False) -> None:
        name = entry.tool.name
        for pid, pattern in provider_name_patterns(self.engine):
            if not pattern.fullmatch(name):
                raise ValueError(f"tool name {name!r} is not accepted by provider {pid} (must "
                                 f"match {pattern.pattern!r}); use letters, digits, _ and -, "
                                 "e.g. facts_commit instead of facts.commit")
        if name in self._tools and not replace:
            raise ValueError(f"tool {name!r} is already registered (pass replace=True to "
                             "replace it)")
        self._tools[name] = entry

    # ------------------------------------------------------------ reading

    def get(self, name: str) -> RegisteredTool | None:
        self._materialize()
        return self._tools.get(name)

    def names(self) -> list[str]:
        self._materialize()
        return list(self._tools)

    def tools(self, include_hidden: bool = False) -> list[Tool]:
        """The tool definitions, in registration order (hidden ones only when asked)."""
        self._materialize()
        return [e.tool for e in self._tools.values() if include_hidden or not e.hidden]

    def remove(self, name: str) -> None:
        self._tools.pop(name, None)
        self._mcp_tools.pop(name, None)

    def __contains__(self, name: object) -> bool:
        self._materialize()
        return name in self._tools

    def __iter__(self) -> Iterator[RegisteredTool]:
        self._materialize()
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        self._materialize()
        return len(self._tools)

    def __repr__(self) -> str:
        return f"<ToolRegistry {', '.join(self._tools) or '(empty)'}>"


def _signature_params(fn: Callable[..., Any]) -> list[tuple[str, inspect.Parameter]]:
    try:
        return list(inspect.signature(fn).parameters.items())
    except (TypeError, ValueError):
        return []
