"""The hostile-input limit's confirming pass (bench/_limits.py): first figures only err
high on a shared machine, so the worst shapes are timed again until none left can be
worse - a slow spell during one shape's first timing does not decide the check, and a
shape that really is slow still does."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from toolrules.bench import _limits


@dataclass(frozen=True)
class _Shape:
    label: str
    text: str = "x" * 1024  # 1 KB: µs per KB is µs


@pytest.fixture
def timings(monkeypatch):
    """The confirming pass's timings, by shape label (seconds); the labels it timed."""
    again: dict[str, float] = {}
    asked: list[str] = []

    def fake_time(engine, name, shape, size, rounds, check=True):
        asked.append(shape.label)
        assert not check  # the first pass compared stream and whole already
        if again[shape.label] < 0:
            raise RuntimeError("this shape fails")
        return again[shape.label]

    monkeypatch.setattr(_limits, "_time", fake_time)
    return again, asked


def test_a_slow_spell_on_one_first_figure_does_not_decide_the_worst(timings):
    again, asked = timings
    # first figures (µs/KB): "spell" was caught by a slow spell; timed again it is fast
    timed = [(900.0, "d", _Shape("spell")), (300.0, "d", _Shape("real")),
             (250.0, "d", _Shape("fine")), (100.0, "d", _Shape("small"))]
    again.update(spell=120e-6, real=280e-6, fine=240e-6, small=90e-6)
    worst, where = _limits._confirmed_worst(None, timed, 1)
    assert (worst, where) == (pytest.approx(280.0), "d, real")
    # timing stops once the worst confirmed figure is above every first figure left
    assert asked == ["spell", "real"]


def test_a_confirmed_figure_is_never_above_its_first(timings):
    again, _ = timings
    timed = [(200.0, "d", _Shape("a")), (150.0, "d", _Shape("b"))]
    again.update(a=500e-6, b=100e-6)  # slower the second time: the first figure stands
    assert _limits._confirmed_worst(None, timed, 0) == (pytest.approx(200.0), "d, a")


def test_a_really_slow_shape_stays_the_worst(timings):
    again, _ = timings
    timed = [(5000.0, "d", _Shape("quadratic")), (300.0, "d", _Shape("other"))]
    again.update(quadratic=4900e-6, other=290e-6)
    worst, where = _limits._confirmed_worst(None, timed, 64)
    assert worst == pytest.approx(4900.0) and where == "d, quadratic"


def test_past_the_cap_the_next_first_figure_stands(timings, monkeypatch):
    again, asked = timings
    monkeypatch.setattr(_limits, "_CONFIRM_MAX", 2)
    timed = [(900.0, "d", _Shape("a")), (800.0, "d", _Shape("b")), (700.0, "d", _Shape("c"))]
    again.update(a=100e-6, b=100e-6, c=100e-6)
    assert _limits._confirmed_worst(None, timed, 1) == (700.0, "d, c")
    assert asked == ["a", "b"]


def test_a_shape_that_fails_when_timed_again_is_skipped(timings):
    again, _ = timings
    timed = [(900.0, "d", _Shape("broken")), (300.0, "d", _Shape("ok"))]
    again.update(broken=-1.0, ok=250e-6)
    assert _limits._confirmed_worst(None, timed, 1) == (pytest.approx(250.0), "d, ok")
