"""The servers of one route: which one takes a request, and which ones are up.

A route names one upstream server, or several of the same model (`upstream.servers`).
Each request is sent to one of them:

- **Affinity**: a conversation's key is a hash of its leading content as the client sent
  it - the system text and the first user message - which every later turn of the same
  conversation repeats. Rendezvous (highest-random-weight) hashing over the key and each
  server's URL orders the servers the same way in every worker, every replica and after
  every restart: no shared state. A later turn goes to the first healthy server of that
  order - the one that holds the conversation's prefix in its cache.
- **Load**: a new conversation (no assistant turn yet) has no cache to find. It goes to
  the first server of its order that is not busier than `balance_factor` times the
  fleet's fair share of the requests in flight (consistent hashing with bounded loads),
  so new conversations spread over idle servers and still start, when load allows, on the
  server their later turns will go to.
- **Health**: a server that refuses a connection (or closes it without a reply, or
  answers 503) is marked down and the request goes to the next server of the order -
  before any byte of an answer reached the client, never after. Every `interval` seconds
  each server is asked its provider rule's health path (`http.health`, else its model
  list) within `timeout` seconds; a server that answers 2xx is back in rotation.

Counts of requests in flight are each worker's own (a worker sees its own load).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import logging
import math
import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from .._types import Message, ParsedResponse, StreamChunk
from ..clients._errors import ProviderError

__all__ = ["Fleet", "FleetView", "UpstreamState", "affinity_key"]

log = logging.getLogger("toolrules.serve")


@dataclass(frozen=True)
class UpstreamState:
    """One upstream server of a route, for metrics and readiness."""

    route: int
    """The route's index in the configuration."""
    url: str | None
    """The server's base URL (None: the provider rule's default address)."""
    healthy: bool | None
    """The last health check's answer (None: never checked - a route with one server)."""
    in_flight: int
    """Requests this worker has sent it that have not ended yet."""


def affinity_key(messages: Sequence[Message]) -> bytes | None:
    """A conversation's key: a hash of its system messages before the first user message
    and that first user message, as the client sent them - what every later turn of the
    conversation repeats. None: no such content (any server will do)."""
    lead: list[Any] = []
    for m in messages:
        if m.role == "system":
            lead.append(["system", m.content])
        elif m.role == "user":
            lead.append(["user", m.content])
            break
    if not lead:
        return None
    # the repr of the texts and parts (dataclasses, the client's dicts in its order): the
    # same in every worker, several times cheaper than JSON with sorted keys
    return hashlib.blake2b(repr(lead).encode("utf-8", "backslashreplace"),
                           digest_size=16).digest()


def _score(key: bytes, url: str) -> int:
    """The rendezvous weight of `url` for `key` (the highest wins)."""
    return int.from_bytes(hashlib.blake2b(key + b"\0" + url.encode("utf-8"),
                                          digest_size=8).digest(), "big")


class _Server:
    __slots__ = ("client", "healthy", "in_flight", "url")

    def __init__(self, url: str, client: Any):
        self.url = url
        self.client = client
        self.healthy: bool | None = None
        self.in_flight = 0


class Fleet:
    """The servers of one route (one HTTP client each) and their state in this worker."""

    def __init__(self, route: int, clients: Sequence[tuple[str, Any]], *,
                 interval: float = 5.0, timeout: float = 2.0, balance_factor: float = 1.25,
                 slots: int | None = None, slot_field: str | None = None):
        self.route = route
        self.servers = [_Server(url, client) for url, client in clients]
        self.interval = interval
        self.timeout = timeout
        self.balance_factor = max(1.0, balance_factor)
        self.slots = slots
        self.slot_field = slot_field
        self._checks: asyncio.Task[None] | None = None
        # told of every request sent and ended, and of every server found up or down:
        # flight(route, url, +1 | -1), health(route, url, up) (the proxy's metrics)
        self.observer: Any = None

    @classmethod
    def for_route(cls, route: Any) -> Fleet:
        """The fleet of a configured route: an HttpModel per server (connection pools
        shared by all requests)."""
        from ..clients._http import HttpModel

        up = route.upstream
        key = os.environ.get(up.api_key_env) if up.api_key_env else None
        urls: Sequence[str | None] = up.servers or (up.base_url,)
        clients = []
        for url in urls:
            client = HttpModel(
                up.provider, up.model or "", base_url=url, api_key=key, timeout=up.timeout,
                connect_timeout=up.connect_timeout, max_retries=up.max_retries,
                request_overrides=route.request_overrides or None, engine=route.engine,
                fast=True,
                # pointed at another address, a provider's default key variable stays home
                env_key=bool(up.api_key_env) or not url)
            clients.append((url or client.base_url, client))
        rule = route.engine.provider_rules(up.provider).data
        slot_field = (rule.get("request") or {}).get("slot")
        return cls(route.index, clients, interval=up.health_interval,
                   timeout=up.health_timeout, balance_factor=up.balance_factor,
                   slots=up.slots, slot_field=slot_field if up.slots else None)

    @property
    def several(self) -> bool:
        return len(self.servers) > 1

    def first(self) -> Any:
        """A client of the route (the first healthy server's)."""
        return next((s.client for s in self.servers if s.healthy is not False),
                    self.servers[0].client)

    # ------------------------------------------------------------ choosing

    def order(self, key: bytes | None) -> list[_Server]:
        """Every server, the rendezvous order of `key` (configured order for no key)."""
        if key is None or not self.several:
            return list(self.servers)
        return sorted(self.servers, key=lambda s: _score(key, s.url), reverse=True)

    def attempts(self, key: bytes | None, fresh: bool) -> list[_Server]:
        """The servers to try, in turn: the chosen one first, then the other healthy
        ones in the key's order, then (a last resort: health can be stale) the ones
        marked down."""
        ranked = self.order(key)
        if not self.several:
            return ranked
        up = [s for s in ranked if s.healthy is not False]
        down = [s for s in ranked if s.healthy is False]
        if fresh and len(up) > 1:
            # bounded load: no server above balance_factor x the fair share (rounded up)
            cap = math.ceil(self.balance_factor * (sum(s.in_flight for s in up) + 1) / len(up))
            chosen = next((s for s in up if s.in_flight + 1 <= cap),
                          min(up, key=lambda s: s.in_flight))
            up.remove(chosen)
            up.insert(0, chosen)
        return up + down

    def slot(self, key: bytes | None) -> dict[str, Any] | None:
        """The request field pinning the conversation to one of its server's slots."""
        if not self.slot_field or not self.slots or key is None:
            return None
        n = int.from_bytes(hashlib.blake2b(key + b"\0slot", digest_size=8).digest(), "big")
        return {self.slot_field: n % self.slots}

    def failed(self, server: _Server, exc: ProviderError) -> bool:
        """Does this failure send the request on to the next server? (It never began an
        answer, or the server said 503: not ready.) The server is marked down."""
        if not self.several or not (exc.unanswered or exc.status == 503):
            return False
        if server.healthy is not False:
            log.warning("route %d: server %s is down (%s); its requests go to the other "
                        "servers until it answers its health check", self.route, server.url,
                        exc.message)
        server.healthy = False
        return True

    # ------------------------------------------------------------ health

    def watch(self) -> None:
        """Start the periodic health checks in the running loop (once per loop)."""
        if not self.several:
            return
        task = self._checks
        if task is not None and not task.done():
            return
        self._checks = asyncio.get_running_loop().create_task(self._check_forever())

    async def _check_forever(self) -> None:
        while True:
            await self.check()
            await asyncio.sleep(self.interval)

    async def check(self) -> None:
        """Ask every server once (concurrently), each within the timeout."""
        await asyncio.gather(*(self._check(s) for s in self.servers))

    async def _check(self, server: _Server) -> None:
        try:
            reason = await server.client.health(self.timeout)
        except ValueError:  # the rule names nowhere to ask: a down server is retried
            reason = None
        except Exception as exc:  # a check that fails is a server that is not healthy
            reason = f"{type(exc).__name__}: {exc}"
        healthy = reason is None
        if self.observer is not None:
            self.observer.health(self.route, server.url, healthy)
        if healthy and server.healthy is False:
            log.info("route %d: server %s is healthy again", self.route, server.url)
        elif not healthy and server.healthy is not False:
            log.warning("route %d: server %s failed its health check (%s)", self.route,
                        server.url, reason)
        server.healthy = healthy

    def states(self) -> list[UpstreamState]:
        return [UpstreamState(self.route, s.url, s.healthy if self.several else None,
                              s.in_flight) for s in self.servers]

    async def aclose(self) -> None:
        task, self._checks = self._checks, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        for s in self.servers:
            with contextlib.suppress(Exception):
                await s.client.aclose()

    # ------------------------------------------------------------ requests

    def view(self, model: str, as_model: str) -> FleetView:
        self.watch()
        return FleetView(self, model, as_model)


class FleetView:
    """One request's client: the HttpModel interface the exchange uses (generate,
    stream, last_response, last_rewrites), sent to the server the fleet chooses; `server`
    is the URL that answered."""

    def __init__(self, fleet: Fleet, model: str, as_model: str):
        self._fleet = fleet
        self.provider: str = fleet.servers[0].client.provider
        self.model = model
        self.as_model = as_model
        self.last_response: ParsedResponse | None = None
        self.last_rewrites: tuple[Any, ...] = ()
        self.last_body: dict[str, Any] | None = None
        self.server: str | None = None
        self._sending: Any = None  # the server's client with a request in flight

    def sent(self) -> tuple[dict[str, Any] | None, tuple[Any, ...]]:
        """The body of the request in flight (once it is built) and the turn rewrites
        made to build it; else the last request's."""
        c = self._sending if self._sending is not None else self
        return c.last_body, c.last_rewrites

    def _client(self, server: _Server) -> Any:
        view = copy.copy(server.client)
        view.model = self.model
        view.as_model = self.as_model
        view.last_response = None
        view.last_rewrites = ()
        view.last_body = None
        return view

    def _plan(self, messages: Sequence[Message], options: dict[str, Any]
              ) -> tuple[list[_Server], dict[str, Any]]:
        fleet = self._fleet
        if not fleet.several and not fleet.slot_field:  # one server, nothing to choose
            return list(fleet.servers), options
        key = affinity_key(messages)
        fresh = not any(m.role == "assistant" for m in messages)
        order = fleet.attempts(key, fresh)
        if self.server is not None:  # a validation retry stays where the request went
            order.sort(key=lambda s: s.url != self.server)
        pin = fleet.slot(key)
        if pin:
            options = {**options, "request_overrides": {
                **(options.get("request_overrides") or {}), **pin}}
        return order, options

    async def generate(self, messages: Sequence[Message], tools: Any = None,
                       tool_choice: Any = "auto", **options: Any) -> ParsedResponse:
        order, options = self._plan(messages, options)
        obs = self._fleet.observer
        for i, server in enumerate(order):
            client = self._sending = self._client(server)
            server.in_flight += 1
            if obs is not None:
                obs.flight(self._fleet.route, server.url, 1)
            try:
                parsed: ParsedResponse = await client.generate(messages, tools, tool_choice,
                                                               **options)
            except ProviderError as exc:
                self._down(server, exc)
                if self._fleet.failed(server, exc) and i + 1 < len(order):
                    continue
                raise
            finally:
                server.in_flight -= 1
                if obs is not None:
                    obs.flight(self._fleet.route, server.url, -1)
                self.last_rewrites = client.last_rewrites
                self.last_body = client.last_body
                self._sending = None
            self._answered(server)
            self.last_response = client.last_response
            return parsed
        raise AssertionError("a fleet has at least one server")  # pragma: no cover

    def stream(self, messages: Sequence[Message], tools: Any = None,
               tool_choice: Any = "auto", **options: Any) -> AsyncIterator[StreamChunk]:
        return self._stream(messages, tools, tool_choice, options)

    async def _stream(self, messages: Sequence[Message], tools: Any, tool_choice: Any,
                      options: dict[str, Any]) -> AsyncIterator[StreamChunk]:
        order, options = self._plan(messages, options)
        obs = self._fleet.observer
        for i, server in enumerate(order):
            client = self._sending = self._client(server)
            began = False
            server.in_flight += 1
            if obs is not None:
                obs.flight(self._fleet.route, server.url, 1)
            try:
                async for chunk in client.stream(messages, tools, tool_choice, **options):
                    if not began:
                        began = True
                        self._answered(server)
                    yield chunk
            except ProviderError as exc:
                if not began:
                    self._down(server, exc)
                # the next server only while nothing of this one's answer went anywhere
                if not began and self._fleet.failed(server, exc) and i + 1 < len(order):
                    continue
                raise
            finally:
                server.in_flight -= 1
                if obs is not None:
                    obs.flight(self._fleet.route, server.url, -1)
                self.last_rewrites = client.last_rewrites
                self.last_body = client.last_body
                self._sending = None
            self._answered(server)
            self.last_response = client.last_response
            return

    def _down(self, server: _Server, exc: ProviderError) -> None:
        """A server that did not answer, or answered 5xx, is down for the metrics."""
        obs = self._fleet.observer
        if obs is not None and (exc.unanswered or (exc.status or 0) >= 500):
            obs.health(self._fleet.route, server.url, False)

    def _answered(self, server: _Server) -> None:
        self.server = server.url
        obs = self._fleet.observer
        if obs is not None:
            obs.health(self._fleet.route, server.url, True)
        if server.healthy is False:  # tried as a last resort, and it answers
            server.healthy = True
