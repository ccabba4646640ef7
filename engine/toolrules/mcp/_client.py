"""McpServer: one MCP server as toolrules uses it, through the official `mcp` SDK.

The server is started on first use (its tool listing is the first thing anyone needs),
reused for every call, and stopped by `close()` - or at interpreter exit, so a program
that forgets never leaves one running. Each server lives on its own thread with its own
event loop: the SDK's client holds task groups that must be entered and left on one loop,
while toolrules' callers come from any loop (a CLI's `asyncio.run`, `execute_sync` making a
loop per call, a chat session). Calls cross over with `run_coroutine_threadsafe`, so a
caller that gives up (the executor's timeout) cancels the request on the server's loop.

A server that exits at start, does not answer the handshake in `startup_seconds`, or
lists malformed tools is an McpError naming it (with the end of its stderr), and nothing
is left running. A server that dies later fails the call that meets it with a clear tool
error (SERVER_UNAVAILABLE) and is started again on the next call, `restarts` times per
session.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import tempfile
import threading
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from .._errors import McpError
from .._version import __version__
from ..rules._default import resolve_engine
from ..runtime._context import ToolFailure
from ._convert import McpTool, mcp_tools, result_output
from ._rules import Launch, McpServerSpec, mcp_rules

__all__ = ["CONTEXT_PARAMETER", "McpServer", "close_all", "need_sdk"]

# The SDK logs transport trouble (a line that is not JSON-RPC, a dead pipe) with
# tracebacks; our errors say what happened. Applications that configure logging still
# get the records (they propagate); only Python's last-resort printing is silenced.
logging.getLogger("mcp").addHandler(logging.NullHandler())

# The keyword the executor hands the ToolContext in (no MCP argument is called this).
CONTEXT_PARAMETER = "_toolrules_context"

_LIVE: weakref.WeakSet[McpServer] = weakref.WeakSet()
_JOIN_SECONDS = 15.0  # the SDK's own shutdown is bounded (stdin close, TERM, KILL: ~6 s)
_CONNECTION_CLOSED = -32000
_REQUEST_TIMEOUT = -32001


def need_sdk() -> None:
    """An McpError with the install hint when the `mcp` package is missing."""
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise McpError("MCP support needs the official SDK: pip install 'toolrules[mcp]'"
                       ) from None


def close_all() -> None:
    """Stop every server still running (registered with atexit)."""
    for server in list(_LIVE):
        with contextlib.suppress(Exception):
            server.close()


atexit.register(close_all)


class _Dead(Exception):
    """The connection to the server is gone."""


class McpServer:
    """One MCP server: `tools()` starts it (once) and lists its tools as registry tools,
    `call()` runs one tool, `close()` stops it. Thread-safe; any event loop may call."""

    def __init__(self, spec: McpServerSpec, *, workspace: str | Path | None = None,
                 engine: Any = None):
        self.spec = spec
        self.workspace = Path(workspace).expanduser().resolve() if workspace is not None \
            else None
        self.engine = resolve_engine(engine)
        self.rules = mcp_rules(self.engine)
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._client: Any = None
        self._stderr: TextIO | None = None
        self._listing: list[dict[str, Any]] | None = None
        self._tools: list[McpTool] | None = None
        self._restarts = 0
        self._closed = False
        self.state = "stopped"
        """stopped, running, dead (it stopped on its own), closed."""
        self.why: str | None = None
        """Why it is dead, when it is."""
        self.starts = 0

    def __repr__(self) -> str:
        return f"<McpServer {self.name} {self.state}>"

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def startup_seconds(self) -> float:
        return self.spec.startup_seconds or self.rules.startup_seconds

    @property
    def restarts(self) -> int:
        return self.spec.restarts if self.spec.restarts is not None else self.rules.restarts

    def describe(self) -> str:
        """How it is reached (the command line or the URL; no secrets)."""
        try:
            return self.spec.launch(self.workspace).display()
        except McpError:
            return self.spec.display()  # placeholders as written

    # ------------------------------------------------------------ starting

    def start(self) -> list[dict[str, Any]]:
        """Start the server if it is not running; its tool listing (wire shape)."""
        with self._lock:
            if self._closed:
                raise McpError(f"MCP server {self.name!r} was closed", server=self.name)
            if self.state == "running" and self._listing is not None:
                return self._listing
            need_sdk()
            launch = self.spec.launch(self.workspace)
            self._stop_thread()
            self._close_stderr()
            self._stderr = tempfile.TemporaryFile(  # noqa: SIM115 - closed by _stop_thread
                "w+", encoding="utf-8", errors="replace")
            ready: concurrent.futures.Future[list[dict[str, Any]]] = concurrent.futures.Future()
            thread = threading.Thread(target=self._thread_main, args=(launch, ready),
                                      name=f"toolrules-mcp-{self.name}", daemon=True)
            self._thread = thread
            _LIVE.add(self)
            thread.start()
            try:
                listing = ready.result(timeout=self.startup_seconds)
            except concurrent.futures.TimeoutError:
                self._stop_thread()  # the process is gone: its stderr is complete
                message = (f"MCP server {self.name!r} ({launch.display()}) did not finish "
                           f"starting (handshake and tool listing) within "
                           f"{self.startup_seconds:g} s{self._stderr_tail()}")
                self._close_stderr()
                raise McpError(message, server=self.name) from None
            except BaseException as exc:
                self._stop_thread()
                message = self._start_failure(launch, exc)
                self._close_stderr()
                raise McpError(message, server=self.name) from None
            self._listing = listing
            self.state, self.why = "running", None
            self.starts += 1
            return listing

    def tools(self, taken: set[str] | None = None) -> list[McpTool]:
        """The server's tools as registry tools (starting it when needed)."""
        with self._lock:
            listing = self.start()
            if self._tools is None or taken:
                try:
                    self._tools = mcp_tools(self.spec, listing, self.rules, engine=self.engine,
                                            taken=taken)
                except McpError:
                    self.close()  # nothing half-started
                    raise
            return list(self._tools)

    def _start_failure(self, launch: Launch, exc: BaseException) -> str:
        leaf = _leaf(exc)
        where = f"MCP server {self.name!r} ({launch.display()})"
        if isinstance(leaf, FileNotFoundError) and launch.transport == "stdio":
            return (f"{where} cannot be started: no program {launch.command!r} (install it or "
                    "give its full path)")
        if isinstance(leaf, PermissionError) and launch.transport == "stdio":
            return f"{where} cannot be started: {launch.command!r} is not executable"
        code = getattr(getattr(leaf, "error", None), "code", None)
        if code == _CONNECTION_CLOSED:
            verb = "exited" if launch.transport == "stdio" else "closed the connection"
            return f"{where} {verb} before it answered the handshake{self._stderr_tail()}"
        return f"{where} failed to start: {type(leaf).__name__}: {leaf}{self._stderr_tail()}"

    def _stderr_tail(self) -> str:
        f = self._stderr
        if f is None:
            return ""
        try:
            f.flush()
            f.seek(0)
            lines = [ln.rstrip() for ln in f.read().splitlines() if ln.strip()]
        except (OSError, ValueError):
            return ""
        if not lines:
            return " (it wrote nothing on stderr)"
        tail = lines[-self.rules.stderr_lines:]
        return "; its stderr ends with:\n    " + "\n    ".join(t[:300] for t in tail)

    # ------------------------------------------------------------ the server's thread

    def _thread_main(self, launch: Launch,
                     ready: concurrent.futures.Future[list[dict[str, Any]]]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            self._main = loop.create_task(self._serve(launch, ready))
            loop.run_until_complete(self._main)
        except BaseException as exc:  # cancelled while starting, or the SDK gave up
            if not ready.done():
                ready.set_exception(exc)
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self, launch: Launch,
                     ready: concurrent.futures.Future[list[dict[str, Any]]]) -> None:
        from mcp import Client
        from mcp.types import Implementation

        self._stop = asyncio.Event()
        client = Client(self._transport(launch), raise_exceptions=False,
                        client_info=Implementation(name="toolrules", version=__version__))
        try:
            async with client:
                listing: list[dict[str, Any]] = []
                cursor: str | None = None
                for _ in range(100):  # a paginator that never ends cannot hang the start
                    page = await client.list_tools(cursor=cursor)
                    listing.extend(t.model_dump(by_alias=True, mode="json", exclude_none=True)
                                   for t in page.tools)
                    cursor = page.next_cursor
                    if not cursor or len(listing) > self.rules.max_tools:
                        break
                self._client = client
                if not ready.done():
                    ready.set_result(listing)
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            elif not isinstance(exc, asyncio.CancelledError):
                self.state, self.why = "dead", f"{type(_leaf(exc)).__name__}: {_leaf(exc)}"
        finally:
            self._client = None

    def _transport(self, launch: Launch) -> Any:
        if launch.url is not None:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            http = create_mcp_http_client(headers=dict(launch.headers) or None)
            return _owned_http(streamable_http_client(launch.url, http_client=http), http)
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=launch.command or "", args=list(launch.args),
                                       env=dict(launch.env) or None, cwd=launch.cwd)
        return stdio_client(params, errlog=self._stderr or _devnull())

    # ------------------------------------------------------------ calling

    async def call(self, tool: str, arguments: Mapping[str, Any],
                   timeout: float | None = None) -> dict[str, Any]:
        """Run `tool` (the server's name) with `arguments`: the CallToolResult (wire shape).
        A dead server is started again (up to `restarts` times); one that dies during the
        call, or is gone, raises ToolFailure(SERVER_UNAVAILABLE); no answer within
        `timeout` raises ToolFailure(TIMEOUT)."""
        if self.state != "running":
            await asyncio.to_thread(self._revive, tool)
        loop, started = self._loop, self.starts
        if loop is None or self._client is None:
            raise self._unavailable(tool, self.why or "it is not running")
        fut = asyncio.run_coroutine_threadsafe(self._call(tool, dict(arguments), timeout), loop)
        try:
            return await asyncio.wrap_future(fut)
        except _Dead as exc:
            await asyncio.to_thread(self._mark_dead, started, str(exc))
            raise self._unavailable(tool, f"it stopped during the call ({exc})") from None
        except RuntimeError as exc:  # the loop closed under us: the server is gone
            await asyncio.to_thread(self._mark_dead, started, str(exc))
            raise self._unavailable(tool, "its connection closed") from None

    def handler(self, info: McpTool) -> Any:
        """The registry handler of one of this server's tools: the jail resolves its path
        arguments (symlinks included) in the session's workspace, the arguments go back to
        the server's own schema shape, and the result becomes a ToolResult output."""
        server = self

        async def call_mcp_tool(**kwargs: Any) -> Any:
            ctx = kwargs.pop(CONTEXT_PARAMETER)
            jail = getattr(ctx, "jail", None)
            if jail is not None:
                for pname in info.paths:
                    value = kwargs.get(pname)
                    for text in value if isinstance(value, list) else [value]:
                        if text is not None:
                            jail.check_resolved(text, pname)
            result = await server.call(info.remote, info.restore(kwargs),
                                       timeout=getattr(ctx, "timeout", None))
            output = result_output(server.name, info.remote, result)
            limit = getattr(getattr(ctx, "policy", None), "max_output_bytes", None)
            if limit is not None:  # the executor's cap (its own check), said with names
                guarded = server.engine.guard_tool_output(output, max_tool_output_bytes=limit)
                if not guarded.ok:
                    raise ToolFailure("TOOL_OUTPUT_TOO_LARGE", f"(MCP server {server.name!r}, "
                                      f"tool {info.remote!r})", rule="output.max_bytes",
                                      size=guarded.errors[0]["details"]["bytes"], limit=limit)
            return output

        call_mcp_tool.__qualname__ = f"mcp:{self.name}/{info.remote}"
        return call_mcp_tool

    async def _call(self, tool: str, arguments: dict[str, Any], timeout: float | None
                    ) -> dict[str, Any]:
        from mcp.shared.exceptions import MCPError

        client = self._client
        if client is None:
            raise _Dead("no connection")
        try:
            result = await client.call_tool(tool, arguments, read_timeout_seconds=timeout)
        except MCPError as exc:
            code = getattr(exc.error, "code", None)
            if code == _CONNECTION_CLOSED:
                raise _Dead(f"connection closed{self._stderr_tail()}") from None
            if code == _REQUEST_TIMEOUT:
                raise ToolFailure("TIMEOUT", f"MCP server {self.name!r} did not answer "
                                  f"{tool!r} within {timeout:g} s" if timeout else
                                  f"MCP server {self.name!r} did not answer {tool!r} in time",
                                  server=self.name, mcp_tool=tool) from None
            raise ToolFailure("TOOL_ERROR", f"MCP server {self.name!r}, tool {tool!r}: "
                              f"{exc.error.message} (error {code})", server=self.name,
                              mcp_tool=tool) from None
        except (OSError, EOFError) as exc:
            raise _Dead(f"{type(exc).__name__}: {exc}") from None
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)

    def _unavailable(self, tool: str, why: str) -> ToolFailure:
        return ToolFailure("SERVER_UNAVAILABLE", f"MCP server {self.name!r} "
                           f"({self.describe()}) cannot run {tool!r}: {why}",
                           server=self.name, mcp_tool=tool)

    def _mark_dead(self, started: int, why: str) -> None:
        with self._lock:
            if self.starts == started and self.state == "running":
                self.state, self.why = "dead", why
                self._stop_thread()

    def _revive(self, tool: str) -> None:
        with self._lock:
            if self.state == "running":
                return
            if self._closed:
                raise self._unavailable(tool, "it was closed")
            if self.state == "dead":
                if self._restarts >= self.restarts:
                    raise self._unavailable(tool, f"it stopped ({self.why}) and was already "
                                            f"restarted {self._restarts} time(s)")
                self._restarts += 1
            try:
                self.start()
            except McpError as exc:
                self.state, self.why = "dead", str(exc)
                raise self._unavailable(tool, str(exc)) from None

    # ------------------------------------------------------------ stopping

    def _stop_thread(self) -> None:
        thread, loop = self._thread, self._loop
        self._thread = None
        if thread is None:
            return
        if loop is not None and not loop.is_closed():
            def stop() -> None:
                if self._stop is not None:
                    self._stop.set()
                if self._client is None and self._main is not None:
                    self._main.cancel()  # still starting: stop waiting for it
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop)
        thread.join(_JOIN_SECONDS)
        self._loop = self._main = self._stop = None
        self._client = None

    def _close_stderr(self) -> None:
        if self._stderr is not None:
            with contextlib.suppress(OSError):
                self._stderr.close()
            self._stderr = None

    def close(self) -> None:
        """Stop the server (bounded: the SDK closes stdin, then terminates, then kills its
        process group). Calls after this fail; `tools()` raises."""
        with self._lock:
            self._closed = True
            self._stop_thread()
            self._close_stderr()
            self.state = "closed"
            _LIVE.discard(self)

    def __enter__(self) -> McpServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _devnull() -> TextIO:
    return open("/dev/null", "w")  # lives as long as the process


@contextlib.asynccontextmanager
async def _owned_http(transport: Any, http: Any) -> Any:
    """The HTTP transport plus the client it was given (closed with it)."""
    async with http, transport as streams:
        yield streams

