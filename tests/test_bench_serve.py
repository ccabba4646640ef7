"""`toolrules bench serve`'s parts that decide what it prints: the bare pass-through
(the floor each proxy's added latency is read against) passes the upstream's answers
through unchanged over real HTTP, and the ratio lines compare what they say they do."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from toolrules.bench import _serve
from toolrules.bench._serve import BARE, GOAL_LATENCY, _ratios, _Run

pytest.importorskip("httptools")


def _start(code: str, url: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        try:
            httpx.get(url, timeout=1)
            return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"{url} did not answer")


@pytest.fixture(scope="module")
def servers():
    up_port, bare_port = _serve._port(), _serve._port()
    up = _start(f"from toolrules.bench._serve import fake_upstream; fake_upstream({up_port})",
                f"http://127.0.0.1:{up_port}/v1/models")
    bare = _start(f"from toolrules.bench._serve import pass_through; "
                  f"pass_through({bare_port}, {up_port})", f"http://127.0.0.1:{bare_port}/health")
    try:
        yield f"http://127.0.0.1:{up_port}", f"http://127.0.0.1:{bare_port}"
    finally:
        for proc in (bare, up):
            proc.kill()
            proc.wait(10)


@pytest.mark.parametrize("stream", [False, True])
def test_the_bare_pass_through_answers_what_the_upstream_answers(servers, stream):
    up, bare = servers
    body = {**_serve._BODY, "stream": stream}
    with httpx.Client(timeout=10) as client:  # one keep-alive connection, three requests
        direct = client.post(f"{up}/v1/chat/completions", json=body)
        through = [client.post(f"{bare}/v1/chat/completions", json=body) for _ in range(3)]
    for r in through:
        assert r.status_code == 200
        assert r.headers["content-type"] == direct.headers["content-type"]
        assert r.content == direct.content
    if stream:
        assert through[0].headers["transfer-encoding"] == "chunked"
        assert through[0].text.endswith("data: [DONE]\n\n")
    else:
        assert json.loads(through[0].content)["choices"][0]["message"]["content"] == \
            "Hello there!"


def test_the_bare_pass_through_says_502_when_the_upstream_is_gone():
    port = _serve._port()
    gone = _serve._port()  # nothing listens there
    proc = _start(f"from toolrules.bench._serve import pass_through; "
                  f"pass_through({port}, {gone})", f"http://127.0.0.1:{port}/health")
    try:
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=_serve._BODY,
                       timeout=10)
        assert r.status_code == 502
    finally:
        proc.kill()
        proc.wait(10)


def test_a_stream_the_upstream_breaks_off_is_broken_off_not_left_hanging():
    # an upstream that starts a stream, sends one event and closes the connection
    sock = socket.create_server(("127.0.0.1", 0))
    up_port = sock.getsockname()[1]

    def upstream() -> None:
        conn, _ = sock.accept()
        with conn:
            conn.recv(65536)
            event = b"data: {}\n\n"
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"transfer-encoding: chunked\r\n\r\n%x\r\n%s\r\n" % (len(event), event))

    thread = threading.Thread(target=upstream, daemon=True)
    thread.start()
    port = _serve._port()
    proc = _start(f"from toolrules.bench._serve import pass_through; "
                  f"pass_through({port}, {up_port})", f"http://127.0.0.1:{port}/health")
    try:
        with pytest.raises(httpx.RemoteProtocolError):
            httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions",
                       json={**_serve._BODY, "stream": True}, timeout=10)
    finally:
        proc.kill()
        proc.wait(10)
        thread.join(10)
        sock.close()


def _run(p50_ms: float, rps: float = 1000.0, ttfb_ms: float | None = None) -> _Run:
    return _Run(rps=rps, p50=p50_ms / 1000, p99=p50_ms / 500,
                ttfb50=None if ttfb_ms is None else ttfb_ms / 1000, errors=0, count=100)


def test_the_latency_lines_read_each_proxy_against_the_goal_and_the_floor():
    direct = {(1, False): _run(0.1), (16, False): _run(1.0)}
    results = {("direct", "openai", 1, False): direct[(1, False)],
               (BARE, "openai", 1, False): _run(0.3),                    # adds 0.2 ms
               ("toolrules serve", "anthropic", 1, False): _run(0.6),    # adds 0.5 ms
               ("peer", "anthropic", 1, False): _run(1.1),               # adds 1.0 ms
               ("toolrules serve", "anthropic", 16, False): _run(5, rps=2500),
               ("peer", "anthropic", 16, False): _run(9, rps=1000)}
    lines = dict(_ratios(results, direct))
    # the floor is not a peer: nothing is divided by it
    assert not any(BARE in label.split(",")[0] for label in lines)
    key = "toolrules serve / peer (anthropic),  1 client(s), non-stream, added p50"
    assert lines[key] == f"0.50 ms / 1.00 ms = 0.50  (goal <= {GOAL_LATENCY:g}: met)"
    assert lines[key + ", beside the floor"] == (
        f"goal 0.50 ms - {BARE} 0.20 ms = 0.30 ms for the proxy's own work; "
        "toolrules serve's: 0.30 ms")
    assert lines["toolrules serve / peer (anthropic), 16 client(s), non-stream"] == \
        "req/s 2.50x  (goal >= 2x: met)"


def test_a_proxy_over_the_goal_is_not_met_and_no_floor_means_no_floor_line():
    direct = {(1, True): _run(0.1, ttfb_ms=0.1)}
    results = {("toolrules serve", "anthropic", 1, True): _run(0.8, ttfb_ms=0.7),
               ("peer", "anthropic", 1, True): _run(1.1, ttfb_ms=1.1)}
    lines = dict(_ratios(results, direct))
    base = "toolrules serve / peer (anthropic),  1 client(s), stream"
    assert lines[f"{base}, added p50"] == "0.70 ms / 1.00 ms = 0.70  (goal <= 0.5: not met)"
    assert lines[f"{base}, added ttfb"] == "0.60 ms / 1.00 ms = 0.60  (goal <= 0.5: not met)"
    assert not any(label.endswith("beside the floor") for label in lines)
