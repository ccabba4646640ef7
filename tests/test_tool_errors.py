"""Structured tool errors: rules/errors.yaml decides code, recoverability, retry strategy
and fix. TestToolErrorFromException and TestRetryStrategy are table tests of the exception mappings
and retry strategies."""

from __future__ import annotations

import asyncio
import subprocess

import pytest

import toolrules
from toolrules import ToolError, ToolErrorCode, get_retry_strategy, should_retry


class TestToolErrorFromException:
    """Receive result -> ToolError mapping."""

    def test_file_not_found(self):
        e = FileNotFoundError("foo.py")
        error = ToolError.from_exception(e, "read_file")
        assert error.code == ToolErrorCode.NOT_FOUND
        assert error.recoverable is True
        assert error.retry_strategy == "rephrase"

    def test_permission_denied(self):
        e = PermissionError("Cannot write to /etc/passwd")
        error = ToolError.from_exception(e, "write_file")
        assert error.code == ToolErrorCode.PERMISSION
        assert error.recoverable is False
        assert "suggested_fix" in error.message or error.suggested_fix

    def test_timeout(self):
        e = asyncio.TimeoutError()  # noqa: UP041 - the old alias, on purpose
        error = ToolError.from_exception(e, "run_command")
        assert error.code == ToolErrorCode.TIMEOUT
        assert error.recoverable is True
        assert error.retry_strategy == "same"

    def test_rate_limit(self):
        from httpx import HTTPStatusError, Request, Response

        req = Request("GET", "https://api.example.com")
        resp = Response(429, request=req)
        e = HTTPStatusError("Rate limited", request=req, response=resp)
        error = ToolError.from_exception(e, "web_search")
        assert error.code == ToolErrorCode.RATE_LIMIT
        assert error.recoverable is True

    def test_network_failure(self):
        import httpx

        e = httpx.ConnectError("Connection refused")
        error = ToolError.from_exception(e, "web_fetch")
        assert error.code == ToolErrorCode.NETWORK
        assert error.recoverable is True


class TestRetryStrategy:
    """Handle result with retry strategy: retry, then escalate."""

    def test_validation_error_rephrase(self):
        error = ToolError(code=ToolErrorCode.VALIDATION, message="Invalid path format",
                          recoverable=True)
        assert get_retry_strategy(error, attempt=1) == "rephrase"

    def test_timeout_escalates_after_retries(self):
        error = ToolError(code=ToolErrorCode.TIMEOUT, message="Command timed out",
                          recoverable=True)
        assert should_retry(error, attempt=1) is True
        assert should_retry(error, attempt=2) is True
        assert should_retry(error, attempt=3) is False
        assert get_retry_strategy(error, attempt=3) == "escalate"

    def test_permission_unrecoverable(self):
        error = ToolError(code=ToolErrorCode.PERMISSION, message="Cannot access /etc/shadow",
                          recoverable=False)
        assert should_retry(error, attempt=1) is False
        assert get_retry_strategy(error, attempt=1) == "abort"


def status_error(status: int):
    import httpx

    req = httpx.Request("GET", "https://api.example.com/x")
    return httpx.HTTPStatusError(f"HTTP {status}", request=req,
                                 response=httpx.Response(status, request=req))


@pytest.mark.parametrize(("status", "code", "recoverable"), [
    (400, ToolErrorCode.VALIDATION, True),
    (401, ToolErrorCode.PERMISSION, False),
    (403, ToolErrorCode.PERMISSION, False),
    (404, ToolErrorCode.NOT_FOUND, True),
    (408, ToolErrorCode.TIMEOUT, True),
    (422, ToolErrorCode.VALIDATION, True),
    (429, ToolErrorCode.RATE_LIMIT, True),
    (500, ToolErrorCode.EXECUTION, True),
    (502, ToolErrorCode.NETWORK, True),
    (503, ToolErrorCode.NETWORK, True),
    (504, ToolErrorCode.TIMEOUT, True),
])
def test_http_statuses(status, code, recoverable):
    error = ToolError.from_exception(status_error(status), "web_fetch")
    assert (error.code, error.recoverable) == (code, recoverable)
    assert error.details["status"] == status


def test_httpx_transport_errors():
    import httpx

    assert ToolError.from_exception(httpx.ConnectTimeout("slow"), "t").code is ToolErrorCode.TIMEOUT
    assert ToolError.from_exception(httpx.ReadTimeout("slow"), "t").code is ToolErrorCode.TIMEOUT
    assert ToolError.from_exception(httpx.ReadError("reset"), "t").code is ToolErrorCode.NETWORK
    assert ToolError.from_exception(httpx.RemoteProtocolError("eof"), "t").code is \
        ToolErrorCode.NETWORK


@pytest.mark.parametrize(("exc", "code"), [
    (ConnectionRefusedError("refused"), ToolErrorCode.NETWORK),
    (subprocess.TimeoutExpired("ls", 3), ToolErrorCode.TIMEOUT),
    (IsADirectoryError("src"), ToolErrorCode.VALIDATION),
    (NotADirectoryError("a/b"), ToolErrorCode.NOT_FOUND),
    (TypeError("read() got an unexpected keyword argument 'pth'"), ToolErrorCode.VALIDATION),
    (TypeError("unsupported operand"), ToolErrorCode.EXECUTION),
    (RuntimeError("API rate limit exceeded"), ToolErrorCode.RATE_LIMIT),
    (RuntimeError("DNS lookup failed"), ToolErrorCode.NETWORK),
    (ValueError("Access denied for user"), ToolErrorCode.PERMISSION),
    (KeyError("x"), ToolErrorCode.EXECUTION),
])
def test_exception_types_and_messages(exc, code):
    assert ToolError.from_exception(exc, "tool").code is code


def test_default_is_execution_with_escalation():
    error = ToolError.from_exception(ZeroDivisionError("division by zero"), "calc")
    assert error.code is ToolErrorCode.EXECUTION and error.retry_strategy == "escalate"
    assert error.details["exception_type"] == "ZeroDivisionError"
    assert "Tool 'calc' failed unexpectedly" in error.suggested_fix
    assert [get_retry_strategy(error, attempt=a) for a in (1, 2, 3, 4)] == \
        ["same", "interference", "vortex", "vortex"]


def test_the_ladder_for_rephrase():
    error = ToolError.from_exception(FileNotFoundError("x"), "read_file")
    assert [get_retry_strategy(error, attempt=a) for a in (1, 2, 3)] == \
        ["rephrase", "interference", "vortex"]


def test_cause_chain_is_followed():
    try:
        try:
            raise FileNotFoundError("config.yaml")
        except FileNotFoundError as inner:
            raise RuntimeError("tool failed") from inner
    except RuntimeError as outer:
        error = ToolError.from_exception(outer, "load_config")
    assert error.code is ToolErrorCode.NOT_FOUND
    assert error.details == {"exception_type": "RuntimeError", "rule": "file-not-found",
                             "cause_type": "FileNotFoundError"}


def test_to_dict_is_an_envelope_error():
    d = ToolError.from_exception(PermissionError("/etc"), "write_file").to_dict()
    assert d["code"] == "PERMISSION" and d["category"] == "permission"
    assert d["recoverable"] is False and d["retry_strategy"] == "abort"


def test_table_overlay_changes_the_ladder(tmp_path):
    import yaml

    from conftest import REPO

    table = yaml.safe_load((REPO / "rules" / "errors.yaml").read_text())
    table["codes"]["timeout"]["ladder"] = ["same", "escalate"]
    table["max_attempts"] = 5
    (tmp_path / "errors.yaml").write_text(yaml.safe_dump(table))
    engine = toolrules.load(paths=[tmp_path], use_env=False, cache=False)
    error = ToolError(code=ToolErrorCode.TIMEOUT, message="t", recoverable=True)
    assert get_retry_strategy(error, attempt=2, engine=engine) == "escalate"
    assert should_retry(error, attempt=3, engine=engine) is True
    # an error that names its own strategy uses that strategy's ladder
    same = ToolError(code=ToolErrorCode.TIMEOUT, message="t", recoverable=True,
                     retry_strategy="rephrase")
    assert get_retry_strategy(same, attempt=2, engine=engine) == "interference"
