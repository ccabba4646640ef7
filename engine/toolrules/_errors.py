"""The error tree. Every error toolrules raises on purpose derives from ToolrulesError.

    ToolrulesError
     ├── RuleError            a rule set is broken (lists every problem, one per line)
     ├── UnknownRuleError     a name that no rule defines (provider, dialect, template ...)
     │    └── (KeyError)
     ├── ParseError           model output or a body cannot be read at all
     │    ├── (ValueError)
     │    └── ParseTimeoutError   reading one output took longer than its deadline
     ├── SchemaError          a tool schema cannot be made to fit a provider's rules
     │    └── (ValueError)
     ├── InputTooLargeError   an input is over its size limit
     │    └── (ValueError)
     ├── McpError             an MCP server that cannot be started, listed or used (names
     │                        the server, and the tool when one is involved)
     └── CapabilityError      the model cannot do what was asked (e.g. tools, no emulation)
          └── UnsupportedContentError  a content part or block that cannot be carried

Malformed model output is *not* an error: parsers return it as content and list what
they repaired. ParseError is for inputs that are not text or bodies of the wrong shape.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "MAX_TEXT_CHARS",
    "CapabilityError",
    "InputTooLargeError",
    "McpError",
    "ParseError",
    "ParseTimeoutError",
    "Problem",
    "RuleError",
    "SchemaError",
    "ToolrulesError",
    "UnknownRuleError",
    "UnsupportedContentError",
]


class ToolrulesError(Exception):
    """Base class of every error toolrules raises on purpose."""


class McpError(ToolrulesError):
    """An MCP server that cannot be started, listed or used: its message names the server
    (and the tool), says what happened and quotes what the server wrote on stderr."""

    def __init__(self, message: str, *, server: str | None = None, tool: str | None = None):
        super().__init__(message)
        self.server = server
        self.tool = tool


@dataclass(frozen=True, slots=True)
class Problem:
    """One diagnostic about a rule file: where, how bad, what, which check."""

    path: str
    line: int
    col: int
    level: str
    message: str
    check: str

    def format(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: [{self.level}] {self.message} ({self.check})"

    def as_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "line": self.line,
            "col": self.col,
            "level": self.level,
            "message": self.message,
            "check": self.check,
        }


class RuleError(ToolrulesError):
    """A rule set failed validation. `problems` holds every diagnostic."""

    def __init__(self, problems: list[Problem] | tuple[Problem, ...]):
        self.problems = tuple(problems)
        errors = [p for p in self.problems if p.level == "error"]
        head = f"{len(errors)} problem(s) in the rule set; run `toolrules lint` for details:"
        super().__init__("\n".join([head, *(p.format() for p in errors)]))


class UnknownRuleError(ToolrulesError, KeyError):
    """A provider, dialect, template or table name that no loaded rule defines."""

    def __init__(self, kind: str, name: str, known: list[str] | tuple[str, ...] = ()):
        self.kind = kind
        self.name = name
        self.known = tuple(known)
        hint = ""
        if known:
            from difflib import get_close_matches

            close = get_close_matches(name, list(known), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(sorted(known))}"
        super().__init__(f"unknown {kind} {name!r}{hint}")

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class ParseError(ToolrulesError, ValueError):
    """An input that cannot be read at all (wrong type, not a body of the expected shape)."""


class ParseTimeoutError(ParseError):
    """Reading one model output took longer than the parse deadline in force
    (`toolrules.parse_deadline`; the proxy's and the loop's `parse_timeout`). The request
    or run that waited for it ends; `text` holds the output read so far (for the trace)."""

    def __init__(self, message: str, text: str | None = None):
        super().__init__(message)
        self.text = text


class SchemaError(ToolrulesError, ValueError):
    """A tool schema that cannot be adapted to a provider's limits."""


class InputTooLargeError(ToolrulesError, ValueError):
    """An input over its configured size limit."""


# the longest raw model output a text parser reads by default (InputTooLargeError past it)
MAX_TEXT_CHARS = 16 * 1024 * 1024


class CapabilityError(ToolrulesError):
    """The model cannot do what was asked."""


class UnsupportedContentError(CapabilityError):
    """Content that cannot be carried where it has to go: a block a reader cannot take
    as a ContentPart, or a part the target API (or model) has no way to receive. Refused,
    never dropped. `part_type`: the block or part type; `where`: its place (``messages[2],
    block 1``) when known."""

    def __init__(self, message: str, *, part_type: str | None = None, where: str | None = None):
        super().__init__(message)
        self.part_type = part_type
        self.where = where
