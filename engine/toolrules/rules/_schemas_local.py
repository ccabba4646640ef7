"""The schema of rules/local.yaml: the embedded local model (`toolrules.connect("local")`),
interpreted by clients/_local.py."""

from __future__ import annotations

from typing import Any

from ._schema_kit import _doc, _str

__all__ = ["LOCAL_SCHEMA", "TABLE_SCHEMAS"]


def _num(doc: str, example: str, kind: str = "integer", low: float = 0,
         nullable: bool = False) -> dict[str, Any]:
    return {"type": kind, "min": low, "nullable": nullable, **_doc(doc, example)}


LOCAL_SCHEMA: dict[str, Any] = {
    "description": _str("what this table is for"),
    "model": {
        "type": "dict", "required": True,
        **_doc("the weights that run when no GGUF is given",
               "model: {id: gemma-3-270m, package: some_gguf_package, path: assemble}"),
        "schema": {
            "id": {**_str("the model id whose rules apply (capability, turn format, "
                          "emulation style)", "id: gemma-3-270m"), "required": True,
                   "empty": False},
            "package": {**_str("the Python package that ships the GGUF (installed by the "
                               "extra; nothing is downloaded)", "package: some_gguf_package"),
                        "required": True, "regex": r"^[A-Za-z_][A-Za-z0-9_.]*$"},
            "path": {**_str("the package's function that returns the GGUF's path",
                            "path: assemble"), "required": True,
                     "regex": r"^[A-Za-z_][A-Za-z0-9_]*$"},
        },
    },
    "install": {**_str("what to run when the runtime or the weights are missing",
                       "install: pip install 'toolrules[local]'"), "required": True},
    "inference": {
        "type": "dict", "required": True,
        **_doc("defaults of every local generation (a call's options win)", "n_ctx: 4096"),
        "schema": {
            "n_ctx": _num("context length in tokens", "n_ctx: 4096", low=256),
            "n_batch": _num("prompt tokens evaluated per batch", "n_batch: 512", low=1),
            "threads": _num("CPU threads (null: llama.cpp's default)", "threads: null",
                            low=1, nullable=True),
            "max_tokens": _num("longest answer in tokens", "max_tokens: 512", low=1),
            "temperature": _num("sampling temperature (0: greedy, deterministic)",
                                "temperature: 0", kind="number"),
            "seed": _num("sampler seed", "seed: 0"),
            "reuse_prefix": {"type": "boolean", **_doc(
                "keep the evaluated prompt prefix between requests: faster in a "
                "conversation, but a greedy answer may then depend on what came before "
                "(rounding differs between batch splits); off: deterministic")},
            "constrained": {"type": "boolean", **_doc(
                "decode under the grammar of the offered tools (engine.call_grammar) by "
                "default")},
        },
    },
    "env": {"type": "dict", "keysrules": {"type": "string", "regex": r"^[A-Z_][A-Z0-9_]*$"},
            "valuesrules": {"type": "string"},
            **_doc("environment variables set (when unset) before the runtime loads",
                   "env: {OMP_WAIT_POLICY: PASSIVE}")},
}

TABLE_SCHEMAS: dict[str, dict[str, Any]] = {"local": LOCAL_SCHEMA}
