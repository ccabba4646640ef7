"""The chat template a GGUF weights file carries, read from its metadata without loading
the model (and without the `gguf` package or numpy): the header, then the key/value
pairs, stopping before the tensor data.

A GGUF file is untrusted input: every length is checked against the file's size and
against limits before anything is read or allocated; a file that is not a GGUF, or is
cut short, is a ParseError naming the file and what was wrong.

Layout (little-endian): magic `GGUF`, version u32 (2 or 3), tensor count u64, key/value
count u64, then per pair a string key (u64 length + UTF-8 bytes), a u32 value type and
the value: u8 i8 u16 i16 u32 i32 f32 bool (0-7), string (8), array (9: u32 item type,
u64 count, items), u64 i64 f64 (10-12).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import IO, Any

from .._errors import ParseError

__all__ = ["GgufTemplate", "read_gguf_template"]

_MAGIC = b"GGUF"
_MAX_KEYS = 1 << 16
_MAX_KEY_BYTES = 1 << 16
_MAX_STRING_BYTES = 8 << 20  # a chat template is a few KB; a token a few bytes
_MAX_ARRAY_ITEMS = 1 << 24
_SCALARS: dict[int, tuple[str, int]] = {0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2),
                                        4: ("<I", 4), 5: ("<i", 4), 6: ("<f", 4), 7: ("<?", 1),
                                        10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8)}
_STRING, _ARRAY = 8, 9
_TEMPLATE_KEY = "tokenizer.chat_template"
_TOKENS_KEY = "tokenizer.ggml.tokens"
_IDS = {"tokenizer.ggml.bos_token_id": "bos", "tokenizer.ggml.eos_token_id": "eos"}


@dataclass(frozen=True, slots=True)
class GgufTemplate:
    """What a GGUF says about its chat: the template(s) and the special tokens a server
    passes to it."""

    path: str
    template: str | None
    """`tokenizer.chat_template` (None: the file carries none)."""
    named: tuple[tuple[str, str], ...] = ()
    """Other templates (`tokenizer.chat_template.NAME`, e.g. tool_use), (name, source)."""
    bos_token: str = ""
    eos_token: str = ""
    name: str | None = None
    """`general.name`, when the file says."""
    architecture: str | None = None
    """`general.architecture`, when the file says."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """The other scalar and string values read (arrays left out)."""

    def named_template(self, name: str) -> str | None:
        return dict(self.named).get(name)


class _Reader:
    def __init__(self, fh: IO[bytes], size: int, where: str):
        self.fh = fh
        self.size = size
        self.where = where

    def fail(self, what: str) -> ParseError:
        return ParseError(f"{self.where}: {what} (at byte {self.fh.tell()}); the file is not "
                          "a complete GGUF - pass the .gguf weights file itself")

    def take(self, n: int) -> bytes:
        if n < 0 or self.fh.tell() + n > self.size:
            raise self.fail(f"the file ends before a {n}-byte field")
        data = self.fh.read(n)
        if len(data) != n:
            raise self.fail("the file ends early")
        return data

    def skip(self, n: int) -> None:
        if n < 0 or self.fh.tell() + n > self.size:
            raise self.fail(f"the file ends before a {n}-byte field")
        self.fh.seek(n, os.SEEK_CUR)

    def scalar(self, kind: int) -> Any:
        fmt, n = _SCALARS[kind]
        return struct.unpack(fmt, self.take(n))[0]

    def u32(self) -> int:
        return int(struct.unpack("<I", self.take(4))[0])

    def u64(self) -> int:
        return int(struct.unpack("<Q", self.take(8))[0])

    def string(self, limit: int = _MAX_STRING_BYTES, keep: bool = True) -> str | None:
        n = self.u64()
        if n > limit:
            raise self.fail(f"a {n}-byte string is over the {limit}-byte limit")
        if not keep:
            self.skip(n)
            return None
        return self.take(n).decode("utf-8", errors="replace")

    def value(self, kind: int, keep: bool) -> Any:
        if kind in _SCALARS:
            return self.scalar(kind)
        if kind == _STRING:
            return self.string(keep=keep)
        if kind == _ARRAY:
            item = self.u32()
            count = self.u64()
            if count > _MAX_ARRAY_ITEMS:
                raise self.fail(f"an array of {count} items is over the limit")
            if item in _SCALARS:
                self.skip(_SCALARS[item][1] * count)
                return None
            if item == _STRING:
                out = [self.string(keep=keep) for _ in range(count)]
                return out if keep else None
            if item == _ARRAY:
                for _ in range(count):
                    self.value(_ARRAY, False)
                return None
            raise self.fail(f"unknown array item type {item}")
        raise self.fail(f"unknown value type {kind}")


def read_gguf_template(path: str | os.PathLike[str]) -> GgufTemplate:
    """The chat template(s) and bos/eos tokens of the GGUF file at `path`. Raises
    ParseError when the file is not a GGUF or is cut short; OSError when it cannot be
    read."""
    where = os.fspath(path)
    with open(where, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        r = _Reader(fh, size, where)
        if size < 24 or fh.read(4) != _MAGIC:
            raise ParseError(f"{where}: not a GGUF file (it does not begin with the GGUF "
                             "magic bytes); pass a .gguf weights file")
        version = r.u32()
        if version not in (2, 3):
            raise ParseError(f"{where}: GGUF version {version} is not supported (2 and 3 are)")
        r.u64()  # tensor count
        count = r.u64()
        if count > _MAX_KEYS:
            raise r.fail(f"{count} metadata keys is over the limit")
        meta: dict[str, Any] = {}
        named: list[tuple[str, str]] = []
        tokens: list[str | None] | None = None
        ids: dict[str, int] = {}
        for _ in range(count):
            key = r.string(_MAX_KEY_BYTES) or ""
            kind = r.u32()
            if key == _TOKENS_KEY:
                value = r.value(kind, keep=True)
                tokens = value if isinstance(value, list) else None
            elif kind == _ARRAY:
                r.value(kind, keep=False)
            else:
                value = r.value(kind, keep=True)
                if key.startswith(_TEMPLATE_KEY + ".") and isinstance(value, str):
                    named.append((key[len(_TEMPLATE_KEY) + 1:], value))
                elif key in _IDS and isinstance(value, int) and not isinstance(value, bool):
                    ids[_IDS[key]] = value
                else:
                    meta[key] = value
    template = meta.pop(_TEMPLATE_KEY, None)

    def token(which: str) -> str:
        i = ids.get(which)
        if tokens is None or i is None or not 0 <= i < len(tokens):
            return ""
        return tokens[i] or ""

    name = meta.get("general.name")
    arch = meta.get("general.architecture")
    return GgufTemplate(where, template if isinstance(template, str) else None,
                        tuple(named), token("bos"), token("eos"),
                        name if isinstance(name, str) else None,
                        arch if isinstance(arch, str) else None, meta)
