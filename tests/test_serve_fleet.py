"""A route with several upstream servers of the same model, over real HTTP on 127.0.0.1:
two model servers with a prompt cache, each its own process (tests/cache_server.py), the
proxy in front, the official `openai` and `anthropic` SDKs as clients.

A conversation stays on one server across turns (its cache grows there); stopping that
server moves the next turn to the other with no client error, streamed and not; a health
check sees it gone and back, and the conversation returns to it; another proxy instance,
and a restarted proxy process, send the conversation where the first one did; a new
conversation goes to a server that is not busy; slots are pinned per conversation; a
configuration's mistakes are reported with path:line:col.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from cache_server import CacheServer
from serve_helpers import ProxyServer, an, oa
from toolrules import Message, RuleError
from toolrules.serve import load_config
from toolrules.serve._fleet import affinity_key

HERE = Path(__file__).resolve().parent
SYSTEM = "You are a careful coding agent. Use the tools you are given. " * 6


# ---------------------------------------------------------------- upstream processes

class Upstream:
    """One cache server process; `stop()` ends it, `start()` brings it back on its port."""

    def __init__(self, name: str, delay: float = 0.0):
        self.name = name
        self.delay = delay
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> Upstream:
        cmd = [sys.executable, str(HERE / "cache_server.py"), "--name", self.name,
               "--port", str(self.port), "--delay", str(self.delay)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("ready "), line
        self.port = int(line.split()[1])
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@pytest.fixture
def pair() -> Iterator[dict[str, Upstream]]:
    ups = {n: Upstream(n).start() for n in ("A", "B")}
    try:
        yield ups
    finally:
        for u in ups.values():
            u.stop()


def fleet_config(ups: dict[str, Upstream], *, interval: float = 30.0, extra: str = "") -> str:
    servers = ", ".join(u.url for u in ups.values())
    return f"""
routes:
  - model: coder
    upstream:
      provider: llamacpp
      model: cached-model
      chat_template: rules
      servers: [{servers}]
      health: {{interval: {interval}, timeout: 0.5}}
      connect_timeout: 2{extra}
"""


@contextmanager
def proxy_for(config: str, tmp: Path, engine: Any) -> Iterator[ProxyServer]:
    tmp.mkdir(parents=True, exist_ok=True)
    with ProxyServer(config=config, tmp=tmp, engine=engine) as p:
        yield p


def states(proxy: ProxyServer) -> dict[str, Any]:
    return {s.url: s for s in proxy.app.state.serve.upstreams.states()}


def wait_for(what: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


class Chat:
    """One conversation through the proxy (chat completions); `turn()` -> which server
    answered ("A" / "B") and the cached tokens it reported."""

    def __init__(self, first: str):
        self.msgs: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                           {"role": "user", "content": first}]

    def turn(self, proxy: ProxyServer, stream: bool = False) -> tuple[str, int]:
        client = oa(proxy)
        if stream:
            chunks = list(client.chat.completions.create(
                model="coder", messages=self.msgs, stream=True,
                stream_options={"include_usage": True}))
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            usage = chunks[-1].usage
        else:
            r = client.chat.completions.create(model="coder", messages=self.msgs)
            text, usage = str(r.choices[0].message.content), r.usage
        self.msgs += [{"role": "assistant", "content": text},
                      {"role": "user", "content": f"Go on ({len(self.msgs)})."}]
        details = usage.prompt_tokens_details
        return text.split(":")[0], details.cached_tokens if details else 0


# ---------------------------------------------------------------- affinity and failover

def test_a_conversation_stays_on_its_server_and_moves_when_it_goes_down(
        pair, tmp_path, engine, access, caplog):
    caplog.set_level(logging.INFO, logger="toolrules.serve")
    chat = Chat("Fix the failing test in tests/test_io.py.")
    with proxy_for(fleet_config(pair), tmp_path / "p1", engine) as p1:
        first = [chat.turn(p1, stream=bool(i % 2)) for i in range(3)]
        home = first[0][0]
        assert [s for s, _ in first] == [home] * 3  # one server for every turn
        assert all(cached > 0 for _, cached in first[1:])  # ... which holds the prefix
        assert access()[-1]["server"] == pair[home].url
        other = "B" if home == "A" else "A"

        pair[home].stop()
        caplog.clear()
        # streamed: the proxy fails over while nothing of an answer went anywhere
        server, cached = chat.turn(p1, stream=True)
        assert server == other and cached == 0  # the other server had none of it
        # a stream's access line is written as the stream ends: maybe just after the
        # client read its last chunk
        wait_for(access)
        assert access()[-1]["status"] == 200 and access()[-1]["server"] == pair[other].url
        assert any("is down" in r.getMessage() for r in caplog.records)
        assert states(p1)[pair[home].url].healthy is False
        assert chat.turn(p1)[0] == other  # the next turn stays where its cache now is

    pair[home].start()  # back on its port, with an empty cache
    # another proxy instance, sharing nothing with the first: the same server for the
    # same conversation
    with proxy_for(fleet_config(pair), tmp_path / "p2", engine) as p2:
        assert chat.turn(p2)[0] == home
        pair[home].stop()
        caplog.clear()
        # not streamed: the same failover
        assert chat.turn(p2)[0] == other
        assert access()[-1]["status"] == 200
        # said by the request that failed over - or by the first health check, when it
        # was still under way as the server stopped (a busy machine) and got there first
        assert any("is down" in r.getMessage() or "failed its health check" in r.getMessage()
                   for r in caplog.records)


def test_health_checks_take_a_server_out_and_bring_it_back(pair, tmp_path, engine, access):
    chat = Chat("Add a --verbose flag to the CLI.")
    with proxy_for(fleet_config(pair, interval=0.5), tmp_path, engine) as proxy:
        home = chat.turn(proxy)[0]
        other = "B" if home == "A" else "A"
        wait_for(lambda: all(s.healthy for s in states(proxy).values()))
        pair[home].stop()
        # no request needed: the periodic check sees it gone
        wait_for(lambda: states(proxy)[pair[home].url].healthy is False)
        assert chat.turn(proxy)[0] == other
        pair[home].start()
        wait_for(lambda: states(proxy)[pair[home].url].healthy is True)
        assert chat.turn(proxy)[0] == home  # back in rotation: the conversation returns
        assert {s.in_flight for s in states(proxy).values()} == {0}


def test_a_restarted_proxy_process_sends_the_next_turn_to_the_same_server(pair, tmp_path):
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text(fleet_config(pair), encoding="utf-8")
    chat = Chat("Why does the build fail on Windows?")

    @contextmanager
    def proxy_process() -> Iterator[ProxyServer]:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = subprocess.Popen([sys.executable, "-m", "toolrules", "serve", "--config",
                                 str(cfg), "--port", str(port), "--log-level", "warning"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            def up() -> bool:
                assert proc.poll() is None, "the proxy exited"
                try:
                    return httpx.get(url + "/health", timeout=1).status_code == 200
                except httpx.HTTPError:
                    return False
            wait_for(up, 60)
            yield type("P", (), {"url": url})()  # what oa() needs
        finally:
            proc.terminate()
            proc.wait(timeout=20)

    with proxy_process() as first:
        before = [chat.turn(first)[0] for _ in range(2)]
    with proxy_process() as again:
        after, cached = chat.turn(again)
    assert before == [after] * 2
    assert cached > 0  # that server still holds the conversation's prefix


def test_volatile_request_metadata_does_not_move_a_conversation(pair, tmp_path, engine):
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "List the files."}]
    seen = []
    with proxy_for(fleet_config(pair), tmp_path, engine) as proxy:
        for i in range(3):
            r = an(proxy).messages.create(model="coder", max_tokens=64, system=SYSTEM,
                                          messages=msgs, metadata={"user_id": f"session-{i}"})
            text = r.content[0].text
            seen.append(text.split(":")[0])
            msgs += [{"role": "assistant", "content": text},
                     {"role": "user", "content": f"Next ({i})."}]
    assert len(set(seen)) == 1


# ---------------------------------------------------------------- load and slots

def test_a_new_conversation_goes_to_a_server_that_is_not_busy(tmp_path, engine, access):
    with CacheServer("A", delay=1.5) as a, CacheServer("B", delay=1.5) as b:
        ups = {"A": a, "B": b}
        cfg = fleet_config({k: type("U", (), {"url": v.url + "/v1"})() for k, v in ups.items()},
                           extra="\n      balance_factor: 1")
        with proxy_for(cfg, tmp_path, engine) as proxy:
            fleet = proxy.app.state.serve.upstreams._fleets[0]
            busy = Chat("Refactor the parser.")
            result: list[Any] = []
            worker = threading.Thread(target=lambda: result.append(busy.turn(proxy)))
            worker.start()
            wait_for(lambda: sum(s.in_flight for s in states(proxy).values()) == 1)
            taken = next(u for u, s in states(proxy).items() if s.in_flight)
            # a new conversation whose own first choice is the busy server
            for n in range(100):
                fresh = Chat(f"Write a haiku about tests, number {n}.")
                key = affinity_key([Message(role=m["role"], content=m["content"])
                                    for m in fresh.msgs])
                if fleet.order(key)[0].url == taken:
                    break
            else:
                pytest.fail("no conversation prefers the busy server")
            server, _ = fresh.turn(proxy)
            worker.join(timeout=20)
            assert ups[server].url + "/v1" != taken  # it went to the idle one
            assert result and ups[result[0][0]].url + "/v1" == taken


def test_each_conversation_is_pinned_to_one_slot(tmp_path, engine):
    with CacheServer("A") as a, CacheServer("B") as b:
        ups = {"A": a, "B": b}
        cfg = fleet_config({k: type("U", (), {"url": v.url + "/v1"})() for k, v in ups.items()},
                           extra="\n      slots: 4")
        with proxy_for(cfg, tmp_path, engine) as proxy:
            slots = {}
            for n in range(6):
                chat = Chat(f"Task number {n}: summarise the changelog.")
                pinned = set()
                for _ in range(3):
                    srv = ups[chat.turn(proxy)[0]]
                    pinned.add(srv.bodies[-1]["id_slot"])
                assert len(pinned) == 1  # every turn of a conversation: its slot
                slots[n] = pinned.pop()
                assert srv.bodies[-1]["cache_prompt"] is True
            assert set(slots.values()) <= {0, 1, 2, 3} and len(set(slots.values())) > 1


def test_without_slots_the_server_chooses(tmp_path, engine):
    with CacheServer("A") as a, CacheServer("B") as b:
        cfg = fleet_config({"A": type("U", (), {"url": a.url + "/v1"})(),
                            "B": type("U", (), {"url": b.url + "/v1"})()})
        with proxy_for(cfg, tmp_path, engine) as proxy:
            Chat("Hello.").turn(proxy)
        assert all("id_slot" not in body for body in a.bodies + b.bodies)


# ---------------------------------------------------------------- configuration

def test_configuration_mistakes_are_reported_with_their_place(tmp_path, engine):
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text("""routes:
  - model: coder
    upstream:
      provider: llamacpp
      base_url: http://127.0.0.1:9/v1
      servers: [http://127.0.0.1:9/v1, 'ftp://elsewhere', http://127.0.0.1:9/v1/]
      balance_factor: 0.5
  - model: other
    upstream:
      provider: openai-compatible
      servers: [http://127.0.0.1:9/v1, http://127.0.0.1:10/v1]
      slots: 2
      health: {interval: 0}
""", encoding="utf-8")
    with pytest.raises(RuleError) as e:
        load_config(engine, cfg)
    text = str(e.value)
    name = os.path.relpath(cfg)
    assert f"{name}:7:7: [error] 'routes.0.upstream.balance_factor': 0.5 is not accepted " \
        "(min 1)" in text, text
    assert f"{name}:13:16: [error] 'routes.1.upstream.health.interval': 0 is not accepted " \
        "(min 0.5)" in text, text


def test_configuration_cross_checks_are_reported_with_their_place(tmp_path, engine):
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text("""routes:
  - model: coder
    upstream:
      provider: llamacpp
      base_url: http://127.0.0.1:9/v1
      servers: [http://127.0.0.1:9/v1, 'ftp://elsewhere', http://127.0.0.1:9/v1/]
  - model: other
    upstream:
      provider: openai-compatible
      servers: [http://127.0.0.1:9/v1, http://127.0.0.1:10/v1]
      slots: 2
""", encoding="utf-8")
    with pytest.raises(RuleError) as e:
        load_config(engine, cfg)
    name = os.path.relpath(cfg)
    lines = str(e.value).splitlines()[1:]
    assert [line.split(": [error] ")[0] for line in lines] == [
        f"{name}:5:7", f"{name}:6:40", f"{name}:6:59", f"{name}:11:7"], lines
    assert "either `base_url` (one server) or `servers`" in lines[0]
    assert "'ftp://elsewhere' is not an http(s) URL" in lines[1]
    assert "listed twice (first as servers[0])" in lines[2]
    assert "names no slot field" in lines[3] and "(serve-servers)" in lines[3]


def test_the_chat_template_is_asked_of_the_first_server_that_answers(tmp_path, engine):
    import socket

    from props_server import PropsServer

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    with PropsServer("{% for m in messages %}{{ m.content }}{% endfor %}") as up:
        cfg = tmp_path / "fleet.yaml"
        cfg.write_text(f"""routes:
  - model: coder
    upstream:
      provider: llamacpp
      servers: [http://127.0.0.1:{closed}/v1, {up.url}/v1]
""", encoding="utf-8")
        route = load_config(engine, cfg).routes[0]
    assert route.template is not None and route.template.reason is None
    assert route.template.url == f"{up.url}/props" and up.props_asked == 1


# ---------------------------------------------------------------- the choice itself

def _fleet(urls: list[str], **kw: Any) -> Any:
    from toolrules.serve._fleet import Fleet

    return Fleet(0, [(u, None) for u in urls], **kw)


def _key(n: int) -> bytes:
    key = affinity_key([Message(role="system", content=SYSTEM),
                        Message(role="user", content=f"task {n}")])
    assert key is not None
    return key


def test_adding_a_server_moves_only_the_conversations_it_now_comes_first_for():
    two = _fleet(["http://a:8080/v1", "http://b:8080/v1"])
    three = _fleet(["http://a:8080/v1", "http://b:8080/v1", "http://c:8080/v1"])
    keys = [_key(n) for n in range(600)]
    moved = [k for k in keys if two.order(k)[0].url != three.order(k)[0].url]
    assert all(three.order(k)[0].url == "http://c:8080/v1" for k in moved)
    assert 0.25 < len(moved) / len(keys) < 0.42  # about a third, none needlessly
    firsts = [two.order(k)[0].url for k in keys]
    assert 0.4 < firsts.count("http://a:8080/v1") / len(keys) < 0.6  # spread evenly
    # the list's order in the configuration does not matter
    flipped = _fleet(["http://b:8080/v1", "http://a:8080/v1"])
    assert [flipped.order(k)[0].url for k in keys] == firsts


def test_the_key_is_the_leading_content_and_nothing_else():
    sys_msg, first = Message(role="system", content="S"), Message(role="user", content="U")
    later = [sys_msg, first, Message(role="assistant", content="A"),
             Message(role="user", content="next")]
    assert affinity_key([sys_msg, first]) == affinity_key(later)
    assert affinity_key([sys_msg, Message(role="user", content="V")]) != affinity_key(later)
    assert affinity_key([Message(role="system", content="T"), first]) != affinity_key(later)
    assert affinity_key([]) is None


def test_bounded_load_for_new_conversations_only():
    fleet = _fleet(["http://a:8080/v1", "http://b:8080/v1"], balance_factor=1.0)
    key = next(_key(n) for n in range(100)
               if fleet.order(_key(n))[0].url == "http://a:8080/v1")
    a, b = fleet.order(key)
    a.in_flight = 1
    assert fleet.attempts(key, fresh=True)[0] is b   # a new conversation: the idle one
    assert fleet.attempts(key, fresh=False)[0] is a  # a later turn: where its cache is
    b.in_flight = 1
    assert fleet.attempts(key, fresh=True)[0] is a   # even again: its own first choice
    loose = _fleet(["http://a:8080/v1", "http://b:8080/v1"], balance_factor=2.0)
    la, _lb = loose.order(key)
    la.in_flight = 1
    assert loose.attempts(key, fresh=True)[0] is la  # 2 x the fair share allows it
    a.healthy = False
    assert fleet.attempts(key, fresh=False) == [b, a]  # down: last, as a last resort
