"""Execution policies (rules/policies/*.yaml) and tool definitions (rules/tools/*.yaml)
compiled into values, and the decisions that need no file system: trust levels, path text,
blocked patterns, command lines.

The runtime (toolrules.runtime) enforces these decisions around real files and processes;
this module sits below the Engine so that lint can cross-check the rule files and golden
fixtures can record each decision.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
import re
import shlex
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._errors import ParseError, UnknownRuleError
from .._types import Tool
from ..rules._default import resolve_engine
from ..rules._loader import RuleFile, RuleSet, merge

__all__ = [
    "RUNTIME_ERRORS",
    "CommandRule",
    "Decision",
    "Policy",
    "PolicyRefusal",
    "ToolDef",
    "builtin_tool_defs",
    "check_rules",
    "policy_rules",
    "provider_name_patterns",
]

# Envelope codes the runtime emits (rules/validation.yaml `envelope` gives each its
# message and ToolError category; lint checks they are all there).
RUNTIME_ERRORS = ("PERMISSION_DENIED", "TOOL_NOT_ALLOWED", "TRUST_TOO_LOW",
                  "COMMAND_NOT_ALLOWED", "CONFIRMATION_DENIED", "RATE_LIMITED", "TIMEOUT",
                  "DUPLICATE_CALL_ID", "FILE_TOO_LARGE", "EDIT_FAILED", "UNKNOWN_TOOL", "INVALID_ARGUMENTS",
                  "ARGUMENTS_TOO_LARGE", "TOOL_OUTPUT_TOO_LARGE", "TOOL_ERROR",
                  "SERVER_UNAVAILABLE")


class PolicyRefusal(PermissionError):
    """A call refused by the policy: `error` is the envelope code (PERMISSION_DENIED ...),
    `rule` names the rule that refused (``paths.blocked: .env``, ``jail.symlink``)."""

    def __init__(self, error: str, rule: str, message: str, **details: Any):
        super().__init__(message)
        self.error = error
        self.rule = rule
        self.message = message
        self.details = details


def _deny(rule: str, message: str, **details: Any) -> PolicyRefusal:
    return PolicyRefusal("PERMISSION_DENIED", rule, message, **details)


# ---------------------------------------------------------------- values

@dataclass(frozen=True, slots=True)
class CommandRule:
    """One allowlist entry: the command's first words and limits on its arguments."""

    words: tuple[str, ...]
    max_args: int | None = None
    deny_args: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolDef:
    """A tool defined in rules/tools/*.yaml (its handler is code, found by name)."""

    tool: Tool
    tier: str | None = None
    kind: str = "read"
    paths: tuple[str, ...] = ()
    command: str | None = None
    hidden: bool = False
    requires_confirmation: bool = False
    source: str = ""


@dataclass(frozen=True, slots=True)
class Decision:
    """What the policy says about a call before it runs (no file system involved)."""

    allowed: bool
    error: str | None = None
    rule: str | None = None
    message: str | None = None
    argv: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"allowed": self.allowed}
        for name in ("error", "rule", "message"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.argv is not None:
            out["argv"] = list(self.argv)
        return out


def _limit(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and value > 0 else None


@dataclass(frozen=True)
class Policy:
    """A compiled execution policy. Field meanings: rules/policies/default.yaml."""

    id: str
    description: str = ""
    levels: tuple[str, ...] = ("discovery", "read_only", "workspace", "shell", "full")
    level_tools: Mapping[str, str] = field(default_factory=dict)
    registered_level: str = "workspace"
    max_args_bytes: int | None = 200_000
    coerce: bool = True
    max_output_bytes: int | None = 200_000
    blocked: tuple[str, ...] = ()
    refuse_categories: frozenset[str] = frozenset()
    refuse_compatibility_forms: bool = True
    max_read_bytes: int = 1_000_000
    max_list_entries: int = 1000
    max_depth: int = 20
    calls_per_minute: int | None = None
    writes_per_minute: int | None = None
    shell_per_minute: int | None = None
    bytes_written_per_session: int | None = None
    shell_level: str = "shell"
    timeout_default: float = 30.0
    timeout_max: float = 120.0
    allowlist: tuple[CommandRule, ...] = ()
    allow_shell: bool = False
    metacharacters: str = ";&|<>`$()\n"
    check_path_arguments: bool = True
    env_set: Mapping[str, str] = field(default_factory=dict)
    env_pass: tuple[str, ...] = ()
    env_deny: tuple[re.Pattern[str], ...] = ()
    rlimits: Mapping[str, int] = field(default_factory=dict)
    max_command_output_bytes: int = 100_000
    search_max_matches: int = 200
    search_max_line_chars: int = 300
    search_max_file_bytes: int = 1_000_000
    audit_content_arguments: tuple[str, ...] = ()
    audit_secret_names: tuple[re.Pattern[str], ...] = ()
    audit_secret_values: tuple[re.Pattern[str], ...] = ()

    # ------------------------------------------------------------ trust levels

    def level_index(self, level: str) -> int:
        try:
            return self.levels.index(level)
        except ValueError:
            raise ValueError(f"unknown trust level {level!r}; policy {self.id!r} has: "
                             f"{', '.join(self.levels)}") from None

    def tool_level(self, name: str, declared: str | None = None) -> str:
        """The level a tool needs: the policy's level naming it, else the tier it declares
        (a tier this policy does not have makes the tool unavailable), else
        `registered_level`."""
        if name in self.level_tools:
            return self.level_tools[name]
        if declared is not None:
            return declared
        return self.registered_level

    def within_trust(self, level: str, trust: str) -> bool:
        """Whether a tool at `level` may run at `trust` (never for an unknown level)."""
        if level not in self.levels:
            return False
        return self.level_index(level) <= self.level_index(trust)

    def is_shell(self, level: str) -> bool:
        return self.level_index(level) >= self.level_index(self.shell_level)

    # ------------------------------------------------------------ paths (text only)

    def path_parts(self, text: Any, workspace: str | None = None,
                   argument: str = "path") -> tuple[str, ...]:
        """The components of a workspace path, lexically normalised; refusals for NUL
        bytes, hidden or look-alike characters, `~`, absolute paths outside `workspace`
        and `..` that climbs out. Symlinks are the jail's business (toolrules.runtime)."""
        if not isinstance(text, str):
            raise _deny("path.type", f"{argument} must be a string", argument=argument)
        if "\x00" in text:
            raise _deny("path.nul", f"{argument} contains a NUL byte", argument=argument)
        norm = unicodedata.normalize("NFC", text)
        for ch in norm:
            cat = unicodedata.category(ch)
            if cat in self.refuse_categories:
                raise _deny("paths.refuse_categories",
                            f"{argument} contains the invisible or control character "
                            f"U+{ord(ch):04X} ({cat})", argument=argument)
        if self.refuse_compatibility_forms and unicodedata.normalize("NFKC", norm) != norm:
            raise _deny("paths.refuse_compatibility_forms",
                        f"{argument} contains look-alike (compatibility) characters; "
                        "write the plain form", argument=argument)
        if norm.startswith("~"):
            raise _deny("path.home", f"{argument} {text!r} starts with ~; home directories are "
                        "outside the workspace", argument=argument)
        if norm.startswith("/"):
            root = posixpath.normpath(workspace) if workspace else None
            full = posixpath.normpath(norm)
            if root is None or not (full == root or full.startswith(root.rstrip("/") + "/")):
                raise _deny("path.absolute", f"{argument} {text!r} is an absolute path outside "
                            "the workspace; use a path relative to the workspace",
                            argument=argument)
            norm = full[len(root):].lstrip("/")
        parts: list[str] = []
        for comp in norm.split("/"):
            if comp in ("", "."):
                continue
            if comp == "..":
                if not parts:
                    raise _deny("path.escape", f"{argument} {text!r} leaves the workspace "
                                "through '..'", argument=argument)
                parts.pop()
                continue
            parts.append(comp)
        return tuple(parts)

    def blocked_by(self, parts: Sequence[str]) -> str | None:
        """The first blocked pattern matching `parts` (case-insensitive), or None."""
        folded = [p.casefold() for p in parts]
        whole = "/".join(folded)
        for pattern in self.blocked:
            pat = pattern.rstrip("/").casefold()
            if not pat:
                continue
            if "/" in pat:
                if fnmatch.fnmatchcase(whole, pat) or fnmatch.fnmatchcase(whole, pat + "/*"):
                    return pattern
            elif any(fnmatch.fnmatchcase(c, pat) for c in folded):
                return pattern
        return None

    def check_path(self, text: Any, workspace: str | None = None,
                   argument: str = "path") -> tuple[str, ...]:
        """`path_parts` plus the blocked patterns."""
        parts = self.path_parts(text, workspace, argument)
        pattern = self.blocked_by(parts)
        if pattern is not None:
            raise _deny(f"paths.blocked: {pattern}",
                        f"{argument} {text!r} is blocked by the pattern {pattern!r}",
                        argument=argument, pattern=pattern)
        return parts

    # ------------------------------------------------------------ command lines (text only)

    def command_argv(self, command: Any, workspace: str | None = None,
                     cwd: str | None = None) -> tuple[str, ...]:
        """The argv of an accepted command line, or a refusal (COMMAND_NOT_ALLOWED,
        PERMISSION_DENIED for a path argument, INVALID_ARGUMENTS for bad quoting).
        Relative path arguments are read from `cwd` (a workspace path)."""
        if not isinstance(command, str) or not command.strip():
            raise PolicyRefusal("INVALID_ARGUMENTS", "command.empty",
                                "command must be a non-empty string")
        if "\x00" in command:
            raise _deny("command.nul", "the command contains a NUL byte")
        bad = _unquoted(command, self.metacharacters if not self.allow_shell else "`")
        if bad is not None:
            shown = "newline" if bad == "\n" else repr(bad)
            hint = ("there is no shell: pipes, redirections, ; && and $ do not work; "
                    "run one command per call")
            raise PolicyRefusal("COMMAND_NOT_ALLOWED", "commands.metacharacters",
                                f"the command contains the shell metacharacter {shown}; {hint}")
        if self.allow_shell and "$(" in command:
            raise PolicyRefusal("COMMAND_NOT_ALLOWED", "commands.metacharacters",
                                "command substitution $( ) is not allowed")
        try:
            if self.allow_shell:
                lex = shlex.shlex(command, posix=True, punctuation_chars=";&|<>()")
                lex.whitespace_split = True
                tokens = list(lex)
            else:
                tokens = shlex.split(command)
        except ValueError as exc:
            raise PolicyRefusal("INVALID_ARGUMENTS", "command.syntax",
                                f"the command cannot be split into words: {exc}") from None
        if not tokens:
            raise PolicyRefusal("INVALID_ARGUMENTS", "command.empty", "the command is empty")
        segments = _segments(tokens) if self.allow_shell else [tokens]
        base = self.path_parts(cwd, workspace, "cwd") if isinstance(cwd, str) else ()
        for argv in segments:
            self._check_argv(argv, workspace, base)
        return tuple(tokens)

    def _check_argv(self, argv: list[str], workspace: str | None,
                    base: tuple[str, ...] = ()) -> None:
        if not argv:
            raise PolicyRefusal("INVALID_ARGUMENTS", "command.empty", "an empty command")
        rule = self.command_rule(argv)
        if rule is None:
            allowed = ", ".join(" ".join(r.words) for r in self.allowlist) or "(none)"
            raise PolicyRefusal("COMMAND_NOT_ALLOWED", "commands.allowlist",
                                f"{argv[0]!r} is not an allowed command; allowed: {allowed}",
                                command=argv[0])
        args = argv[len(rule.words):]
        label = " ".join(rule.words)
        if rule.max_args is not None and len(args) > rule.max_args:
            raise PolicyRefusal("COMMAND_NOT_ALLOWED", f"commands.allowlist: {label}",
                                f"{label!r} takes at most {rule.max_args} argument(s) here")
        for arg in args:
            for pat in rule.deny_args:
                if fnmatch.fnmatchcase(arg, pat):
                    raise PolicyRefusal("COMMAND_NOT_ALLOWED", f"commands.allowlist: {label}",
                                        f"the argument {arg!r} is not allowed for {label!r}")
        if self.check_path_arguments:
            for value in path_like_arguments(args):
                text = value if value.startswith(("/", "~")) or not base else \
                    "/".join((*base, value))
                self.check_path(text, workspace, argument="command argument")

    def command_rule(self, argv: Sequence[str]) -> CommandRule | None:
        best: CommandRule | None = None
        for rule in self.allowlist:
            n = len(rule.words)
            if tuple(argv[:n]) == rule.words and (best is None or n > len(best.words)):
                best = rule
        return best

    # ------------------------------------------------------------ whole calls

    def decide(self, tool: ToolDef | None, arguments: Mapping[str, Any], trust: str,
               workspace: str | None = None) -> Decision:
        """The policy's answer for a call of `tool` at `trust`, from text alone."""
        if tool is None:
            return Decision(False, "UNKNOWN_TOOL", "registry", "no such tool")
        try:
            self.level_index(trust)
        except ValueError as exc:
            return Decision(False, "TRUST_TOO_LOW", "levels", str(exc))
        level = self.tool_level(tool.tool.name, tool.tier)
        if not self.within_trust(level, trust):
            return Decision(False, "TRUST_TOO_LOW", f"levels: {level}",
                            f"{tool.tool.name} needs trust level {level!r}; this session has "
                            f"{trust!r}")
        argv: tuple[str, ...] | None = None
        try:
            for name in tool.paths:
                if name in arguments:
                    self.check_path(arguments[name], workspace, argument=name)
            if tool.command and tool.command in arguments:
                cwd = arguments.get("cwd")
                argv = self.command_argv(arguments[tool.command], workspace,
                                         cwd if isinstance(cwd, str) else None)
        except PolicyRefusal as exc:
            return Decision(False, exc.error, exc.rule, exc.message)
        return Decision(True, argv=argv)


def path_like_arguments(args: Iterable[str]) -> list[str]:
    """Arguments a command may read as paths: non-options, and the value of --opt=value."""
    out: list[str] = []
    for arg in args:
        if arg.startswith("-"):
            if arg.startswith("--") and "=" in arg:
                out.append(arg.split("=", 1)[1])
            continue
        out.append(arg)
    return out


def _unquoted(text: str, chars: str) -> str | None:
    """The first of `chars` outside quotes, or None. As in a shell, `$` and a backtick
    still count inside double quotes, and a newline counts anywhere."""
    quote: str | None = None
    escaped = False
    for ch in text:
        if ch == "\n" and "\n" in chars:
            return ch
        if escaped:
            escaped = False
            continue
        if ch == "\\" and quote != "'":
            escaped = True
            continue
        if quote:
            if ch == quote:
                quote = None
            elif quote == '"' and ch in "$`" and ch in chars:
                return ch
            continue
        if ch in "'\"":
            quote = ch
            continue
        if ch in chars:
            return ch
    return None


def _segments(tokens: list[str]) -> list[list[str]]:
    """Simple commands of a shell line: split at operators, redirection targets dropped
    from the command words but kept for the path check."""
    out: list[list[str]] = [[]]
    for tok in tokens:
        if tok and all(c in ";&|()" for c in tok):
            out.append([])
        elif tok and all(c in "<>" for c in tok):
            out[-1].append("--redirect=")  # the next word is a target path
        elif out[-1] and out[-1][-1] == "--redirect=":
            out[-1][-1] = f"--redirect={tok}"
        else:
            out[-1].append(tok)
    return [s for s in out if s]


# ---------------------------------------------------------------- compiling



def merged_policy_data(rs: RuleSet, policy_id: str) -> dict[str, Any]:
    """A policy's data with its `extends:` chain applied."""
    seen: list[str] = []
    chain: list[Mapping[str, Any]] = []
    current: str | None = policy_id
    while current is not None:
        if current in seen:
            raise ParseError(f"policy {policy_id!r}: extends cycle through {current!r}")
        seen.append(current)
        rf = rs.get("policy", current)
        if rf is None or not isinstance(rf.data, Mapping):
            raise UnknownRuleError("policy", current, rs.ids("policy"))
        chain.append(rf.data)
        current = rf.data.get("extends")
    data: Any = {}
    for layer in reversed(chain):
        data = merge(data, layer)
    data.pop("extends", None)
    return dict(data)


def compile_policy(policy_id: str, d: Mapping[str, Any]) -> Policy:
    levels = [lv for lv in d.get("levels") or []]
    names = tuple(lv["name"] for lv in levels) or Policy.levels
    level_tools = {t: lv["name"] for lv in levels for t in lv.get("tools") or ()}
    args = d.get("arguments") or {}
    paths = d.get("paths") or {}
    rate = d.get("rate_limits") or {}
    times = d.get("timeouts") or {}
    cmd = d.get("commands") or {}
    env = cmd.get("env") or {}
    search = d.get("search") or {}
    audit = d.get("audit") or {}
    allow: list[CommandRule] = []
    for entry in cmd.get("allowlist") or ():
        if isinstance(entry, str):
            allow.append(CommandRule(tuple(entry.split())))
        else:
            allow.append(CommandRule(tuple(str(entry["command"]).split()), entry.get("max_args"),
                                     tuple(entry.get("deny_args") or ())))
    default_t = float(times.get("default_seconds", 30))
    return Policy(
        id=policy_id, description=d.get("description", ""), levels=names,
        level_tools=level_tools,
        registered_level=d.get("registered_level") or (
            "workspace" if "workspace" in names else names[-1]),
        max_args_bytes=_limit(args.get("max_bytes", 200_000)),
        coerce=bool(args.get("coerce", True)),
        max_output_bytes=_limit((d.get("output") or {}).get("max_bytes", 200_000)),
        blocked=tuple(paths.get("blocked") or ()),
        refuse_categories=frozenset(paths.get("refuse_categories") or ()),
        refuse_compatibility_forms=bool(paths.get("refuse_compatibility_forms", True)),
        max_read_bytes=int(paths.get("max_read_bytes", 1_000_000)),
        max_list_entries=int(paths.get("max_list_entries", 1000)),
        max_depth=int(paths.get("max_depth", 20)),
        calls_per_minute=_limit(rate.get("calls_per_minute")),
        writes_per_minute=_limit(rate.get("writes_per_minute")),
        shell_per_minute=_limit(rate.get("shell_per_minute")),
        bytes_written_per_session=_limit(rate.get("bytes_written_per_session")),
        shell_level=rate.get("shell_level") or ("shell" if "shell" in names else names[-1]),
        timeout_default=default_t,
        timeout_max=float(times.get("max_seconds", max(default_t, 120))),
        allowlist=tuple(allow),
        allow_shell=bool(cmd.get("allow_shell", False)),
        metacharacters=cmd.get("metacharacters", Policy.metacharacters),
        check_path_arguments=bool(cmd.get("check_path_arguments", True)),
        env_set=dict(env.get("set") or {}),
        env_pass=tuple(env.get("pass") or ()),
        env_deny=tuple(re.compile(p) for p in env.get("deny") or ()),
        rlimits={k: int(v) for k, v in (cmd.get("rlimits") or {}).items() if v is not None},
        max_command_output_bytes=int(cmd.get("max_output_bytes", 100_000)),
        search_max_matches=int(search.get("max_matches", 200)),
        search_max_line_chars=int(search.get("max_line_chars", 300)),
        search_max_file_bytes=int(search.get("max_file_bytes", 1_000_000)),
        audit_content_arguments=tuple(audit.get("content_arguments") or ()),
        audit_secret_names=tuple(re.compile(p) for p in audit.get("secret_names") or ()),
        audit_secret_values=tuple(re.compile(p) for p in audit.get("secret_values") or ()),
    )


def policy_rules(policy_id: str = "default", engine: Any = None) -> Policy:
    """The compiled policy `policy_id` of `engine` (default engine when None)."""
    eng = resolve_engine(engine)
    return eng._cached(f"policy:{policy_id}", lambda: compile_policy(
        policy_id, merged_policy_data(eng.ruleset, policy_id)))


def _tool_def(entry: Mapping[str, Any], source: str) -> ToolDef:
    return ToolDef(
        tool=Tool(name=entry["name"], description=entry["description"].strip(),
                  parameters=json.loads(json.dumps(entry["parameters"]))),
        tier=entry.get("tier"), kind=entry.get("kind", "read"),
        paths=tuple(entry.get("paths") or ()), command=entry.get("command"),
        hidden=bool(entry.get("hidden", False)),
        requires_confirmation=bool(entry.get("requires_confirmation", False)), source=source)


def builtin_tool_defs(engine: Any = None, toolset: str = "builtin") -> dict[str, ToolDef]:
    """name -> ToolDef of rules/tools/<toolset>.yaml."""
    eng = resolve_engine(engine)

    def build() -> dict[str, ToolDef]:
        rf = eng.ruleset.get("toolset", toolset)
        if rf is None or not isinstance(rf.data, Mapping):
            raise UnknownRuleError("toolset", toolset, eng.ruleset.ids("toolset"))
        return {e["name"]: _tool_def(e, rf.display) for e in rf.data.get("tools") or ()}

    return eng._cached(f"toolset:{toolset}", build)


# ---------------------------------------------------------------- lint cross-checks

_CATEGORIES = frozenset({"Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No",
                         "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So",
                         "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn"})


def check_rules(rs: RuleSet, rep: Any, failed: set[tuple[str, str]]) -> None:
    """Policies: extends targets and cycles, level names, regexes, Unicode categories,
    timeouts; tool definitions: unique provider-safe names, JSON Schemas, path and command
    arguments that exist, tiers that name a level; the runtime's envelope codes."""
    for pid, rf in sorted(rs.files.get("policy", {}).items()):
        if ("policy", pid) not in failed and isinstance(rf.data, Mapping):
            _check_policy(rs, rep, rf, pid)
    levels: set[str] = set()
    default = rs.get("policy", "default")
    if default is not None and ("policy", "default") not in failed:
        try:
            levels = {lv["name"] for lv in merged_policy_data(rs, "default").get("levels") or []}
        except (ParseError, UnknownRuleError, KeyError, TypeError):
            levels = set()
    patterns = _provider_name_patterns(rs)
    seen: dict[str, str] = {}
    for tid, rf in sorted(rs.files.get("toolset", {}).items()):
        if ("toolset", tid) in failed or not isinstance(rf.data, Mapping):
            continue
        for i, entry in enumerate(rf.data.get("tools") or []):
            _check_tool(rep, rf, i, entry, levels, patterns, seen)
    vf = rs.get("table", "validation")
    if vf is not None and ("table", "validation") not in failed and isinstance(vf.data, Mapping):
        from ..rules._tables import ENVELOPE_CODES

        envelope = vf.data.get("envelope") or {}
        for code in RUNTIME_ERRORS:
            if code not in envelope and code not in ENVELOPE_CODES:  # those: rules/_tables
                rep.error(vf, ("envelope",), f"the tool executor emits {code}; give it a message "
                          "and a ToolError code", "validation-envelope")


def _check_policy(rs: RuleSet, rep: Any, rf: RuleFile, pid: str) -> None:
    from ..rules._lint import check_regex

    d = rf.data
    parent = d.get("extends")
    if parent is not None and rs.get("policy", parent) is None:
        rep.error(rf, ("extends",), f"extends {parent!r}, which is not a policy; known: "
                  f"{', '.join(rs.ids('policy'))}", "policy-extends")
        return
    try:
        merged = merged_policy_data(rs, pid)
    except ParseError as exc:
        rep.error(rf, ("extends",), str(exc), "policy-extends")
        return
    except UnknownRuleError:
        return
    levels = merged.get("levels") or []
    names: list[str] = []
    owner: dict[str, str] = {}
    for i, lv in enumerate(levels):
        if lv.get("name") in names:
            rep.error(rf, ("levels", i, "name"), f"level {lv.get('name')!r} is defined twice",
                      "policy-levels")
        names.append(lv.get("name"))
        for j, tool in enumerate(lv.get("tools") or []):
            if tool in owner:
                rep.error(rf, ("levels", i, "tools", j), f"tool {tool!r} is already offered at "
                          f"level {owner[tool]!r}", "policy-levels")
            owner.setdefault(tool, lv.get("name"))
    if not names:
        rep.error(rf, (), "a policy needs at least one trust level", "policy-levels")
        return
    for path in (("registered_level",), ("rate_limits", "shell_level")):
        node: Any = merged
        for step in path:
            node = node.get(step) if isinstance(node, Mapping) else None
        if node is not None and node not in names:
            rep.error(rf, path, f"{'.'.join(path)} is {node!r}, which is not a level; levels: "
                      f"{', '.join(names)}", "policy-levels")
    for i, cat in enumerate((merged.get("paths") or {}).get("refuse_categories") or []):
        if cat not in _CATEGORIES:
            rep.error(rf, ("paths", "refuse_categories", i), f"{cat!r} is not a Unicode "
                      "general category (Cc, Cf, Zl ...)", "policy-unicode")
    times = merged.get("timeouts") or {}
    if times.get("default_seconds", 0) > times.get("max_seconds", float("inf")):
        rep.error(rf, ("timeouts",), "default_seconds is above max_seconds", "policy-timeouts")
    cmd = merged.get("commands") or {}
    for i, p in enumerate((cmd.get("env") or {}).get("deny") or []):
        check_regex(rep, rf, ("commands", "env", "deny", i), p)
    audit = merged.get("audit") or {}
    for key in ("secret_names", "secret_values"):
        for i, p in enumerate(audit.get(key) or []):
            check_regex(rep, rf, ("audit", key, i), p)
    words: set[tuple[str, ...]] = set()
    for i, entry in enumerate(cmd.get("allowlist") or []):
        w = tuple((entry if isinstance(entry, str) else str(entry.get("command", ""))).split())
        if w in words:
            rep.error(rf, ("commands", "allowlist", i), f"command {' '.join(w)!r} is listed "
                      "twice", "policy-commands")
        words.add(w)
        if any(c in "".join(w) for c in "/\\"):
            rep.error(rf, ("commands", "allowlist", i), "list command names, not paths: the "
                      "scrubbed PATH decides which program runs", "policy-commands")


def provider_name_patterns(engine: Any = None) -> list[tuple[str, re.Pattern[str]]]:
    """(provider id, tool name pattern) of every provider rule that restricts names: a
    tool name that matches them all is safe everywhere."""
    eng = resolve_engine(engine)
    return eng._cached("runtime:name_patterns", lambda: _provider_name_patterns(eng.ruleset))


def _provider_name_patterns(rs: RuleSet) -> list[tuple[str, re.Pattern[str]]]:
    out = []
    for pid, rf in sorted(rs.files.get("provider", {}).items()):
        names = ((rf.data or {}).get("tools") or {}).get("names") if isinstance(
            rf.data, Mapping) else None
        pattern = names.get("pattern") if isinstance(names, Mapping) else None
        if isinstance(pattern, str):
            try:
                out.append((pid, re.compile(pattern)))
            except re.error:
                continue
    return out


def _check_tool(rep: Any, rf: RuleFile, i: int, entry: Mapping[str, Any], levels: set[str],
                patterns: list[tuple[str, re.Pattern[str]]], seen: dict[str, str]) -> None:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError as JsonSchemaError

    name = str(entry.get("name"))
    if name in seen:
        rep.error(rf, ("tools", i, "name"), f"tool {name!r} is also defined in {seen[name]}",
                  "toolset-duplicate")
    seen.setdefault(name, rf.display)
    for pid, pat in patterns:
        if isinstance(name, str) and not pat.fullmatch(name):
            rep.error(rf, ("tools", i, "name"), f"tool name {name!r} is not accepted by provider "
                      f"{pid} (must match {pat.pattern!r})", "toolset-name")
    params = entry.get("parameters")
    if not isinstance(params, Mapping):
        return
    try:
        Draft202012Validator.check_schema(params)
    except JsonSchemaError as exc:
        rep.error(rf, ("tools", i, "parameters"), f"not a valid JSON Schema: {exc.message}",
                  "toolset-schema")
        return
    if params.get("type") != "object":
        rep.error(rf, ("tools", i, "parameters"), "the parameters schema must have type: object",
                  "toolset-schema")
    props = params.get("properties") or {}
    for key in ("paths", "command"):
        value = entry.get(key)
        for j, arg in enumerate([value] if isinstance(value, str) else value or []):
            if arg not in props:
                path = ("tools", i, key) if isinstance(value, str) else ("tools", i, key, j)
                rep.error(rf, path, f"{key} names {arg!r}, which is not a parameter",
                          "toolset-arguments")
    tier = entry.get("tier")
    if tier is not None and levels and tier not in levels:
        rep.warning(rf, ("tools", i, "tier"), f"tier {tier!r} is not a level of the default "
                    f"policy ({', '.join(sorted(levels))}); the tool is unavailable unless a "
                    "level names it", "toolset-tier")
