"""The audit log: one JSON line per executed, failed or refused call, in daily files
`tools-YYYY-MM-DD.jsonl` (UTC dates).

Each line is written with a single `os.write` on a descriptor opened with O_APPEND, so
lines of concurrent writers (threads or processes) never interleave: the kernel places
every append at the current end of the file. Arguments are sanitized first: file
contents become their size and sha256, secrets become [REDACTED].
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..calls._policy import Policy

__all__ = ["AuditLog", "sanitize_arguments"]

REDACTED = "[REDACTED]"
MAX_TEXT = 2000  # longer argument texts are cut: a log line stays one small write


def _digest(value: Any) -> dict[str, Any]:
    data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else \
        json.dumps(value, sort_keys=True, ensure_ascii=False, default=str).encode()
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _scrub(value: Any, patterns: tuple[re.Pattern[str], ...], names: tuple[re.Pattern[str], ...],
           depth: int = 0) -> Any:
    if depth > 20:
        return "[...]"
    if isinstance(value, str):
        for p in patterns:
            value = p.sub(REDACTED, value)
        if len(value) > MAX_TEXT:
            value = f"{value[:MAX_TEXT]}...(+{len(value) - MAX_TEXT} chars)"
        return value
    if isinstance(value, Mapping):
        return {str(k): (REDACTED if any(n.search(str(k)) for n in names)
                         else _scrub(v, patterns, names, depth + 1)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub(v, patterns, names, depth + 1) for v in value[:100]]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return _scrub(str(value), patterns, names, depth + 1)


def sanitize_arguments(arguments: Any, policy: Policy) -> Any:
    """Arguments as the audit log keeps them: `audit.content_arguments` replaced by their
    size and sha256, secret names and values redacted, long texts cut."""
    if not isinstance(arguments, Mapping):
        # Unparsed arguments (invalid JSON) may hold anything: keep only their digest.
        return {"_unparsed": _digest(arguments if isinstance(arguments, str) else repr(arguments))}
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        if key in policy.audit_content_arguments:
            out[key] = _digest(value)
        elif any(n.search(str(key)) for n in policy.audit_secret_names):
            out[key] = REDACTED
        else:
            out[key] = _scrub(value, policy.audit_secret_values, policy.audit_secret_names)
    return out


class AuditLog:
    """Appends audit lines under `directory`."""

    def __init__(self, directory: str | os.PathLike[str], policy: Policy):
        self.directory = Path(directory)
        self.policy = policy

    def path_for(self, when: _dt.datetime) -> Path:
        return self.directory / f"tools-{when:%Y-%m-%d}.jsonl"

    def write(self, record: Mapping[str, Any]) -> Path:
        """Append one line; returns the file written."""
        now = _dt.datetime.now(_dt.UTC)
        line = {"timestamp": now.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                **record}
        data = (json.dumps(line, ensure_ascii=False, default=str, separators=(",", ":"))
                + "\n").encode("utf-8", "replace")
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path_for(now)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0),
                     0o600)
        try:
            written = os.write(fd, data)
            while written < len(data):  # a short write (a full disk, a signal): finish it
                written += os.write(fd, data[written:])
        finally:
            os.close(fd)
        return path
