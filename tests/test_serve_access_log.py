"""The access line (serve/_app.py `ServeApp._log`): written straight to the proxy's own
handler when it is the only one and writes bare messages - the same line the logging
machinery would write - and through that machinery whenever anything else could act on
the record (a filter, another formatter, another handler, propagation)."""

from __future__ import annotations

import io
import json
import logging

import pytest

from toolrules.serve import _app
from toolrules.serve._app import PlainLines, ServeApp, access_log

INFO = {"time": 1764412345.123, "id": "0123456789abcdef01234567", "method": "POST",
        "path": "/v1/messages", "front": "anthropic", "stream": True, "status": 200,
        "note": "naïve ✓ \u2028"}


@pytest.fixture
def plain(monkeypatch):
    """The access logger set up as `toolrules serve` sets it up, writing to a buffer (a
    logger of its own: the test runner's log capture stays out of it)."""
    logger = logging.Logger(access_log.name, logging.INFO)
    logger.propagate = False
    handler = PlainLines()
    out = io.StringIO()
    handler.setStream(out)
    logger.addHandler(handler)
    monkeypatch.setattr(_app, "access_log", logger)
    return handler, out


def _log() -> None:
    ServeApp._log(object(), dict(INFO))  # type: ignore[arg-type]  (it uses no state)


def test_the_direct_line_is_the_line_the_record_would_write(plain, monkeypatch):
    handler, out = plain
    made: list[tuple] = []
    with monkeypatch.context() as m:
        m.setattr(logging, "LogRecord", lambda *a, **k: made.append(a))  # none is made
        _log()
    direct = out.getvalue()
    assert made == []
    assert direct.endswith("\n") and json.loads(direct) == INFO
    # the same record through logging's own path, to the same handler
    record = logging.LogRecord(access_log.name, logging.INFO, __file__, 0,
                               direct[:-1], None, None, "_log")
    again = io.StringIO()
    handler.setStream(again)
    handler.handle(record)
    assert again.getvalue() == direct


def test_a_filter_on_the_handler_still_sees_every_record(plain):
    handler, out = plain
    seen: list[str] = []
    handler.addFilter(lambda record: seen.append(record.getMessage()) or False)
    _log()
    assert len(seen) == 1 and json.loads(seen[0]) == INFO
    assert out.getvalue() == ""  # the filter refused it


def test_a_filter_on_the_logger_still_decides(plain):
    _, out = plain
    _app.access_log.addFilter(lambda record: False)
    _log()
    assert out.getvalue() == ""


def test_another_formatter_is_used(plain):
    handler, out = plain
    handler.setFormatter(logging.Formatter("access %(levelname)s %(message)s"))
    _log()
    line = out.getvalue()
    assert line.startswith("access INFO {") and json.loads(line[len("access INFO "):]) == INFO


def test_a_second_handler_gets_the_record_too(plain):
    _, out = plain
    other = io.StringIO()
    second = logging.StreamHandler(other)
    _app.access_log.addHandler(second)
    _log()
    assert json.loads(out.getvalue()) == INFO and json.loads(other.getvalue()) == INFO


def test_a_handler_above_info_writes_nothing(plain):
    handler, out = plain
    handler.setLevel(logging.WARNING)
    _log()
    assert out.getvalue() == ""


def test_a_failing_stream_is_reported_not_raised(plain, capsys, monkeypatch):
    handler, _ = plain

    class Broken(io.StringIO):
        def write(self, s: str) -> int:
            raise OSError("disk full")

    handler.setStream(Broken())
    monkeypatch.setattr(logging, "raiseExceptions", True)
    _log()  # no exception reaches the request
    assert "disk full" in capsys.readouterr().err
