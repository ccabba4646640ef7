"""Model clients: what the tool loop talks to. The protocol (`ModelClient`: `generate` /
`stream`), `ScriptedModel`, which answers from a script in the model's own output
format (tests, replays, demos), and `connect()`, a client for any provider the rules
describe over HTTP (`HttpModel`, failures as `ProviderError`), or the embedded local
model (`LocalModel`, `connect("local")`)."""

from __future__ import annotations

from ._base import ModelClient
from ._connect import connect
from ._errors import ProviderError
from ._local import LocalModel, default_gguf
from ._scripted import ScriptedModel, ScriptedRequest, ScriptExhaustedError, response_chunks

__all__ = ["LocalModel", "ModelClient", "ProviderError", "ScriptExhaustedError",
           "ScriptedModel", "ScriptedRequest", "connect", "default_gguf", "response_chunks"]
