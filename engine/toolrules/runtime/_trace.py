"""The trace of a tool loop (JSON lines, secrets redacted); replay is in _replay.py.

Records, in order: `start` (model, capability, tools, settings, the opening messages),
then per model turn a `turn` (the request: messages added since the last turn, the tools
offered and tool_choice; the response: raw, content, reasoning, calls, finish reason,
repairs), per call a `call` (the call, what the loop did with it, the result), `notice`s
when a guardrail acts, and `done` (why it stopped, the final content).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from .._errors import ParseError, ToolrulesError
from .._types import Message, ParsedResponse, Tool, ToolCall, ToolResult
from ._events import call_dict, message_dict, result_dict

__all__ = ["TRACE_VERSION", "Redactor", "Trace", "plain", "redactor_for"]

TRACE_VERSION = 1


class Redactor:
    """Replaces secrets in JSON-ready values (rules/loop.yaml `redact`)."""

    def __init__(self, table: Mapping[str, Any]):
        self.mask: str = table["mask"]
        self.keys = re.compile(table["keys"])
        self.patterns = [re.compile(p) for p in table.get("patterns") or ()]
        self._any = _any_of(self.patterns)
        self._keys_seen: dict[str, bool] = {}

    def _secret_key(self, key: str) -> bool:
        hit = self._keys_seen.get(key)
        if hit is None:
            hit = self.keys.search(key) is not None
            if len(self._keys_seen) < 4096:  # keys repeat: role, content, arguments ...
                self._keys_seen[key] = hit
        return hit

    def text(self, s: str) -> str:
        if self._any is not None and self._any.search(s) is None:
            return s  # one scan finds that no pattern matches (most strings)
        for p in self.patterns:
            s = p.sub(self.mask, s)
        return s

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: (self.mask if isinstance(k, str) and self._secret_key(k)
                        and isinstance(v, (str, int, float)) else self(v))
                    for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self(v) for v in value]
        return value


def _any_of(patterns: list[re.Pattern[str]]) -> re.Pattern[str] | None:
    """One regex that matches where any of `patterns` would: an alternation of them, when
    that is exact (no back-references, whose numbers would shift; no inline global flags,
    which an alternation refuses). None: check the patterns one by one."""
    if not patterns or any(re.search(r"\\\d|\(\?P=", p.pattern) or p.flags & ~re.UNICODE
                           for p in patterns):
        return None
    try:
        return re.compile("|".join(f"(?:{p.pattern})" for p in patterns))
    except re.error:
        return None


def redactor_for(engine: Any) -> Redactor:
    return engine._cached("runtime:redactor",
                          lambda: Redactor(engine.ruleset.table("loop")["redact"]))


def plain(value: Any) -> Any:
    """UTP values and containers as JSON-ready data."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, Message):
        return message_dict(value)
    if isinstance(value, ToolCall):
        return call_dict(value)
    if isinstance(value, ToolResult):
        return result_dict(value)
    if isinstance(value, Tool):
        return value.to_openai()
    if isinstance(value, ParsedResponse):
        out: dict[str, Any] = {"content": value.content}
        if value.reasoning_content is not None:
            out["reasoning"] = value.reasoning_content
        out["calls"] = [call_dict(c) for c in value.tool_calls]
        out["finish_reason"] = value.finish_reason
        if value.repairs:
            out["repairs"] = list(value.repairs)
        if value.warnings:
            out["warnings"] = list(value.warnings)
        out["raw"] = plain(value.raw)
        return out
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "to_dict"):
        return plain(value.to_dict())
    return str(value)


class Trace:
    """The records of one loop run. Records hold live values while the loop runs; they
    become JSON (redacted) when written: `save(path)`, `lines()`, `to_dicts()`. With
    `path`, every record is also appended to that file as it happens."""

    def __init__(self, records: Iterable[dict[str, Any]] = (), *, redactor: Redactor | None = None,
                 path: str | Path | None = None):
        self.records: list[dict[str, Any]] = list(records)
        self._redact = redactor
        self._file: IO[str] | None = None
        if path is not None:
            p = Path(path)
            p.parent.mkdir(parents=True, exist_ok=True)
            self._file = p.open("w", encoding="utf-8")

    def add(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        if self._file is not None:
            self._file.write(self._line(record))
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _line(self, record: dict[str, Any]) -> str:
        data = plain(record)
        if self._redact is not None:
            data = self._redact(data)
        return json.dumps(data, ensure_ascii=False) + "\n"

    def lines(self) -> Iterator[str]:
        for r in self.records:
            yield self._line(r)

    def to_dicts(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines()]

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        with p.open("w", encoding="utf-8") as f:
            f.writelines(self.lines())
        return p

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        """A saved trace (JSON lines)."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ToolrulesError(f"cannot read trace {str(path)!r}: {exc.strerror}") from None
        records = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ParseError(f"{path}:{n}: not a JSON line: {exc.msg}") from None
            if not isinstance(rec, dict) or "type" not in rec:
                raise ParseError(f"{path}:{n}: a trace record is an object with a `type`")
            records.append(rec)
        if not records or records[0].get("type") != "start":
            raise ParseError(f"{path}: a trace starts with a `start` record (written by "
                             "ToolLoop(trace_path=...) or LoopOutcome.save_trace)")
        return cls(records)

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("type") == kind]

    def __len__(self) -> int:
        return len(self.records)

    def __repr__(self) -> str:
        return f"<Trace {len(self.records)} records>"
