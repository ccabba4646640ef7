"""Golden files are exactly what the generators produce (run `toolrules golden regen`)."""

from __future__ import annotations

from toolrules.golden import check


def test_golden_files_up_to_date():
    out: list[str] = []
    assert check("*", echo=out.append) == 0, "\n".join(out[-60:])
