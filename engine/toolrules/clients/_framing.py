"""Stream framings, decoded incrementally: bytes in, events out.

- server-sent events (one JSON object per `data:`; `[DONE]` ends nothing by itself - the
  body's end does),
- NDJSON (one JSON object a line),
- the AWS event stream (binary messages: prelude, headers, payload, CRCs); an event
  becomes `{EVENT_TYPE: payload}` - the shape the AWS SDKs hand out - and an exception
  message becomes a `StreamFailure`.

Each decoder keeps only the unfinished tail of its input, so work is linear in the bytes.
"""

from __future__ import annotations

import codecs
import json
import struct
import zlib
from dataclasses import dataclass
from typing import Any

from .._jsonutil import loads

__all__ = ["AwsEventStreamDecoder", "NdjsonDecoder", "SseDecoder", "StreamFailure",
           "decoder_for", "encode_aws_event"]

MAX_PENDING = 8 << 20  # an event (or line) longer than this is not a stream we can read


class FramingError(ValueError):
    """The bytes are not the framing the rules said."""


@dataclass(frozen=True, slots=True)
class StreamFailure:
    """A failure the provider reported inside the stream (not an event to feed)."""

    kind: str | None
    message: str


def _json(text: str) -> Any:
    try:
        return loads(text)
    except ValueError:
        raise FramingError(f"a stream event is not JSON: {text[:120]!r}") from None


class SseDecoder:
    """text/event-stream: `data:` lines up to a blank line make one event.

    Linear in the bytes however they are cut: each chunk is split once, and a line that
    goes on over many chunks is kept in pieces, joined once when it ends."""

    def __init__(self) -> None:
        self._parts: list[str] = []  # the unfinished line, in pieces
        self._pending = 0            # their length
        self._skip_lf = False        # the last chunk ended with \r: a \n next is its end too
        self._data: list[str] = []
        self._decoder = _utf8()

    def feed(self, chunk: bytes) -> list[Any]:
        text = self._decoder.decode(chunk)
        out: list[Any] = []
        if self._skip_lf and text:
            self._skip_lf = False
            if text[0] == "\n":
                text = text[1:]
        if not text:
            return out
        if self._pending + len(text) > MAX_PENDING:
            raise FramingError("a server-sent event is larger than 8 MiB")
        if "\r" in text:  # \r\n and \r end lines too
            self._skip_lf = text[-1] == "\r"
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        lines = text.split("\n")
        if len(lines) == 1:  # no line ended: the line goes on
            self._parts.append(text)
            self._pending += len(text)
            return out
        first = lines[0]
        if self._parts:
            self._parts.append(first)
            first = "".join(self._parts)
            self._parts = []
        self._line(first, out)
        for line in lines[1:-1]:
            self._line(line, out)
        last = lines[-1]
        self._pending = len(last)
        if last:
            self._parts.append(last)
        return out

    def close(self) -> list[Any]:
        out: list[Any] = []
        rest = "".join(self._parts) + self._decoder.decode(b"", final=True)
        self._parts = []
        self._pending = 0
        if rest:
            self._line(rest, out)
        self._line("", out)
        return out

    def _line(self, line: str, out: list[Any]) -> None:
        if not line:
            if self._data:
                data = "\n".join(self._data)
                self._data = []
                if data.strip() != "[DONE]":
                    out.append(_json(data))
            return
        if line.startswith(":"):
            return
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        # event:, id:, retry: - the JSON itself says what each event is


class NdjsonDecoder:
    """application/x-ndjson: one JSON value a line (a line that goes on over many chunks
    is kept in pieces, joined once when it ends)."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._pending = 0

    def feed(self, chunk: bytes) -> list[Any]:
        if self._pending + len(chunk) > MAX_PENDING:
            raise FramingError("an NDJSON line is larger than 8 MiB")
        if b"\n" not in chunk:
            if chunk:
                self._parts.append(chunk)
                self._pending += len(chunk)
            return []
        lines = chunk.split(b"\n")
        if self._parts:
            lines[0] = b"".join([*self._parts, lines[0]])
            self._parts = []
        last = lines.pop()
        self._pending = len(last)
        if last:
            self._parts.append(last)
        return [_json(x.decode("utf-8", errors="replace")) for x in lines if x.strip()]

    def close(self) -> list[Any]:
        rest = b"".join(self._parts)
        self._parts = []
        self._pending = 0
        return [_json(rest.decode("utf-8", errors="replace"))] if rest.strip() else []


_PRELUDE = struct.Struct(">III")


class AwsEventStreamDecoder:
    """application/vnd.amazon.eventstream messages (linear: the input is appended to, and
    what was read is dropped once per chunk)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> list[Any]:
        buf = self._buf
        buf += chunk
        out: list[Any] = []
        at = 0
        while len(buf) - at >= 12:
            total, headers_len, prelude_crc = _PRELUDE.unpack_from(buf, at)
            if zlib.crc32(buf[at:at + 8]) != prelude_crc:
                raise FramingError("event stream prelude checksum mismatch")
            if total < 16 + headers_len or total > MAX_PENDING:
                raise FramingError(f"event stream message of {total} bytes")
            if len(buf) - at < total:
                break
            msg = bytes(buf[at:at + total])
            at += total
            (crc,) = struct.unpack_from(">I", msg, total - 4)
            if zlib.crc32(msg[:-4]) != crc:
                raise FramingError("event stream message checksum mismatch")
            headers = _headers(msg[12:12 + headers_len])
            payload = msg[12 + headers_len:total - 4]
            out.append(_event(headers, payload))
        if at:
            del buf[:at]
        return out

    def close(self) -> list[Any]:
        if self._buf:
            raise FramingError(f"the event stream ended inside a message ({len(self._buf)} bytes)")
        return []


def _event(headers: dict[str, Any], payload: bytes) -> Any:
    kind = headers.get(":message-type", "event")
    text = payload.decode("utf-8", errors="replace")
    if kind == "event":
        data = _json(text) if text.strip() else {}
        return {str(headers.get(":event-type", "event")): data}
    # exception / error messages
    name = headers.get(":exception-type") or headers.get(":error-code")
    message = headers.get(":error-message")
    if not message and text.strip():
        try:
            body = json.loads(text)
        except ValueError:
            body = text
        message = body.get("message") or body.get("Message") if isinstance(body, dict) else body
    return StreamFailure(str(name) if name else None, str(message or name or "stream error"))


def _headers(data: bytes) -> dict[str, Any]:
    out: dict[str, Any] = {}
    i = 0
    while i < len(data):
        n = data[i]
        name = data[i + 1:i + 1 + n].decode("utf-8", errors="replace")
        i += 1 + n
        kind = data[i]
        i += 1
        value: Any
        if kind in (0, 1):
            value = kind == 0
        elif kind == 2:
            value = struct.unpack_from(">b", data, i)[0]
            i += 1
        elif kind == 3:
            value = struct.unpack_from(">h", data, i)[0]
            i += 2
        elif kind == 4:
            value = struct.unpack_from(">i", data, i)[0]
            i += 4
        elif kind in (5, 8):
            value = struct.unpack_from(">q", data, i)[0]
            i += 8
        elif kind in (6, 7):
            (size,) = struct.unpack_from(">H", data, i)
            raw = data[i + 2:i + 2 + size]
            value = raw.decode("utf-8", errors="replace") if kind == 7 else raw
            i += 2 + size
        elif kind == 9:
            value = data[i:i + 16]
            i += 16
        else:
            raise FramingError(f"event stream header type {kind}")
        out[name] = value
    return out


def encode_aws_event(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message with string headers (for test servers and tools)."""
    hb = b""
    for name, value in headers.items():
        nb, vb = name.encode(), value.encode()
        hb += bytes([len(nb)]) + nb + b"\x07" + struct.pack(">H", len(vb)) + vb
    total = 16 + len(hb) + len(payload)
    prelude = struct.pack(">II", total, len(hb))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    body = prelude + hb + payload
    return body + struct.pack(">I", zlib.crc32(body))


def _utf8() -> Any:
    return _UTF8(errors="replace")


_UTF8 = codecs.getincrementaldecoder("utf-8")  # looked up once, not per stream


def decoder_for(framing: str | None) -> SseDecoder | NdjsonDecoder | AwsEventStreamDecoder:
    if framing == "ndjson":
        return NdjsonDecoder()
    if framing == "aws-eventstream":
        return AwsEventStreamDecoder()
    return SseDecoder()
