"""toolrules as an MCP server, as MCP clients meet it: the official SDK's client session
over stdio and over streamable HTTP, and the MCP Inspector's CLI (npm), listing and
calling toolrules' jailed, audited tools. A jail escape through MCP fails exactly like
the native call."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import toolrules
from mcp_helpers import npm_rules, workspace

mcp = pytest.importorskip("mcp")

pytestmark = pytest.mark.usefixtures("no_orphans")
TOOLRULES = [sys.executable, "-m", "toolrules"]


@pytest.fixture
def ws(tmp_path):
    return workspace(tmp_path)


def _serve_args(ws: Path, *extra: str) -> list[str]:
    return ["mcp", "serve", "--workspace", str(ws), *extra]


def _stdio(ws: Path, *extra: str) -> mcp.StdioServerParameters:
    return mcp.StdioServerParameters(command=TOOLRULES[0],
                                     args=[*TOOLRULES[1:], *_serve_args(ws, *extra)],
                                     env={"TOOLRULES_CACHE": "0"})


def _wire(result) -> dict:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def _audit(audit_dir: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(audit_dir.glob("*.jsonl"))
            for line in f.read_text().splitlines()]


def _native(ws: Path, tool: str, args: dict, trust: str = "workspace") -> dict:
    """The envelope of the same call through `toolrules exec` (the native path)."""
    proc = subprocess.run([*TOOLRULES, "exec", tool, json.dumps(args), "--workspace", str(ws),
                           "--trust", trust, "--json"], capture_output=True, text=True,
                          timeout=60)
    return json.loads(proc.stdout)


# ---------------------------------------------------------------- stdio

def test_sdk_client_over_stdio_lists_and_calls_jailed_tools(ws, tmp_path):
    audit = tmp_path / "audit"

    async def go():
        async with mcp.Client(_stdio(ws, "--trust", "workspace", "--audit-dir",
                                     str(audit))) as client:
            listed = await asyncio.wait_for(client.list_tools(), 30)
            tools = {t.name: t for t in listed.tools}
            read = await client.call_tool("read_file", {"path": "notes.txt"})
            wrote = await client.call_tool("write_file", {"path": "out.txt", "content": "hi\n"})
            blocked = await client.call_tool("read_file", {"path": ".env"})
            shell = await client.call_tool("run_command", {"command": "ls"})
            return tools, read, wrote, blocked, shell

    tools, read, wrote, blocked, shell = asyncio.run(asyncio.wait_for(go(), 90))
    assert set(tools) == {"read_file", "write_file", "edit_file", "list_files", "search_files"}
    assert tools["read_file"].annotations.read_only_hint is True
    assert tools["write_file"].annotations.destructive_hint is True
    assert tools["read_file"].input_schema["required"] == ["path"]
    assert _wire(read)["content"] == [{"type": "text", "text": "alpha\nbeta\n"}]
    assert not wrote.is_error and (ws / "out.txt").read_text() == "hi\n"
    assert blocked.is_error
    assert blocked.content[0].text.startswith("PERMISSION_DENIED: ")
    assert blocked.structured_content["error"]["details"]["rule"] == "paths.blocked: .env"
    assert shell.is_error and shell.structured_content["error"]["code"] == "TRUST_TOO_LOW"
    assert [(x["tool"], x["outcome"], x["origin"]) for x in _audit(audit)] == [
        ("read_file", "ok", "model"), ("write_file", "ok", "model"),
        ("read_file", "refused", "model"), ("run_command", "refused", "model")]


@pytest.mark.parametrize("tool,args", [
    ("read_file", {"path": "../../etc/passwd"}),
    ("read_file", {"path": "/etc/passwd"}),
    ("write_file", {"path": "../escape.txt", "content": "x"}),
    ("list_files", {"path": "~/"}),
])
def test_a_jail_escape_through_mcp_fails_exactly_as_natively(ws, tool, args):
    native = _native(ws, tool, args)["errors"][0]

    async def go():
        async with mcp.Client(_stdio(ws, "--trust", "workspace")) as client:
            return await client.call_tool(tool, args)

    result = asyncio.run(asyncio.wait_for(go(), 60))
    assert result.is_error
    served = result.structured_content["error"]
    assert (served["code"], served["message"], served["details"]["rule"]) == \
        (native["code"], native["message"], native["details"]["rule"])
    assert result.content[0].text == f"{native['code']}: {native['message']}"
    assert not (ws.parent / "escape.txt").exists()


def test_serve_proxies_an_mcp_server_under_the_policy(ws, tmp_path):
    rules = npm_rules(tmp_path / "rules")

    async def go():
        async with mcp.Client(_stdio(ws, "--trust", "read_only", "--tools", "none", "--mcp",
                                     "filesystem", "--rules", str(rules))) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            read = await client.call_tool("filesystem_read_text_file", {"path": "notes.txt"})
            write = await client.call_tool("filesystem_write_file",
                                           {"path": "x.txt", "content": "1"})
            return names, read, write

    names, read, write = asyncio.run(asyncio.wait_for(go(), 120))
    assert "filesystem_read_text_file" in names and "filesystem_write_file" not in names
    assert read.structured_content == {"content": "alpha\nbeta\n"}
    assert write.is_error and write.structured_content["error"]["code"] == "TRUST_TOO_LOW"
    assert not (ws / "x.txt").exists()


# ---------------------------------------------------------------- streamable HTTP

class _HttpServer:
    """`toolrules mcp serve --http 0` in a subprocess; its URL read from stderr."""

    def __init__(self, ws: Path, *extra: str):
        self.proc = subprocess.Popen([*TOOLRULES, *_serve_args(ws, "--http", "0", *extra)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)
        self.url = ""
        deadline = time.monotonic() + 60
        assert self.proc.stderr is not None
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            m = re.search(r"(http://127\.0\.0\.1:\d+/mcp)", line)
            if m:
                self.url = m.group(1)
                return
            if not line and self.proc.poll() is not None:
                break
        self.stop()
        raise AssertionError("toolrules mcp serve --http did not announce its URL")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        return self.proc.returncode


def test_sdk_client_over_streamable_http(ws, tmp_path):
    audit = tmp_path / "audit"
    server = _HttpServer(ws, "--trust", "read_only", "--audit-dir", str(audit))
    try:
        async def go():
            async with mcp.Client(server.url) as client:
                names = {t.name for t in (await client.list_tools()).tools}
                read = await client.call_tool("read_file", {"path": "notes.txt"})
                escape = await client.call_tool("read_file", {"path": "../../etc/passwd"})
                return names, read, escape

        names, read, escape = asyncio.run(asyncio.wait_for(go(), 60))
    finally:
        server.stop()
    assert names == {"read_file", "list_files", "search_files"}  # read_only trust
    assert read.content[0].text == "alpha\nbeta\n"
    assert escape.is_error and escape.structured_content["error"]["details"]["rule"] == \
        "path.escape"
    assert [(x["tool"], x["outcome"]) for x in _audit(audit)] == [
        ("read_file", "ok"), ("read_file", "refused")]


def test_a_registry_reaches_an_http_server_with_headers_from_the_environment(
        ws, tmp_path, monkeypatch):
    server = _HttpServer(ws, "--trust", "read_only")
    try:
        monkeypatch.setenv("TEST_MCP_TOKEN", "t0ken")
        registry = toolrules.ToolRegistry(workspace=ws)
        registry.add_mcp(url=server.url, name="remote",
                         headers={"Authorization": "Bearer ${TEST_MCP_TOKEN}"})
        executor = toolrules.ToolExecutor(registry, workspace=ws, trust="read_only")
        with registry:
            assert "remote_read_file" in registry.names()
            assert registry.mcp_tool("remote_read_file").tier == "read_only"
            r = executor.execute_sync({"name": "remote_read_file",
                                       "arguments": {"path": "notes.txt"}})
        assert r.ok and r.output == "alpha\nbeta\n"
        monkeypatch.delenv("TEST_MCP_TOKEN")
        bare = toolrules.ToolRegistry(workspace=ws)
        bare.add_mcp(url=server.url, name="remote",
                     headers={"Authorization": "Bearer ${TEST_MCP_TOKEN}"})
        with pytest.raises(toolrules.McpError, match="TEST_MCP_TOKEN, which is not set"):
            bare.names()
    finally:
        server.stop()


# ---------------------------------------------------------------- the MCP Inspector

def _inspector(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    from npm_packages import npm_bin

    cli = str(npm_bin("mcp-inspector"))
    return subprocess.run([cli, "--cli", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env={**os.environ, "TOOLRULES_CACHE": "0",
                                        "MCP_CATALOG_PATH": str(cwd / "catalog.json")})


def test_the_inspector_cli_lists_and_calls_tools(ws, tmp_path):
    target = [*TOOLRULES, *_serve_args(ws, "--trust", "workspace")]
    listed = _inspector(*target, "--method", "tools/list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    tools = {t["name"] for t in json.loads(listed.stdout)["tools"]}
    assert {"read_file", "write_file", "list_files"} <= tools
    called = _inspector(*target, "--method", "tools/call", "--tool-name", "read_file",
                        "--tool-arg", "path=notes.txt", cwd=tmp_path)
    assert called.returncode == 0, called.stderr
    assert json.loads(called.stdout)["content"][0]["text"] == "alpha\nbeta\n"
    refused = _inspector(*target, "--method", "tools/call", "--tool-name", "read_file",
                         "--tool-arg", "path=../../etc/passwd", cwd=tmp_path)
    body = json.loads(refused.stdout)
    assert body["isError"] is True
    assert body["content"][0]["text"].startswith("PERMISSION_DENIED: ")


def test_the_inspector_cli_over_http(ws, tmp_path):
    server = _HttpServer(ws, "--trust", "read_only")
    try:
        listed = _inspector(server.url, "--method", "tools/list", cwd=tmp_path)
        called = _inspector(server.url, "--method", "tools/call", "--tool-name",
                            "list_files", "--tool-arg", "path=.", cwd=tmp_path)
    finally:
        server.stop()
    assert listed.returncode == 0, listed.stderr
    assert {t["name"] for t in json.loads(listed.stdout)["tools"]} == \
        {"read_file", "list_files", "search_files"}
    assert called.returncode == 0, called.stderr
    assert "notes.txt" in json.loads(called.stdout)["content"][0]["text"]
