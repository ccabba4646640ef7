"""A conversation as the one prompt a raw-text model completes: the model's turn format
(capability `chat_template`, a template under templates/chat/) over the conversation as
an emulated model sees it (the emulation prompt with the system text, earlier calls and
results written as text).

Turn-format templates use Hugging Face chat-template variables (`messages` as
{role, content} dicts, `add_generation_prompt`, `bos_token`, `eos_token`) and may set
`stop`, the strings that end the model's turn. They render in the rule set's sandbox.
A template embedded in a weights file is untrusted text: it renders in a sandbox too
(`render_chat_template`, as servers render a model's own template).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import CapabilityError, RuleError, UnknownRuleError
from .._types import Capability, Message, coerce_tools
from ..chat_template._render import render_chat_template
from ._rules import EmulationPrompt, template_error

__all__ = ["ChatPrompt", "build_chat_prompt", "check_rules"]


@dataclass(frozen=True, slots=True)
class ChatPrompt:
    """The text a raw-text model completes, and how to read what it writes."""

    text: str
    """The prompt: every turn in the model's format, ending where the model's turn opens."""
    stop: tuple[str, ...]
    """Strings that end the model's turn (the template's `stop`)."""
    template: str | None
    """The turn-format template (None: one embedded in the weights)."""
    dialect: str | None
    """The dialect that reads the answer when tools were offered (None: plain text)."""
    emulation: EmulationPrompt | None = None
    """The tool prompt placed with the system text, when tools were offered."""


def _turns(part: Any, messages: Sequence[Message], emulation: str | None,
           cap: Capability) -> list[dict[str, str]]:
    """{role, content} dicts the turn format renders: the conversation (as an emulated
    model sees it: calls and results already text) with the tool prompt joined to the
    system text, fitted by Engine.normalize_turns to what these templates take - one
    system message first (or none, where the model has no system role) and alternating
    user and assistant turns (a tool result and the user's next words travel together)."""
    from dataclasses import replace

    from ..providers._messages import content_text

    msgs = list(messages)
    if emulation:
        lead = 0
        while lead < len(msgs) and msgs[lead].role == "system":
            lead += 1
        msgs.insert(lead, Message(role="system", content=emulation))
    strict = replace(cap, turn_system="none" if cap.turn_system == "none" else "first",
                     turn_alternate=True, turn_roles=(), turn_history_calls=False,
                     turn_system_stable=False)
    fitted = part.engine.normalize_turns(msgs, capability=strict)
    return [{"role": m.role, "content": content_text(m.content) or ""}
            for m in fitted.messages]


def build_chat_prompt(part: Any, messages: Any, model: Any = None, *, tools: Any = None,
                      tool_choice: Any = "auto", capability: Capability | None = None,
                      style: str | None = None, template: str | None = None,
                      embedded: str | None = None, add_generation_prompt: bool = True,
                      bos_token: str = "", eos_token: str = "") -> ChatPrompt:
    """See Engine.chat_prompt."""
    from ._grammar import normalize_tool_choice

    cap = part.capability_for(model, capability)
    name = template or cap.chat_template
    if name is None and embedded is None:
        raise CapabilityError(
            f"no turn format for model {model!r}: its rules set no `chat_template` (a "
            "template under templates/chat/) and its weights carry none; give the model id "
            "whose rules apply (as_model=...) or a template (chat_template=...)")
    tool_list = coerce_tools(tools)
    offered = bool(tool_list) and normalize_tool_choice(tool_choice)[0] != "none"
    prompt = None
    if offered:
        prompt = part.emulation(tool_list, model, capability=capability, style=style)
        history = part.emulate_history(messages, tool_list, model, capability=capability,
                                       style=style)
    else:
        history = part.emulate_history(messages, None, model, capability=capability,
                                       style=style)
    context = {"messages": _turns(part, history, prompt.text if prompt else None, cap),
               "add_generation_prompt": add_generation_prompt, "bos_token": bos_token,
               "eos_token": eos_token}
    if name is not None:
        text, stop = _render(part._emulation_rules(), name, context)
    else:
        assert embedded is not None
        text, stop = render_chat_template(embedded, context), ()
    return ChatPrompt(text, stop, name, prompt.dialect if prompt else None, prompt)


def _render(rules: Any, name: str, context: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    template = rules.template(name)
    try:
        module = template.make_module(dict(context))
        text = str(module)
        stop = getattr(module, "stop", ())
    except Exception as exc:
        raise template_error(name, template, exc) from exc
    if isinstance(stop, str):
        stop = (stop,)
    return text, tuple(s for s in stop if isinstance(s, str) and s)


# ---------------------------------------------------------------- lint

def check_rules(rs: Any, rep: Any, failed: set[tuple[str, str]]) -> None:
    """Every `chat_template` a model rule names exists under templates/chat/ and renders a
    one-turn conversation (the variables it may use are the Hugging Face ones)."""
    from ._rules import make_environment

    env: Any = None
    checked: dict[str, str | None] = {}
    for rid, rf in sorted(rs.files.get("model", {}).items()):
        if ("model", rid) in failed or not isinstance(rf.data, dict):
            continue
        data = rf.data
        refs: list[tuple[tuple[Any, ...], Any]] = []
        if isinstance(data.get("defaults"), dict):
            refs.append((("defaults", "chat_template"), data["defaults"].get("chat_template")))
        for section in ("capabilities", "overrides"):
            for j, cl in enumerate(data.get(section) or []):
                if isinstance(cl, dict) and isinstance(cl.get("set"), dict):
                    refs.append(((section, j, "set", "chat_template"),
                                 cl["set"].get("chat_template")))
        for path, name in refs:
            if not isinstance(name, str):
                continue
            if not name.startswith("chat/") or name not in rs.templates:
                have = sorted(n for n in rs.templates if n.startswith("chat/"))
                rep.error(rf, path, f"chat template {name!r} is not under templates/chat/ "
                          f"(have: {', '.join(have) or 'none'})", "missing-template")
                continue
            if name not in checked:
                if env is None:
                    env = make_environment(rs.templates)
                checked[name] = _renders(env, name)
            if checked[name]:
                rep.error(rf, path, f"chat template {name} does not render a conversation: "
                          f"{checked[name]}", "template-render")


def _renders(env: Any, name: str) -> str | None:
    try:
        text = env.get_template(name).render(
            messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                      {"role": "assistant", "content": "a"}],
            add_generation_prompt=True, bos_token="", eos_token="")
    except (RuleError, UnknownRuleError) as exc:
        return str(exc)
    except Exception as exc:  # a template error of any kind is the finding
        return f"{type(exc).__name__}: {exc}"
    if "u" not in text:
        return "the user's text does not appear in the prompt"
    return None
