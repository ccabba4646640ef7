"""Run in a subprocess by tests/test_hostile_runs.py: every word-character run and hostile
shape of the dialects named on the command line, whole and streamed in 1, 7 and
64-character deltas. Prints a JSON line before each input ("start") and after it, with
the seconds it took and whether the stream agreed with the whole parse, so the parent
can time each input and name the one that hung."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import toolrules
from toolrules.bench._hostile import hostile_shapes, word_runs

CASES = Path(__file__).resolve().parent.parent / "golden" / "dialects"


def _same(a: toolrules.ParsedResponse, b: toolrules.ParsedResponse) -> bool:
    return (a.content, a.reasoning_content, [(c.name, c.arguments) for c in a.tool_calls]) == \
        (b.content, b.reasoning_content, [(c.name, c.arguments) for c in b.tool_calls])


def main(dialects: list[str]) -> None:
    engine = toolrules.load(use_env=False)
    for d in dialects:
        shapes = word_runs(engine, d, CASES) + hostile_shapes(engine, d, CASES, big=20_000,
                                                              run=5_000, depth=500)
        for shape in shapes:
            parser = engine.text_parser(dialect=d, tools=shape.tools,
                                        generation_prompt=shape.prompt)
            whole = None
            for mode in ("whole", 1, 7, 64):
                print(json.dumps({"start": [d, shape.label, mode]}), flush=True)
                t = time.perf_counter()
                if mode == "whole":
                    whole = parser.parse(shape.text)
                    same = True
                else:
                    st = parser.stream()
                    text = shape.text
                    for i in range(0, len(text), mode):
                        st.feed(text[i:i + mode])
                    st.close()
                    assert whole is not None and st.result is not None
                    same = _same(st.result, whole)
                print(json.dumps({"done": [d, shape.label, mode], "chars": len(shape.text),
                                  "s": time.perf_counter() - t, "same": same}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
