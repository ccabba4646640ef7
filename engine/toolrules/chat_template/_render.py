"""A model's own chat template, rendered as inference servers render it.

llama-server (`--jinja`), vLLM, LM Studio and llama-cpp-python turn a conversation into
one prompt with the Jinja template the model's makers wrote. Such a template is untrusted
text (from a weights file, a server, a user): it renders here in Jinja's immutable sandbox
with the globals and filters those servers provide, and a template that refuses a
conversation (its `raise_exception`) or trips over it raises `TemplateRaised` with the
template's own words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._errors import CapabilityError

__all__ = ["TemplateRaised", "compile_chat_template", "render_chat_template",
           "render_request", "template_environment"]


class TemplateRaised(CapabilityError):
    """A model's own chat template refused the conversation (its `raise_exception`), or
    could not render it. `message` is the template's own words."""

    def __init__(self, message: str, *, raised: bool = True):
        what = "refused" if raised else "does not render"
        super().__init__(f"the model's chat template {what}: {message}")
        self.message = message
        self.raised = raised


def template_environment() -> Any:
    """The sandbox a model's own chat template renders in, as servers provide it: Jinja's
    ImmutableSandboxedEnvironment with trim_blocks/lstrip_blocks and loop controls,
    `raise_exception(msg)`, `strftime_now(fmt)` and a `tojson` that keeps non-ASCII text
    and takes indent/separators/sort_keys (what Hugging Face templates call)."""
    import datetime
    import json

    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateRaised(str(message))

    def strftime_now(fmt: str) -> str:
        return datetime.datetime.now().strftime(fmt)

    def tojson(value: Any, indent: int | None = None, separators: Any = None,
               sort_keys: bool = False, ensure_ascii: bool = False) -> str:
        return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii,
                          separators=tuple(separators) if separators else None,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols",
                                                    _generation_extension()])
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.filters["tojson"] = tojson
    return env


def _generation_extension() -> Any:
    """`{% generation %}...{% endgeneration %}`, the tag Hugging Face templates use to mark
    the assistant's part for training masks: here it renders its body unchanged."""
    from jinja2.ext import Extension

    class GenerationTag(Extension):
        tags = {"generation"}  # noqa: RUF012 - the attribute Extension defines

        def parse(self, parser: Any) -> Any:
            from jinja2 import nodes

            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.Scope(body, lineno=lineno)

    return GenerationTag


def compile_chat_template(source: str, env: Any = None) -> Any:
    """A model's own chat template compiled once in the sandbox, to render many
    conversations (`render_chat_template(template, context)`). Raises TemplateRaised
    (raised=False) naming the line of a syntax error."""
    from jinja2.exceptions import TemplateSyntaxError

    env = env if env is not None else template_environment()
    try:
        return env.from_string(source)
    except TemplateSyntaxError as exc:
        raise TemplateRaised(f"TemplateSyntaxError at line {exc.lineno}: {exc.message}",
                             raised=False) from None
    except RecursionError:
        raise TemplateRaised("the template nests too deeply to compile", raised=False) from None


def render_chat_template(source: Any, context: Mapping[str, Any]) -> str:
    """A model's own chat template (untrusted text: from a weights file, a server, a user;
    or one compile_chat_template compiled) rendered in the sandbox with `context`
    (messages, tools, add_generation_prompt, bos_token, eos_token ...). Raises
    TemplateRaised with the template's message when it refuses the conversation or fails
    to render."""
    from jinja2.exceptions import TemplateError

    template = compile_chat_template(source) if isinstance(source, str) else source
    try:
        return str(template.render(**context))
    except TemplateRaised:
        raise
    except (TemplateError, TypeError, ValueError, KeyError, AttributeError, IndexError,
            ArithmeticError, RecursionError) as exc:  # what a template's own logic trips over
        raise TemplateRaised(f"{type(exc).__name__}: {exc}", raised=False) from None


def render_request(template: Any, body: Mapping[str, Any], *, bos_token: str = "",
                   eos_token: str = "") -> str:
    """The prompt llama-server (--jinja) or vLLM renders for a chat-completions `body`:
    its messages as sent (call arguments decoded to objects, as those servers pass them),
    its tools, each `chat_template_kwargs` entry as a template variable, the generation
    prompt unless the body says otherwise."""
    import contextlib
    import json

    messages = []
    for m in body.get("messages") or []:
        m = dict(m)
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                fn = dict(c.get("function") or {})
                if isinstance(fn.get("arguments"), str):
                    with contextlib.suppress(ValueError):
                        fn["arguments"] = json.loads(fn["arguments"])
                calls.append({**c, "function": fn})
            m["tool_calls"] = calls
        messages.append(m)
    kwargs = body.get("chat_template_kwargs")
    context: dict[str, Any] = dict(kwargs) if isinstance(kwargs, dict) else {}
    context.update(messages=messages, tools=body.get("tools") or None,
                   add_generation_prompt=body.get("add_generation_prompt", True),
                   bos_token=bos_token, eos_token=eos_token)
    return render_chat_template(template, context)
