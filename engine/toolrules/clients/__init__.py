"""Model clients: what the tool loop talks to. The protocol (`ModelClient`: `generate` /
`stream`), and `ScriptedModel`, which answers from a script in the model's own output
format (tests, replays, demos)."""

from __future__ import annotations

from ._base import ModelClient
from ._scripted import ScriptedModel, ScriptedRequest, ScriptExhaustedError, response_chunks

__all__ = ["ModelClient", "ScriptExhaustedError", "ScriptedModel", "ScriptedRequest",
           "response_chunks"]
