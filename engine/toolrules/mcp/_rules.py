"""MCP servers (rules/mcp/*.yaml) and the MCP table (rules/mcp.yaml) compiled into values,
and lint's cross-checks for both. Nothing here imports the MCP SDK: loading and linting
rules never needs it."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .._errors import McpError, UnknownRuleError
from ..providers._transforms import Pipeline, compile_pipeline, validate_step
from ..rules._default import resolve_engine
from ..rules._loader import RuleFile, RuleSet
from ..rules._schemas_mcp import HINTS

__all__ = ["Launch", "McpRules", "McpServerSpec", "ToolClass", "ToolOverride", "check_rules",
           "command_spec", "mcp_rules", "server_names", "server_spec", "url_spec"]

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_BRACED = re.compile(r"(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NAME = re.compile(r"[^A-Za-z0-9_-]+")


# ---------------------------------------------------------------- servers

@dataclass(frozen=True, slots=True)
class ToolOverride:
    """What a server rule says about one of its tools (beats the annotations)."""

    tier: str | None = None
    kind: str | None = None
    paths: tuple[str, ...] = ()
    hidden: bool = False
    requires_confirmation: bool = False
    timeout: float | None = None
    description: str | None = None


@dataclass(frozen=True, slots=True)
class _Transport:
    """How a server is started (command, args, env, cwd: stdio) or reached (url, headers:
    streamable HTTP)."""

    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def transport(self) -> str:
        return "http" if self.url is not None else "stdio"

    def display(self) -> str:
        """The command line or the URL (header and variable values are never shown)."""
        if self.url is not None:
            return self.url
        return shlex.join([self.command or "", *self.args])


@dataclass(frozen=True, slots=True)
class Launch(_Transport):
    """A server's transport with every placeholder filled in: what is started or reached."""


@dataclass(frozen=True, kw_only=True)
class McpServerSpec(_Transport):
    """An MCP server as a rule (or a command line, or Python) declares it: its transport
    as written (`display()` shows the placeholders), `launch()` fills them in."""

    name: str
    description: str = ""
    namespace: str = ""
    startup_seconds: float | None = None
    timeout: float | None = None
    restarts: int | None = None
    include: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()
    tools: Mapping[str, ToolOverride] = field(default_factory=dict)
    source: str = ""
    """Where it was declared: a rule file, `--mcp-command`, Python."""

    def __post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise McpError(f"MCP server {self.name!r}: give exactly one of a command (stdio) "
                           "or a url (streamable HTTP)", server=self.name)
        if not self.namespace:
            object.__setattr__(self, "namespace", self.name)

    def launch(self, workspace: str | Path | None = None,
               environ: Mapping[str, str] | None = None) -> Launch:
        """The transport with `{workspace}` and `${VAR}` filled in; a variable that is not
        set, or `{workspace}` without a workspace, is an McpError naming the server."""
        env = os.environ if environ is None else environ
        ws = str(Path(workspace).expanduser().resolve()) if workspace is not None else None

        def fill(text: str, where: str) -> str:
            def var(m: re.Match[str]) -> str:
                value = env.get(m.group(1))
                if value is None:
                    raise McpError(f"MCP server {self.name!r}: {where} needs the environment "
                                   f"variable {m.group(1)}, which is not set", server=self.name)
                return value

            def braced(m: re.Match[str]) -> str:
                if m.group(1) != "workspace":
                    return m.group(0)
                if ws is None:
                    raise McpError(f"MCP server {self.name!r}: {where} uses {{workspace}} and "
                                   "this session has no workspace (pass --workspace DIR)",
                                   server=self.name)
                return ws

            return _BRACED.sub(braced, _VAR.sub(var, text))

        if self.url is not None:
            return Launch(url=fill(self.url, "url"),
                          headers={k: fill(v, f"header {k}") for k, v in self.headers.items()})
        return Launch(command=fill(self.command or "", "command"),
                      args=tuple(fill(a, "args") for a in self.args),
                      env={k: fill(v, f"env {k}") for k, v in self.env.items()},
                      cwd=fill(self.cwd, "cwd") if self.cwd is not None else None)


def _override(data: Mapping[str, Any]) -> ToolOverride:
    timeout = data.get("timeout")
    return ToolOverride(tier=data.get("tier"), kind=data.get("kind"),
                        paths=tuple(data.get("paths") or ()),
                        hidden=bool(data.get("hidden", False)),
                        requires_confirmation=bool(data.get("requires_confirmation", False)),
                        timeout=float(timeout) if timeout is not None else None,
                        description=data.get("description"))


def _spec_from_data(name: str, data: Mapping[str, Any], source: str) -> McpServerSpec:
    def num(key: str) -> float | None:
        value = data.get(key)
        return float(value) if value is not None else None

    include = data.get("include")
    return McpServerSpec(
        name=name, description=str(data.get("description") or "").strip(),
        command=data.get("command"), args=tuple(str(a) for a in data.get("args") or ()),
        env={str(k): str(v) for k, v in (data.get("env") or {}).items()},
        cwd=data.get("cwd"), url=data.get("url"),
        headers={str(k): str(v) for k, v in (data.get("headers") or {}).items()},
        namespace=str(data.get("namespace") or name), startup_seconds=num("startup_seconds"),
        timeout=num("timeout"),
        restarts=int(data["restarts"]) if data.get("restarts") is not None else None,
        include=tuple(include) if include is not None else None,
        exclude=tuple(data.get("exclude") or ()),
        tools={str(k): _override(v or {}) for k, v in (data.get("tools") or {}).items()},
        source=source)


def server_names(engine: Any = None) -> list[str]:
    """The ids of every declared MCP server (bundled and overlays)."""
    return resolve_engine(engine).ruleset.ids("mcp")


def server_spec(name: str, engine: Any = None) -> McpServerSpec:
    """The server `name` as its rule declares it (rules/mcp/<name>.yaml, overlays included)."""
    eng = resolve_engine(engine)
    rf = eng.ruleset.get("mcp", name)
    if rf is None or not isinstance(rf.data, Mapping):
        raise UnknownRuleError("MCP server", name, eng.ruleset.ids("mcp"))
    from ..rules._yaml import plain

    return _spec_from_data(name, plain(rf.data), rf.display)


def default_name(argv: Sequence[str]) -> str:
    """A server name from its command line: the program's file name, made name-safe."""
    prog = Path(argv[0]).name if argv else "mcp"
    stem = prog.split(".", 1)[0] or prog
    safe = _NAME.sub("-", stem).strip("-_") or "mcp"
    if not safe[0].isalpha():
        safe = "mcp-" + safe
    return safe[:32]


def command_spec(command: str | Sequence[str], *, name: str | None = None,
                 env: Mapping[str, str] | None = None, cwd: str | None = None,
                 source: str = "command line", **options: Any) -> McpServerSpec:
    """A server started by a command line (a string split like a shell would, or argv)."""
    try:
        argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
    except ValueError as exc:
        raise McpError(f"MCP server command {command!r} cannot be split into words: {exc}",
                       server=name) from None
    if not argv:
        raise McpError("an MCP server command is empty: give the program and its arguments, "
                       "e.g. \"npx -y @modelcontextprotocol/server-everything\"", server=name)
    return McpServerSpec(name=name or default_name(argv), command=argv[0], args=tuple(argv[1:]),
                         env=dict(env or {}), cwd=cwd, source=source, **options)


def url_spec(url: str, *, name: str, headers: Mapping[str, str] | None = None,
             source: str = "Python", **options: Any) -> McpServerSpec:
    """A server reached over streamable HTTP."""
    if not url.startswith(("http://", "https://")):
        raise McpError(f"MCP server {name!r}: url {url!r} is not an http:// or https:// URL",
                       server=name)
    return McpServerSpec(name=name, url=url, headers=dict(headers or {}), source=source,
                         **options)


def with_options(spec: McpServerSpec, **changes: Any) -> McpServerSpec:
    return replace(spec, **{k: v for k, v in changes.items() if v is not None})


# ---------------------------------------------------------------- the table

@dataclass(frozen=True, slots=True)
class ToolClass:
    """One entry of rules/mcp.yaml `annotations.classes`."""

    name: str
    when: Mapping[str, bool]
    tier: str
    kind: str


@dataclass(frozen=True)
class McpRules:
    """rules/mcp.yaml, compiled."""

    defaults: Mapping[str, bool]
    classes: tuple[ToolClass, ...]
    pipeline: Pipeline
    startup_seconds: float
    restarts: int
    stderr_lines: int
    max_tools: int
    serve_name: str
    serve_instructions: str
    serve_hints: tuple[tuple[Mapping[str, str], Mapping[str, bool]], ...]

    def hints(self, annotations: Mapping[str, Any] | None) -> dict[str, bool]:
        """Every hint's value: the server's, else the default."""
        given = annotations or {}
        return {h: bool(given[h]) if isinstance(given.get(h), bool) else bool(self.defaults[h])
                for h in HINTS}

    def classify(self, annotations: Mapping[str, Any] | None) -> ToolClass:
        """The first class whose `when` holds for these annotations."""
        values = self.hints(annotations)
        for c in self.classes:
            if all(values.get(k) == v for k, v in c.when.items()):
                return c
        raise McpError("rules/mcp.yaml: no annotations class holds for "
                       f"{values}; end `classes` with an entry `when: {{}}`")

    def served_hints(self, *, kind: str, level: str, name: str) -> dict[str, bool]:
        """The annotations a tool carries when toolrules serves it."""
        facts = {"kind": kind, "level": level, "name": name}
        for when, hints in self.serve_hints:
            if all(facts.get(k) == v for k, v in when.items()):
                return dict(hints)
        return {}


def mcp_rules(engine: Any = None) -> McpRules:
    eng = resolve_engine(engine)

    def build() -> McpRules:
        t = eng.ruleset.table("mcp")
        if not isinstance(t, Mapping):
            raise UnknownRuleError("table", "mcp", [])
        from ..rules._yaml import plain

        t = plain(t)
        ann, client, serve = t["annotations"], t["client"], t["serve"]
        return McpRules(
            defaults=dict(ann["defaults"]),
            classes=tuple(ToolClass(c["name"], dict(c["when"]), c["tier"], c["kind"])
                          for c in ann["classes"]),
            pipeline=compile_pipeline(t["schema"]["pipeline"]),
            startup_seconds=float(client["startup_seconds"]), restarts=int(client["restarts"]),
            stderr_lines=int(client["stderr_lines"]), max_tools=int(client["max_tools"]),
            serve_name=str(serve["name"]),
            serve_instructions=" ".join(str(serve.get("instructions") or "").split()),
            serve_hints=tuple((dict(h["when"]), dict(h["set"])) for h in serve["hints"]))

    return eng._cached("mcp:rules", build)


# ---------------------------------------------------------------- lint cross-checks

def _policy_levels(rs: RuleSet) -> set[str]:
    from ..calls._policy import merged_policy_data

    try:
        return {lv["name"] for lv in merged_policy_data(rs, "default").get("levels") or []}
    except Exception:  # a broken default policy is reported by the policy checks
        return set()


def check_rules(rs: RuleSet, rep: Any, failed: set[tuple[str, str]]) -> None:
    """MCP servers: one transport, URLs, placeholders, namespaces every provider accepts,
    tiers that are policy levels, include/exclude that do not overlap; the MCP table:
    a catch-all annotations class and served-hints entry, tiers that are levels, pipeline
    ops that exist."""
    from ..calls._policy import _provider_name_patterns

    levels = _policy_levels(rs) if rs.get("policy", "default") is not None else set()
    patterns = _provider_name_patterns(rs)
    sep = "_"
    sel = rs.table("tool_selection")
    if isinstance(sel, Mapping):
        sep = str((sel.get("namespaces") or {}).get("separator") or "_")
    for sid, rf in sorted(rs.files.get("mcp", {}).items()):
        if ("mcp", sid) not in failed and isinstance(rf.data, Mapping):
            _check_server(rep, rf, sid, levels, patterns, sep)
    tf = rs.get("table", "mcp")
    if tf is not None and ("table", "mcp") not in failed and isinstance(tf.data, Mapping):
        _check_table(rep, tf, levels)


def _check_server(rep: Any, rf: RuleFile, sid: str, levels: set[str], patterns: Any,
                  sep: str) -> None:
    d = rf.data
    has_cmd, has_url = "command" in d, "url" in d
    if has_cmd == has_url:
        rep.error(rf, (), "an MCP server needs exactly one of `command` (started over stdio) "
                  "or `url` (streamable HTTP)", "mcp-transport")
    for key in (("headers",) if has_cmd else ("args", "env", "cwd")):
        if key in d and (has_cmd or has_url):
            rep.error(rf, (key,), f"`{key}` belongs to the "
                      f"{'url' if key == 'headers' else 'command'} transport, which this "
                      "server does not use", "mcp-transport")
    url = d.get("url")
    if isinstance(url, str) and not re.match(r"https?://", url):
        rep.error(rf, ("url",), f"url {url!r} is not an http:// or https:// URL", "mcp-url")
    texts: list[tuple[tuple[Any, ...], Any]] = [(("command",), d.get("command")),
                                                (("url",), url), (("cwd",), d.get("cwd"))]
    texts += [(("args", i), a) for i, a in enumerate(d.get("args") or [])]
    texts += [(("env", k), v) for k, v in (d.get("env") or {}).items()]
    texts += [(("headers", k), v) for k, v in (d.get("headers") or {}).items()]
    for path, text in texts:
        if not isinstance(text, str):
            continue
        for m in _BRACED.finditer(text):
            if m.group(1) != "workspace":
                rep.error(rf, path, f"unknown placeholder {m.group(0)!r}: write {{workspace}} "
                          "for the session's workspace or ${VAR} for an environment variable",
                          "mcp-placeholder")
        if "${" in _VAR.sub("", text):
            rep.error(rf, path, "a ${ without a variable name: write ${NAME} (letters, digits "
                      "and _)", "mcp-placeholder")
    namespace = str(d.get("namespace") or sid)
    for pid, pat in patterns:
        if not pat.fullmatch(f"{namespace}{sep}x"):
            rep.error(rf, ("namespace",) if "namespace" in d else (),
                      f"tool names under the namespace {namespace!r} are not accepted by "
                      f"provider {pid} (must match {pat.pattern!r}); set `namespace:` to "
                      "letters, digits, _ and -", "mcp-namespace")
            break
    include, exclude = set(d.get("include") or ()), set(d.get("exclude") or ())
    both = sorted(include & exclude)
    if both:
        rep.error(rf, ("exclude",), f"{', '.join(both)} is both included and excluded",
                  "mcp-tools")
    for tool, entry in (d.get("tools") or {}).items():
        if exclude and tool in exclude:
            rep.warning(rf, ("tools", tool), f"tool {tool!r} is excluded; its entry has no "
                        "effect", "mcp-tools")
        tier = (entry or {}).get("tier")
        if tier is not None and levels and tier not in levels:
            rep.warning(rf, ("tools", tool, "tier"), f"tier {tier!r} is not a level of the "
                        f"default policy ({', '.join(sorted(levels))}); the tool is "
                        "unavailable unless a level names it", "mcp-tier")
    for key in ("startup_seconds", "timeout"):
        if d.get(key) == 0:
            rep.error(rf, (key,), f"{key} must be more than 0 seconds", "mcp-timeouts")


def _check_table(rep: Any, tf: RuleFile, levels: set[str]) -> None:
    d = tf.data
    classes = (d.get("annotations") or {}).get("classes") or []
    names: set[str] = set()
    for i, c in enumerate(classes):
        if c.get("name") in names:
            rep.error(tf, ("annotations", "classes", i, "name"), f"class {c.get('name')!r} is "
                      "defined twice", "mcp-annotations")
        names.add(c.get("name"))
        if levels and c.get("tier") not in levels:
            # a warning: a project may overlay a policy with other levels (its MCP tools of
            # this class are then unavailable unless a level names them)
            rep.warning(tf, ("annotations", "classes", i, "tier"), f"tier {c.get('tier')!r} "
                        f"is not a level of the default policy ({', '.join(sorted(levels))}); "
                        "MCP tools of this class are unavailable unless a level names them",
                        "mcp-annotations")
        if c.get("when") == {} and i != len(classes) - 1:
            rep.error(tf, ("annotations", "classes", i, "when"), "`when: {}` holds for every "
                      "tool: the entries after it are never used", "mcp-annotations")
    if classes and classes[-1].get("when") != {}:
        rep.error(tf, ("annotations", "classes"), "no entry holds for every tool: end the "
                  "classes with one whose `when: {}`", "mcp-annotations")
    hints = (d.get("serve") or {}).get("hints") or []
    for i, h in enumerate(hints):
        level = (h.get("when") or {}).get("level")
        if level is not None and levels and level not in levels:
            rep.warning(tf, ("serve", "hints", i, "when", "level"), f"level {level!r} is not "
                        "a level of the default policy: this entry never applies", "mcp-serve")
    if not hints or hints[-1].get("when") != {}:
        rep.error(tf, ("serve", "hints"), "no entry holds for every served tool: end the "
                  "hints with one whose `when: {}`", "mcp-serve")
    for i, step in enumerate((d.get("schema") or {}).get("pipeline") or []):
        for sub, message in validate_step(step):
            rep.error(tf, ("schema", "pipeline", i, *sub), message, "mcp-schema")
