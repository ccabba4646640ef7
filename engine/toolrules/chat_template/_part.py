"""Engine methods for the model's own chat template: fitting a conversation to its turn
constraints (`normalize_turns`) and probing a template (`inspect_template`).

The rewrites themselves live in `_turns`, the probes in `_inspect`; this part wires them to
the rule set: the `turns:` section of rules/emulation.yaml (the join between merged texts,
the wrapper of a system text carried in a user turn) and, for calls a template cannot
take, the emulated history in the model's own trained format (Engine.emulate_history).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .._types import Capability, Message
from ..rules._part import Part
from ._inspect import TemplateReport
from ._turns import Turns, is_permissive, normalize_turns

__all__ = ["ChatTemplatePart"]


class ChatTemplatePart(Part):
    """normalize_turns, inspect_template."""

    def _turn_settings(self) -> tuple[str, str]:
        """(join, system_block template) from rules/emulation.yaml `turns:`."""
        def build() -> tuple[str, str]:
            table = self.ruleset.table("emulation")
            turns = (table.get("turns") if isinstance(table, dict) else None) or {}
            return (str(turns.get("join", "\n\n")),
                    str(turns.get("system_block", "turns/system_block.j2")))
        return self._cached("chat_template:turns", build)

    def normalize_turns(self, messages: Iterable[Any], model: Any = None, *, tools: Any = None,
                        capability: Capability | None = None) -> Turns:
        """`messages` fitted to the turn constraints of the model's own chat template
        (capability turn_*), with every rewrite recorded; no text is dropped."""
        from ..providers._messages import coerce_messages

        cap = self.capability_for(model, capability)
        msgs = coerce_messages(messages)
        if is_permissive(cap):
            return Turns(tuple(msgs))
        engine = self.engine
        join, block = self._turn_settings()
        def calls_as_text(group: list[Message]) -> list[Message]:
            # calls the template cannot take are written in the model's own trained
            # format when the rules have one, else in its emulation style
            trained = {st.dialect for st in engine.emulation_styles() if st.trained}
            style = cap.dialect if cap.dialect is not None and cap.dialect in trained else None
            return engine.emulate_history(group, tools, model, capability=cap, style=style)

        def system_block(text: str) -> str:
            return engine.render_template(block, {"text": text}).strip("\n")

        return normalize_turns(msgs, cap, calls_as_text=calls_as_text,
                               system_block=system_block, join=join)

    def inspect_template(self, source: str, *, bos_token: str = "", eos_token: str = "",
                         origin: str = "template") -> TemplateReport:
        """See Engine.inspect_template (chat_template/_inspect.py)."""
        from ._inspect import inspect_template

        return inspect_template(self.engine, source, bos_token=bos_token,
                                eos_token=eos_token, origin=origin)
