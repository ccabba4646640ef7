"""Engine methods for emulation prompts: selecting a style, rendering the prompt and the
example calls, writing an emulated conversation's history back in the prompt's format; plus
`build_emulation_prompt`, the same as a module-level function (default engine unless `engine=`).

Everything here interprets rules/emulation.yaml, tool_selection.yaml and the templates;
this module only wires them together.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .._types import Capability, ContentPart, Message, Tool, ToolCall, coerce_tools
from ..calls._validation import ValidationError, as_tool_call, tool_index, validation_rules
from ..rules._default import resolve_engine
from ..rules._part import Part
from ._chat_prompt import ChatPrompt
from ._grammar import CallGrammar
from ._rules import EmulationPrompt, EmulationRules, EmulationStyle

__all__ = ["EmulationPart", "build_emulation_prompt"]

_PROMPT_CACHE_SIZE = 256


def _prompt_key(tools: tuple[Tool, ...], model: Any, task_hint: str | None,
                capability: Capability | None, style: str | None, examples: Any) -> Any:
    """What an emulation prompt depends on, as a dict key; None when it cannot be cached
    (explicit example calls, a model given as something other than an id)."""
    if not (model is None or isinstance(model, str)) or \
            not (examples is None or isinstance(examples, (bool, int))):
        return None
    try:
        content = json.dumps([(t.name, t.description, t.parameters) for t in tools],
                             sort_keys=True, default=str)
        key = (content, model, task_hint, capability, style, examples)
        hash(key)
    except (TypeError, ValueError):
        return None
    return key


class EmulationPart(Part):
    """render_emulation, render_call, emulate_history, optimize_tool_definitions."""

    # ------------------------------------------------------------ compiled tables

    def _emulation_rules(self) -> EmulationRules:
        return self._cached("rules:emulation",
                            lambda: EmulationRules(self.ruleset))

    # ------------------------------------------------------------ emulation

    def emulation_styles(self) -> tuple[EmulationStyle, ...]:
        """Every emulation template: generic styles, then trained formats."""
        return self._emulation_rules().entries()

    def select_emulation(self, model: Any = None, *, capability: Capability | None = None,
                         style: str | None = None) -> EmulationStyle:
        """The template and answer dialect a model gets (rules/emulation.yaml `selection`),
        or the named `style` (a style name or a dialect with a trained prompt)."""
        rules = self._emulation_rules()
        if style is not None:
            return rules.style(style)
        return rules.select(self.capability_for(model, capability))

    def emulation(self, tools: Any, model: Any = None, task_hint: str | None = None, *,
                  capability: Capability | None = None, style: str | None = None,
                  examples: bool | int | Sequence[Any] | None = None) -> EmulationPrompt:
        """The emulation prompt for `tools` and what it was built from (the dialect that
        reads the answer, the tools shown after the context budget, the examples)."""
        from ..calls._selection import selection_rules

        tool_list = coerce_tools(tools)
        # A conversation asks for the same prompt every turn: render it once per tool set
        # (keyed by content, so a schema changed in place still gets a new prompt).
        key = _prompt_key(tool_list, model, task_hint, capability, style, examples)
        cache: dict[Any, EmulationPrompt] = self._cached("emulation:prompts", dict)
        if key is not None:
            hit = cache.get(key)
            if hit is not None:
                return hit
        rules = self._emulation_rules()
        cap = self.capability_for(model, capability)
        entry = rules.style(style) if style is not None else rules.select(cap)
        shown = selection_rules(self).optimize(tool_list, cap, task_hint)
        guidance, calls = self._guidance_examples(shown, cap, examples, task_hint)
        compact = rules.is_compact(cap)
        ctx = rules.context(entry, shown, compact, guidance, calls, task_hint, cap.parallel_tools)
        text = rules.render_template(entry.template, ctx).strip()
        prompt = EmulationPrompt(text=text, style=entry, tools=shown, examples=tuple(calls),
                                 compact=compact)
        if key is not None:
            if len(cache) >= _PROMPT_CACHE_SIZE:
                cache.clear()
            cache[key] = prompt
        return prompt

    def render_emulation(self, tools: Any, model: Any = None, task_hint: str | None = None, *,
                         capability: Capability | None = None, style: str | None = None,
                         examples: bool | int | Sequence[Any] | None = None) -> str:
        """A tool-calling prompt for a model without native tools (an emulation prompt).

        The template is picked by capability (emulation_style, dialect, context window,
        parallel support) through rules/emulation.yaml, unless `style` names one. Guidance
        with examples built from the tools' schemas is added when the capability says
        `prompt_guidance` or `examples` asks (True, a count, or the calls to show).
        """
        return self.emulation(tools, model, task_hint, capability=capability, style=style,
                              examples=examples).text

    def _guidance_examples(self, tools: tuple[Tool, ...], cap: Capability, examples: Any,
                           task_hint: str | None) -> tuple[bool, list[ToolCall]]:
        """Whether to show guidance, and its example calls (the most relevant tools', with
        arguments built from their schemas, unless the caller gives the calls)."""
        from ..calls._selection import selection_rules

        if examples is None:
            examples = cap.prompt_guidance
        if examples is False or examples == 0:
            return False, []
        if isinstance(examples, (bool, int)):
            rules = self._emulation_rules()
            count = rules.max_examples if isinstance(examples, bool) else int(examples)
            vrules = validation_rules(self)
            ranked = selection_rules(self).rank(tools, task_hint) if task_hint else tools
            return True, [ToolCall(None, t.name, vrules.example_arguments(t, rules.required_only))
                          for t in ranked[:count]]
        return True, [as_tool_call(c) for c in examples]

    def render_call(self, calls: ToolCall | Mapping[str, Any] | Sequence[Any], tools: Any = None,
                    model: Any = None, *, capability: Capability | None = None,
                    style: str | None = None) -> str:
        """Calls written in the format the model's emulation prompt asks for (the template's
        `call`/`calls` macro): what the model should have answered."""
        entry = self.select_emulation(model, capability=capability, style=style)
        items = [calls] if isinstance(calls, (ToolCall, Mapping)) else list(calls)
        parsed = [as_tool_call(c) for c in items]
        index = tool_index(tools) if tools is not None else {}
        return self._emulation_rules().render_calls(entry, parsed, index)

    def emulate_history(self, messages: Iterable[Any], tools: Any = None, model: Any = None, *,
                        capability: Capability | None = None,
                        style: str | None = None) -> list[Message]:
        """A conversation rewritten for a model without native tools: each assistant turn's
        calls are appended to its text in the format the model's prompt asks for, and tool
        results become text turns (rules/emulation.yaml `history`); consecutive results
        travel together so roles keep alternating."""
        from ..providers._messages import coerce_messages, content_parts, content_text

        rules = self._emulation_rules()
        out: list[Message] = []
        pending: list[str] = []
        media: list[ContentPart] = []  # results' images, documents ...: carried after the text

        def flush() -> None:
            if pending:
                text = "\n\n".join(pending)
                out.append(Message(role=rules.result_role, content=(
                    (ContentPart("text", text=text), *media) if media else text)))
                pending.clear()
                media.clear()

        parsers: list[Any] = []

        def reader() -> Any:  # the dialect that reads this model's calls, built once
            if not parsers:
                dialect = self.select_emulation(model, capability=capability, style=style).dialect
                parsers.append(self.engine.text_parser(dialect=dialect, tools=tools))
            return parsers[0]

        names: dict[str, str] = {}  # call id -> tool name, for results that omit the name
        for m in coerce_messages(messages):
            for c in m.tool_calls:
                if c.id:
                    names[c.id] = c.name
            if m.role == "tool":
                output = m.content
                parts = content_parts(output)
                if parts is not None:
                    media.extend(p for p in parts if p.type != "text")
                    output = "".join(p.text or "" for p in parts if p.type == "text")
                pending.append(rules.render_template(rules.result_template, {
                    "name": m.name or names.get(m.tool_call_id or "", ""),
                    "call_id": m.tool_call_id,
                    "output": output if isinstance(output, str) else json.loads(
                        json.dumps(output, default=str)),
                    "error": content_text(output) if m.is_error else None}))
                continue
            flush()
            if m.role == "assistant" and m.tool_calls:
                try:
                    written = self.render_call(list(m.tool_calls), tools, model,
                                               capability=capability, style=style)
                except ValueError:  # a one-call-per-answer format: one block per call
                    written = "\n\n".join(
                        self.render_call(c, tools, model, capability=capability, style=style)
                        for c in m.tool_calls)
                text = content_text(m.content) or ""
                out.append(Message(role="assistant", reasoning_content=m.reasoning_content,
                                   content=self._turn_text(text, written, m.tool_calls,
                                                           reader)))
                continue
            out.append(m)
        flush()
        return out

    def _turn_text(self, text: str, written: str, calls: Sequence[ToolCall],
                   reader: Callable[[], Any]) -> str:
        """An assistant turn as the model would have written it: its text, then its calls -
        or the calls first where the format only reads calls at the start of an answer.
        The order chosen is the one that reads back as the same calls."""
        if not text:
            return written
        parser = reader()
        want = [(c.name, c.arguments) for c in calls]
        candidates = (f"{text}\n\n{written}", f"{written}\n\n{text}")
        read = [parser.parse(candidate) for candidate in candidates]
        # the order that reads back as the same calls and the same text; else the calls
        for exact in (True, False):
            for candidate, got in zip(candidates, read):
                if [(c.name, c.arguments) for c in got.tool_calls] == want \
                        and (not exact or got.content == text):
                    return candidate
        return f"{text}\n\n{written}"

    def render_template(self, name: str, context: Mapping[str, Any]) -> str:
        """Render any template of the rule set (sandboxed, strict) with `context`."""
        return self._emulation_rules().render_template(name, context)

    def chat_prompt(self, messages: Any, model: Any = None, *, tools: Any = None,
                    tool_choice: Any = "auto", capability: Capability | None = None,
                    style: str | None = None, template: str | None = None,
                    embedded: str | None = None, add_generation_prompt: bool = True,
                    bos_token: str = "", eos_token: str = "") -> ChatPrompt:
        """See Engine.chat_prompt (emulation/_chat_prompt.py)."""
        from ._chat_prompt import build_chat_prompt

        return build_chat_prompt(self, messages, model, tools=tools, tool_choice=tool_choice,
                                 capability=capability, style=style, template=template,
                                 embedded=embedded, add_generation_prompt=add_generation_prompt,
                                 bos_token=bos_token, eos_token=eos_token)

    def call_grammar(self, tools: Any, model: Any = None, *, format: str = "gbnf",
                     tool_choice: Any = "auto", capability: Capability | None = None,
                     style: str | None = None) -> CallGrammar | None:
        """See Engine.call_grammar (emulation/_grammar.py); one build per tool set."""
        from ._grammar import build_call_grammar, normalize_tool_choice

        tool_list = coerce_tools(tools)
        key = _prompt_key(tool_list, model, None, capability, style, None)
        if key is not None:
            key = (key, format, normalize_tool_choice(tool_choice))
        cache: dict[Any, CallGrammar | None] = self._cached("emulation:call_grammars", dict)
        if key is not None and key in cache:
            return cache[key]
        built = build_call_grammar(self, tool_list, model, format=format,
                                   tool_choice=tool_choice, capability=capability, style=style)
        if key is not None:
            if len(cache) >= _PROMPT_CACHE_SIZE:
                cache.clear()
            cache[key] = built
        return built

    def optimize_tool_definitions(self, tools: Any, capability: Capability | str | None = None,
                                  task_hint: str | None = None) -> tuple[Tool, ...]:
        """See toolrules.optimize_tool_definitions."""
        from ..calls._selection import optimize_tool_definitions

        return optimize_tool_definitions(tools, capability, task_hint, engine=self)

    # ------------------------------------------------------------ validation

    def format_validation_errors_for_retry(self, errors: Iterable[ValidationError],
                                           call: Any = None, tools: Any = None, *,
                                           model: Any = None, capability: Capability | None = None,
                                           style: str | None = None) -> str:
        """The message that asks the model to fix its call (templates/feedback/), with a
        corrected example call when `call` and `tools` are given: written in the model's
        emulation format when the model has no native tools (or `style` is given), else
        as a JSON object."""
        errors = list(errors)
        if not errors:
            return ""
        vrules = validation_rules(self)
        example_text = None
        example_view = None
        if call is not None and tools is not None:
            fixed = self.engine.corrected_call(call, tools)
            if fixed is not None:
                index = tool_index(tools)
                example_view = EmulationRules.call_view(fixed, index.get(fixed.name))
                cap = self.capability_for(model, capability)
                if style is not None or ((model is not None or capability is not None)
                                         and not cap.native_tools):
                    try:
                        example_text = self.render_call(fixed, index, model, capability=cap,
                                                        style=style)
                    except ValueError:
                        example_text = None
        return self.render_template(vrules.feedback_template, {
            "errors": errors, "example": example_text, "example_call": example_view})


# ---------------------------------------------------------------- module-level functions

def build_emulation_prompt(tools: Any, capability: Capability | None = None,
                           task_hint: str | None = None, *, engine: Any = None) -> str:
    """render_emulation with a capability, as a module-level function."""
    return resolve_engine(engine).render_emulation(tools, None, task_hint,
                                            capability=capability or Capability())


