"""`GET /v1/models` through `toolrules serve`: a route that passes model names through lists
what its upstream lists (asked through the provider rule's `http.models`, kept for
`models_cache` seconds), in each client API's own shape, read with the official SDKs; an
upstream that fails, refuses or stalls leaves the configured names, the reason logged."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import httpx
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from serve_helpers import ProxyServer, an, oa
from wire_server import Reply, Seen, WireServer, json_reply

OPENAI_LIST = {"object": "list", "data": [
    {"id": "qwen3-coder-30b", "object": "model", "created": 1735689600, "owned_by": "me"},
    {"id": "gemma-3-12b-it", "object": "model", "created": 1735689700, "owned_by": "me"}]}


class Upstream(WireServer):
    """A model server that answers GET .../models with `listing` (or a Reply) and counts
    how often it was asked."""

    def __init__(self, listing: Any = OPENAI_LIST) -> None:
        self.listing = listing
        super().__init__(self._answer)

    def _answer(self, seen: Seen) -> Reply:
        if seen.method == "GET":
            return self.listing if isinstance(self.listing, Reply) else json_reply(self.listing)
        return json_reply({"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": "ok"}}]})

    def listings(self) -> list[Seen]:
        return [s for s in self.requests if s.method == "GET"]


def config(routes: str, **server: Any) -> str:
    settings = ", ".join(f"{k}: {v}" for k, v in {"models_cache": 30, **server}.items())
    return f"server: {{{settings}}}\nroutes:\n{routes}"


def test_a_pass_through_route_lists_the_upstreams_models():
    with Upstream() as up, ProxyServer(upstream="openai-compatible",
                                       base_url=up.url + "/v1") as proxy:
        models = list(oa(proxy).models.list())
        assert [(m.id, m.created, m.object) for m in models] == [
            ("qwen3-coder-30b", 1735689600, "model"), ("gemma-3-12b-it", 1735689700, "model")]
        page = an(proxy).models.list()
        assert [(m.id, m.type, m.display_name) for m in page.data] == [
            ("qwen3-coder-30b", "model", "qwen3-coder-30b"),
            ("gemma-3-12b-it", "model", "gemma-3-12b-it")]
        assert page.data[0].created_at.year == 2025  # from the upstream's Unix time
        # Anthropic's list shape, as sent
        raw = httpx.get(proxy.url + "/v1/models", headers={"anthropic-version": "2023-06-01"},
                        timeout=10).json()
        assert raw["has_more"] is False
        assert (raw["first_id"], raw["last_id"]) == ("qwen3-coder-30b", "gemma-3-12b-it")
        assert raw["data"][0] == {"type": "model", "id": "qwen3-coder-30b",
                                  "display_name": "qwen3-coder-30b",
                                  "created_at": "2025-01-01T00:00:00Z"}
        # asked once: the list is kept for models_cache seconds
        assert [s.path for s in up.listings()] == ["/v1/models"]
        # a listed model is served by the route
        r = oa(proxy).chat.completions.create(model="gemma-3-12b-it",
                                              messages=[{"role": "user", "content": "hi"}])
        assert r.choices[0].message.content == "ok"


def test_the_list_is_kept_briefly_then_asked_again(tmp_path):
    with Upstream() as up:
        cfg = config(f"  - pattern: '.*'\n    upstream: {{provider: openai-compatible, "
                     f"base_url: {up.url}/v1}}\n", models_cache=0.5)
        with ProxyServer(config=cfg, tmp=tmp_path) as proxy:
            client = oa(proxy)
            for _ in range(3):
                assert len(list(client.models.list())) == 2
            assert len(up.listings()) == 1
            up.listing = {"object": "list", "data": [{"id": "new-model", "created": 5}]}
            time.sleep(0.6)
            assert [m.id for m in client.models.list()] == ["new-model"]
            assert len(up.listings()) == 2


def test_named_routes_first_and_each_model_where_a_request_for_it_would_go(tmp_path,
                                                                           monkeypatch):
    monkeypatch.setenv("UPSTREAM_MODELS_KEY", "sk-up-123")
    with Upstream() as up:
        cfg = config(f"""  - model: claude-sonnet-4-5
    upstream: {{provider: openai-compatible, model: qwen3-coder-30b, base_url: {up.url}/v1}}
  - model: gemma-3-12b-it
    upstream: {{provider: openai-compatible, model: gemma-3-12b-it, base_url: {up.url}/v1}}
  - pattern: '^(qwen|gemma)'
    upstream: {{provider: openai-compatible, base_url: {up.url}/v1,
                api_key_env: UPSTREAM_MODELS_KEY}}
""")
        with ProxyServer(config=cfg, tmp=tmp_path) as proxy:
            ids = [m.id for m in oa(proxy).models.list()]
    # gemma-3-12b-it is served by its own route (listed once, there); the pattern route
    # adds what it would serve
    assert ids == ["claude-sonnet-4-5", "gemma-3-12b-it", "qwen3-coder-30b"]
    assert up.listings()[0].headers["authorization"] == "Bearer sk-up-123"


def test_a_pattern_leaves_out_what_it_does_not_serve(tmp_path):
    with Upstream() as up:
        cfg = config(f"  - pattern: '^qwen'\n    upstream: {{provider: openai-compatible, "
                     f"base_url: {up.url}/v1}}\n")
        with ProxyServer(config=cfg, tmp=tmp_path) as proxy:
            assert [m.id for m in an(proxy).models.list().data] == ["qwen3-coder-30b"]


def test_an_anthropic_upstream_keeps_its_display_names(tmp_path, monkeypatch):
    listing = {"data": [{"type": "model", "id": "claude-sonnet-4-5",
                         "display_name": "Claude Sonnet 4.5",
                         "created_at": "2025-09-29T00:00:00Z"}],
               "has_more": False, "first_id": "claude-sonnet-4-5",
               "last_id": "claude-sonnet-4-5"}
    monkeypatch.setenv("UPSTREAM_ANTHROPIC_KEY", "sk-ant-test")
    with Upstream(listing) as up:
        cfg = config(f"  - pattern: '^claude'\n    upstream: {{provider: anthropic, "
                     f"base_url: {up.url}, api_key_env: UPSTREAM_ANTHROPIC_KEY}}\n")
        with ProxyServer(config=cfg, tmp=tmp_path) as proxy:
            page = an(proxy).models.list()
            openai_view = [(m.id, m.created) for m in oa(proxy).models.list()]
    assert [(m.id, m.display_name) for m in page.data] == [("claude-sonnet-4-5",
                                                           "Claude Sonnet 4.5")]
    assert page.data[0].created_at.isoformat().startswith("2025-09-29")
    assert openai_view[0][0] == "claude-sonnet-4-5"
    seen = up.listings()[0]
    assert seen.path == "/v1/models" and seen.query == {"limit": ["1000"]}
    assert seen.headers["x-api-key"] == "sk-ant-test"
    assert seen.headers["anthropic-version"] == "2023-06-01"


def test_an_ollama_upstream_lists_its_tags(tmp_path):
    listing = {"models": [{"name": "qwen3:8b", "model": "qwen3:8b",
                           "modified_at": "2025-05-01T10:00:00Z", "size": 1}]}
    with Upstream(listing) as up:
        cfg = config(f"  - pattern: '.*'\n    upstream: {{provider: ollama, "
                     f"base_url: {up.url}}}\n")
        with ProxyServer(config=cfg, tmp=tmp_path) as proxy:
            page = an(proxy).models.list()
    assert [(m.id, m.created_at.isoformat()[:10]) for m in page.data] == [("qwen3:8b",
                                                                           "2025-05-01")]
    assert up.listings()[0].path == "/api/tags"


FAILURES = {
    "500": lambda: Reply(status=500, body=b'{"error": {"message": "models index broken"}}',
                         headers={"Content-Type": "application/json"}),
    "not-json": lambda: Reply(status=200, body=b"<html>hello</html>"),
    "stalls": lambda: Reply(delay=3, status=200, body=json.dumps(OPENAI_LIST).encode()),
}


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_a_failing_upstream_leaves_the_configured_names(tmp_path, caplog, failure):
    caplog.set_level(logging.WARNING, logger="toolrules.serve")
    with Upstream(FAILURES[failure]()) as up:
        cfg = config(f"""  - model: local-qwen
    upstream: {{provider: openai-compatible, model: qwen3-coder-30b, base_url: {up.url}/v1}}
  - pattern: '.*'
    upstream: {{provider: openai-compatible, base_url: {up.url}/v1}}
""", models_timeout=0.5)
        with ProxyServer(config=cfg, tmp=tmp_path) as proxy:
            t0 = time.monotonic()
            assert [m.id for m in oa(proxy).models.list()] == ["local-qwen"]
            assert [m.id for m in an(proxy).models.list().data] == ["local-qwen"]
            assert time.monotonic() - t0 < 2.5  # each listing bounded by models_timeout
    warnings = _listing_warnings(caplog)
    assert len(warnings) == 2  # not kept: the next listing asks again
    assert "route 1 (openai-compatible at http://127.0.0.1:" in warnings[0]
    assert "only the configured names are listed" in warnings[0]
    reason = {"500": "models index broken", "not-json": "not JSON",
              "stalls": "timed out"}[failure]
    assert reason in warnings[0]


def _listing_warnings(caplog: Any) -> list[str]:
    """What the proxy logged about model listings (not, say, the start-time question for
    a route's chat template)."""
    return [r.getMessage() for r in caplog.records if r.name == "toolrules.serve"
            and "GET /v1/models" in r.getMessage()]


def test_an_unreachable_upstream_leaves_the_configured_names(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="toolrules.serve")
    cfg = config("  - pattern: '.*'\n    upstream: {provider: openai-compatible, "
                 "base_url: 'http://127.0.0.1:9/v1'}\n")
    with ProxyServer(config=cfg, tmp=tmp_path) as proxy:
        page = an(proxy).models.list()
    assert page.data == [] and page.has_more is False
    (message,) = _listing_warnings(caplog)
    assert "cannot reach 127.0.0.1:9" in message


def test_a_provider_without_a_models_endpoint_says_so(tmp_path, caplog, monkeypatch):
    caplog.set_level(logging.WARNING, logger="toolrules.serve")
    monkeypatch.setenv("UPSTREAM_GEMINI_KEY", "k")
    cfg = config("  - model: my-gemini\n    upstream: {provider: gemini, model: gemini-2.5-flash,"
                 " base_url: 'http://127.0.0.1:9', api_key_env: UPSTREAM_GEMINI_KEY}\n  - pattern: '^gemini'\n    upstream: "
                 "{provider: gemini, base_url: 'http://127.0.0.1:9', "
                 "api_key_env: UPSTREAM_GEMINI_KEY}\n")
    with ProxyServer(config=cfg, tmp=tmp_path) as proxy:
        assert [m.id for m in oa(proxy).models.list()] == ["my-gemini"]
    (message,) = [r.getMessage() for r in caplog.records if r.name == "toolrules.serve"]
    assert "names no models endpoint (`http.models` in its rule)" in message


@pytest.mark.parametrize("fast", [True, False])
def test_the_client_lists_models_over_either_http_stack(fast):
    """HttpModel.list_models: the small asyncio client (plain-http upstreams) and httpx
    (https, proxies) read the same list; a 401 is a ProviderError naming the status."""
    import asyncio

    from toolrules.clients._errors import ProviderError
    from toolrules.clients._http import HttpModel

    with Upstream() as up:
        model = HttpModel("openai-compatible", "", base_url=up.url + "/v1", api_key="sk-1",
                          fast=fast)

        async def both() -> Any:
            found = await model.list_models(timeout=5)
            up.listing = Reply(status=401, body=b'{"error": {"message": "bad key"}}')
            with pytest.raises(ProviderError) as e:
                await model.list_models(timeout=5)
            await model.aclose()
            return found, e.value

        found, error = asyncio.run(both())
    assert [m["id"] for m in found] == ["qwen3-coder-30b", "gemma-3-12b-it"]
    assert found[0]["created"] == 1735689600
    assert error.status == 401 and "bad key" in error.message
    assert up.listings()[0].headers["authorization"] == "Bearer sk-1"
