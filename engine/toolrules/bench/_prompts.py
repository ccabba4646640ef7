"""What the prefix bench and its llama-server stand-in share: a chat-completions body
rendered as llama-server (--jinja) renders it, and the texts a client request carries
(each must reach the rendered prompt)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..chat_template._render import render_request

__all__ = ["BOS", "EOS", "client_texts", "present", "render_like_server"]

BOS, EOS = "<s>", "</s>"


def render_like_server(template: Any, body: Mapping[str, Any], *, bos_token: str = BOS,
                       eos_token: str = EOS) -> str:
    """The prompt llama-server (--jinja) or vLLM renders for a chat-completions body
    (chat_template.render_request), with the bench's bos/eos tokens by default."""
    return render_request(template, body, bos_token=bos_token, eos_token=eos_token)


def client_texts(messages: Sequence[Any]) -> list[str]:
    """Every text a client request carries (parsed): message and system texts, tool
    results, and the string values of call arguments."""
    out: list[str] = []

    def strings(value: Any) -> None:
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                strings(v)
        elif isinstance(value, list):
            for v in value:
                strings(v)

    for m in messages:
        content = m.content
        if isinstance(content, str):
            out.append(content)
        else:
            for part in content or ():
                text = getattr(part, "text", None)
                if isinstance(text, str):
                    out.append(text)
        for c in m.tool_calls or ():
            strings(c.arguments)
    return [t.strip() for t in out if t and t.strip()]


def present(text: str, prompt: str) -> bool:
    """The text is in the prompt as sent, or JSON-escaped (as a template writes argument
    values with `tojson`)."""
    return text in prompt or json.dumps(text, ensure_ascii=False)[1:-1] in prompt
