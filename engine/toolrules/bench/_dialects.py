"""Bench section `dialects`: parse speed against a floor, and streaming cost per delta.

- non-stream: median parse time over the hermes texts (the conformance corpus's
  qwen3-hermes fixtures when present, else golden/dialects/hermes.cases.yaml) divided by
  the median time of the floor `re.findall` + `json.loads` on the same texts, same run;
- streaming: one call whose string argument is 16 KB and 64 KB, fed one character per
  delta: microseconds per delta, and the 64 KB / 16 KB total-time ratio (4.0 = linear);
- hostile shapes (bench/_hostile.py: deep nesting, huge arguments, escapes, runs of
  markers and whitespace, long and unclosed headers) for every dialect, parsed whole and
  streamed in 1- and 64-character deltas: the worst µs per KB of each mode and where
  (target <= 2000), and how many streams differed from the whole parse or raised. These
  are CPU times (time.process_time): on a machine shared with other work, wall time
  measures the neighbours more than the parser.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time
from pathlib import Path
from typing import Any

__all__ = ["bench"]

_FLOOR = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


def _hermes_texts(engine: Any) -> tuple[list[tuple[str, str | None]], str]:
    from ..rules._loader import bundled_layer

    conf = Path(os.environ.get("TOOLRULES_CONFORMANCE_DIR",
                               bundled_layer().rules.parent.parent / "shared" / "conformance"))
    fam = conf / "fixtures" / "qwen3-hermes"
    texts: list[tuple[str, str | None]] = []
    if fam.is_dir():
        for f in sorted(fam.glob("*.jsonl")):
            for line in f.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    fx = json.loads(line)
                    texts.append((fx["raw_output"], fx.get("generation_prompt")))
        return texts, f"{len(texts)} conformance qwen3-hermes fixtures"
    import yaml

    cases = bundled_layer().rules.parent / "golden" / "dialects" / "hermes.cases.yaml"
    data = yaml.safe_load(cases.read_text(encoding="utf-8"))
    texts = [(c["text"], c.get("generation_prompt", data.get("generation_prompt")))
             for c in data["cases"]]
    return texts, f"{len(texts)} golden hermes cases"


def _median_time(fn: Any, rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _floor(text: str) -> list[Any]:
    out = []
    for body in _FLOOR.findall(text):
        try:  # noqa: SIM105 - contextlib.suppress would slow the floor down, flattering us
            out.append(json.loads(body))
        except ValueError:
            pass
    return out


def _cases_dir() -> Path:
    from ..rules._loader import bundled_layer

    return bundled_layer().rules.parent / "golden" / "dialects"


def _stream(parser: Any, text: str, size: int) -> Any:
    st = parser.stream()
    for k in range(0, len(text), size):
        st.feed(text[k:k + size])
    st.close()
    return st.result


def _key(result: Any) -> Any:
    return (result.content, result.reasoning_content,
            [(c.name, c.arguments) for c in result.tool_calls], result.warnings)


def bench(engine: Any, quick: bool) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    texts, source = _hermes_texts(engine)
    rounds = 200 if quick else 2000
    parsers = {gp: engine.text_parser(dialect="hermes", generation_prompt=gp)
               for gp in {gp for _, gp in texts}}
    ours, floor = [], []
    for text, gp in texts:
        p = parsers[gp]
        ours.append(_median_time(lambda p=p, text=text: p.parse(text), rounds))
        floor.append(_median_time(lambda text=text: _floor(text), rounds))
    ratios = [a / b for a, b in zip(ours, floor)]
    out.append((f"hermes parse() median ({source})", f"{statistics.median(ours) * 1e6:.1f} µs"))
    out.append(("floor re.findall + json.loads median, same texts",
                f"{statistics.median(floor) * 1e6:.1f} µs"))
    out.append(("ratio of medians (target <= 2x)",
                f"{statistics.median(ours) / statistics.median(floor):.2f}x"))
    out.append(("median of per-text ratios", f"{statistics.median(ratios):.2f}x"))

    totals = {}
    for kb in (16, 64):
        arg = ("0123456789abcdef" * 64 * kb)[: kb * 1024]
        text = '<tool_call>{"name": "write_file", "arguments": {"content": "' + arg + '"}}</tool_call>'
        parser = engine.text_parser(dialect="hermes")
        reps = 1 if quick else 3
        best = float("inf")
        for _ in range(reps):
            st = parser.stream()
            t0 = time.process_time()  # CPU time: wall time on a busy machine is noise
            for ch in text:
                st.feed(ch)
            st.close()
            dt = time.process_time() - t0
            best = min(best, dt)
        totals[kb] = best
        out.append((f"stream {kb} KB string argument, 1-char deltas (target <= 10 µs)",
                    f"{best / len(text) * 1e6:.2f} µs/delta"))
    out.append(("64 KB / 16 KB stream time ratio (linear = 4.0, target <= 4.5)",
                f"{totals[64] / totals[16]:.2f}"))
    return out
