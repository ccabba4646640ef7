"""The mixins that make up Engine, one per feature.

Each entry is (module, class). A feature module must keep its import cheap: heavy
dependencies (jinja2, jsonschema, lark) are imported inside the methods that need them.
"""

from __future__ import annotations

from ._models_api import ModelsMixin
from ._registry import optional_module

_OPTIONAL = (
    ("_text_api", "TextMixin"),            # raw-text dialects: text_parser
    ("_providers_api", "ProvidersMixin"),  # wire formats: translate_tools, build_request ...
    ("_emulation_api", "EmulationMixin"),  # emulation prompts, validation, errors ...
)


def _collect() -> tuple[type, ...]:
    out: list[type] = [ModelsMixin]
    for mod_name, cls_name in _OPTIONAL:
        mod = optional_module(mod_name)
        if mod is None:
            continue
        out.append(getattr(mod, cls_name))
    return tuple(out)


MIXINS: tuple[type, ...] = _collect()
