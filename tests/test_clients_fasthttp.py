"""The small asyncio HTTP/1.1 client (clients/_fasthttp.py) that `HttpModel(fast=True)` -
and so `toolrules serve` - uses for plain-http upstreams: framing, keep-alive, a pooled
connection the server closed, timeouts, and the same answers as the httpx path."""

from __future__ import annotations

import asyncio
import json
from itertools import pairwise
from typing import Any

import httpx
import pytest

from toolrules.clients._fasthttp import FastClient, usable
from toolrules.clients._http import HttpModel
from wire_server import WireServer, json_reply, sse_reply


class RawServer:
    """An asyncio server answering each request with the next canned bytes; counts
    connections; `close_after` closes a connection after that many answers."""

    def __init__(self, answers: list[Any], close_after: int | None = None):
        self.answers = list(answers)
        self.close_after = close_after
        self.connections = 0
        self.server: Any = None
        self.port = 0

    async def __aenter__(self) -> RawServer:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            served = 0
            try:
                while self.answers:
                    head = await reader.readuntil(b"\r\n\r\n")
                    length = int(next((h.split(b":")[1] for h in head.split(b"\r\n")
                                       if h.lower().startswith(b"content-length")), b"0"))
                    await reader.readexactly(length)
                    answer = self.answers.pop(0)
                    if isinstance(answer, tuple):  # pieces, written apart
                        for piece in answer:
                            writer.write(piece)
                            await writer.drain()
                            await asyncio.sleep(0.02)
                        served += 1
                        continue
                    if answer == b"HANG":
                        await asyncio.sleep(5)
                        continue
                    writer.write(answer)
                    await writer.drain()
                    served += 1
                    if self.close_after is not None and served >= self.close_after:
                        break
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            writer.close()

        self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.server.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/x"


_CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
_CHUNKED_BODY = b"5\r\nhello\r\n1;x=y\r\n \r\nA\r\n0123456789\r\n0\r\nx-t: 1\r\n\r\n"


@pytest.mark.parametrize("cuts", [(1,), (2, 9), (8, 13, 14), (20, 30, 40, 47),
                                  tuple(range(1, len(_CHUNKED_BODY)))])
def test_a_chunked_body_split_anywhere_is_read_whole_and_as_it_comes(cuts):
    bounds = (0, *cuts, len(_CHUNKED_BODY))
    pieces = tuple(_CHUNKED_BODY[a:b] for a, b in pairwise(bounds))

    async def go() -> None:
        async with RawServer([(_CHUNKED_HEAD, *pieces), ok(b"next")]) as srv:
            c = FastClient(5, 5)
            r = await _post(c, srv.url, stream=True)
            got = [p async for p in r.aiter_bytes()]
            assert b"".join(got) == b"hello 0123456789"
            if len(pieces) > 3:  # read as the pieces came, not at the end
                assert len(got) > 1
            nxt = await _post(c, srv.url)  # the connection was left clean for the next
            assert nxt.content == b"next" and srv.connections == 1
            await c.aclose()

    asyncio.run(go())


@pytest.mark.parametrize("body", [b"zz\r\nab\r\n0\r\n\r\n", b"5\r\nab"])
def test_a_broken_chunked_body_is_a_protocol_error(body):
    async def go() -> None:
        async with RawServer([_CHUNKED_HEAD + body], close_after=1) as srv:
            c = FastClient(5, 5)
            r = await _post(c, srv.url, stream=True)
            with pytest.raises(httpx.RemoteProtocolError):
                _ = [p async for p in r.aiter_bytes()]
            await c.aclose()

    asyncio.run(go())


def ok(body: bytes = b'{"a": 1}', extra: str = "") -> bytes:
    return (f"HTTP/1.1 200 OK\r\ncontent-length: {len(body)}\r\n{extra}\r\n").encode() + body


async def _post(client: FastClient, url: str, stream: bool = False) -> Any:
    req = client.build_request("POST", url, content=b"{}", headers={"x-a": "1"})
    return await client.send(req, stream=stream)


def test_keep_alive_and_framings():
    chunked = (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
               b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nx-trailer: 1\r\n\r\n")
    until_close = b"HTTP/1.1 200 OK\r\n\r\nall of it"

    async def go() -> None:
        async with RawServer([ok(), ok(b"[2]"), chunked, until_close]) as srv:
            c = FastClient(5, 5)
            r1 = await _post(c, srv.url)
            r2 = await _post(c, srv.url)
            assert (r1.content, r2.content) == (b'{"a": 1}', b"[2]")
            r3 = await _post(c, srv.url, stream=True)
            # the chunks that arrived together come as one piece
            assert [p async for p in r3.aiter_bytes()] == [b"abcde"]
            r4 = await _post(c, srv.url)
            assert r4.content == b"all of it" and r4.headers.get("Content-Length") is None
            assert srv.connections == 1  # one connection for all four
            await c.aclose()

    asyncio.run(go())


def test_a_pooled_connection_the_server_closed_is_replaced():
    async def go() -> None:
        async with RawServer([ok(), ok(b"[2]"), ok(b"[3]")], close_after=1) as srv:
            c = FastClient(5, 5)
            assert (await _post(c, srv.url)).content == b'{"a": 1}'
            await asyncio.sleep(0.05)  # the server has closed it by now
            assert (await _post(c, srv.url)).content == b"[2]"
            assert (await _post(c, srv.url)).content == b"[3]"
            assert srv.connections == 3
            await c.aclose()

    asyncio.run(go())


def test_connection_close_is_honoured():
    async def go() -> None:
        async with RawServer([ok(extra="connection: close\r\n"), ok()]) as srv:
            c = FastClient(5, 5)
            await _post(c, srv.url)
            await _post(c, srv.url)
            assert srv.connections == 2
            await c.aclose()

    asyncio.run(go())


def test_timeouts_and_refusals_raise_httpx_errors():
    async def go() -> None:
        async with RawServer([b"HANG"]) as srv:
            c = FastClient(0.3, 5)
            with pytest.raises(httpx.ReadTimeout):
                await _post(c, srv.url)
        with pytest.raises(httpx.ConnectError):
            await _post(FastClient(1, 1), "http://127.0.0.1:9/x")
        async with RawServer([b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort"],
                             close_after=1) as srv:
            with pytest.raises(httpx.RemoteProtocolError):
                await _post(FastClient(2, 2), srv.url)

    asyncio.run(go())


def test_usable_only_for_plain_http_without_a_proxy(monkeypatch):
    for var in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    assert usable("http://127.0.0.1:1234/v1")
    assert not usable("https://api.example.com/v1")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy:3128")
    assert not usable("http://models.internal:8000/v1")
    monkeypatch.setenv("NO_PROXY", "models.internal")
    assert usable("http://models.internal:8000/v1")


@pytest.mark.parametrize("fast", [False, True])
def test_http_model_reads_the_same_either_way(fast):
    body = {"id": "x", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {
                "role": "assistant", "content": "<tool_call>\n{\"name\": \"f\", \"arguments\": "
                "{\"a\": 1}}\n</tool_call>"}}]}
    events = [{"choices": [{"index": 0, "delta": {"content": body["choices"][0]["message"][
        "content"][:9]}}]}, {"choices": [{"index": 0, "delta": {"content": body["choices"][0][
            "message"]["content"][9:]}, "finish_reason": "stop"}]}, "data: [DONE]"]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    with WireServer() as srv:
        srv.replies.extend([json_reply(body), sse_reply(events),
                            json_reply({"error": {"message": "slow"}}, 429,
                                       {"Retry-After": "3"})])
        model = HttpModel("openai-compatible", "Qwen/Qwen3-8B", base_url=srv.url + "/v1",
                          max_retries=0, fast=fast)
        assert model._fast is fast

        async def go() -> Any:
            whole = await model.generate([{"role": "user", "content": "x"}], tools)
            chunks = [c async for c in model.stream([{"role": "user", "content": "x"}], tools)]
            try:
                await model.generate([{"role": "user", "content": "x"}], tools)
            except Exception as exc:
                err = exc
            await model.aclose()
            return whole, chunks, model.last_response, err

        whole, chunks, streamed, err = asyncio.run(go())
    assert [(c.name, c.arguments) for c in whole.tool_calls] == [("f", {"a": 1})]
    assert [(c.name, c.arguments) for c in streamed.tool_calls] == [("f", {"a": 1})]
    assert any(c.type == "tool_end" for c in chunks)
    assert (err.status, err.retry_after, err.code.name) == (429, 3.0, "RATE_LIMIT")
    assert json.loads(srv.requests[0].body)["model"] == "Qwen/Qwen3-8B"


@pytest.mark.parametrize("fast", [False, True])
def test_a_stream_answered_whole_still_streams(fast):
    """A server that ignores the stream flag and answers with one JSON body: the stream
    carries that answer (not nothing)."""
    body = {"id": "x", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {
                "role": "assistant", "content": "whole <tool_call>\n{\"name\": \"f\", "
                "\"arguments\": {\"a\": 1}}\n</tool_call>"}}]}
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    with WireServer() as srv:
        srv.replies.append(json_reply(body))
        model = HttpModel("openai-compatible", "Qwen/Qwen3-8B", base_url=srv.url + "/v1",
                          max_retries=0, fast=fast)

        async def go() -> Any:
            chunks = [c async for c in model.stream([{"role": "user", "content": "x"}], tools)]
            await model.aclose()
            return chunks

        chunks = asyncio.run(go())
    assert "".join(c.content or "" for c in chunks if c.type == "text") == "whole"
    assert [(c.tool_name, c.arguments) for c in chunks if c.type == "tool_end"] == \
        [("f", {"a": 1})]
    assert model.last_response.tool_calls[0].arguments == {"a": 1}
