"""Recorded agent sessions for `toolrules bench prefix`: every request body an agent sent,
in order (templates/bench/sessions/, re-recorded by tests/record_sessions.py), and the
chat templates the bench renders them into (templates/bench/*.jinja)."""

from __future__ import annotations

import gzip
import json
import lzma
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Request", "Session", "bench_sessions", "bench_templates", "load_session"]


def _data_dir() -> Path:
    from ..rules._loader import bundled_layer

    return bundled_layer().templates / "bench"


def bench_templates() -> list[Path]:
    """The chat templates the bench renders by default (shipped: templates/bench/)."""
    return sorted(_data_dir().glob("*.jinja"))


def bench_sessions() -> list[Path]:
    """The recorded sessions the bench replays by default (templates/bench/sessions/)."""
    return sorted(p for p in (_data_dir() / "sessions").glob("*.jsonl*"))


@dataclass(frozen=True)
class Request:
    seq: int
    conversation: str
    main: bool
    path: str
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Session:
    name: str
    header: dict[str, Any]
    requests: tuple[Request, ...]

    @property
    def conversations(self) -> list[str]:
        seen: list[str] = []
        for r in self.requests:
            if r.main and r.conversation not in seen:
                seen.append(r.conversation)
        return seen


def load_session(path: str | Path) -> Session:
    """A recorded session: JSON lines (plain, .xz or .gz), a header line, then one
    request per line ({seq, conversation, main, path, headers, body})."""
    p = Path(path)
    raw = p.read_bytes()
    if p.suffix == ".xz":
        raw = lzma.decompress(raw)
    elif p.suffix == ".gz":
        raw = gzip.decompress(raw)
    lines = [json.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip()]
    if not lines or not isinstance(lines[0], dict) or "body" in lines[0]:
        raise ValueError(f"{p}: not a recorded session (line 1 must be its header)")
    requests = []
    for i, rec in enumerate(lines[1:], 2):
        if not isinstance(rec, dict) or not isinstance(rec.get("body"), dict) \
                or not isinstance(rec.get("path"), str):
            raise ValueError(f"{p}:{i}: a request line needs `path` and a `body` object")
        requests.append(Request(int(rec.get("seq", i - 2)), str(rec.get("conversation", "")),
                                bool(rec.get("main", True)), rec["path"], rec["body"],
                                dict(rec.get("headers") or {})))
    name = p.name.split(".")[0]
    return Session(name, lines[0], tuple(requests))
