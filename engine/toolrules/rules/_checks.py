"""The catalogue of lint check ids: what each id at the end of a diagnostic means.

`toolrules lint` (and `toolrules.load()`, which refuses a broken rule set) report
`path:line:col: [level] message (check-id)`. The ids are emitted where each concern checks
its rule kind; this table names and explains every one of them, in groups, for the
documentation's reference page (generated from it).
tests/test_lint_checks.py keeps it complete both ways: every id the engine emits is listed
here, and every id listed here is emitted somewhere.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LINT_CHECKS", "LintCheck", "lint_checks_by_group"]


@dataclass(frozen=True, slots=True)
class LintCheck:
    """One check id: its group (the rule kind or layer it checks) and what it catches."""

    id: str
    group: str
    text: str


def _group(name: str, *entries: tuple[str, str]) -> tuple[LintCheck, ...]:
    return tuple(LintCheck(cid, name, text) for cid, text in entries)


LINT_CHECKS: tuple[LintCheck, ...] = (
    *_group(
        "files and YAML",
        ("file-read", "The file cannot be read (permissions, encoding)."),
        ("file-size", "The file is larger than a rule file may be (1 MiB)."),
        ("yaml-syntax", "The file is not valid YAML; the position is the parser's."),
        ("yaml-duplicate-key", "A mapping repeats a key; the later value would win silently."),
        ("yaml-merge", "A YAML merge key (`<<`) is used: rule files spell everything out "
                       "(use `extends:` where a kind supports it)."),
        ("yaml-tag", "A value uses a YAML tag outside the safe set (no Python objects)."),
        ("yaml-depth", "Nesting deeper than 64 levels."),
        ("unknown-table", "A file at the top of a rules directory is not one of the known "
                          "cross-cutting tables (the hint names the closest)."),
        ("placeholder", "A message text uses a `{placeholder}` its table does not fill."),
        ("missing-table", "A cross-cutting table the engine needs (rules/NAME.yaml) is "
                          "missing from the rule set."),
    ),
    *_group(
        "schemas",
        ("schema-unknown-field", "A field the kind's schema does not know (often a typo: the "
                                 "hint names the closest field)."),
        ("schema-required", "A required field is missing; the message says what it is and "
                            "gives an example."),
        ("schema-type", "A value has the wrong type (or the file is not a mapping)."),
        ("schema-value", "A value is outside the allowed set, does not match the field's "
                         "pattern, or breaks a length or range limit."),
        ("schema", "Any other schema rule a value breaks (the message names the rule)."),
    ),
    *_group(
        "regexes and expressions",
        ("regex", "A regular expression does not compile."),
        ("regex-backtracking", "A regular expression nests repetition, e.g. `(a+)+`, which "
                               "can backtrack exponentially on hostile input."),
        ("jmespath", "A JMESPath expression in a provider rule does not compile."),
    ),
    *_group(
        "models",
        ("model-family", "A model file with `match` patterns has no `family`."),
        ("model-empty", "A model file has neither `match` patterns nor `overrides`."),
        ("model-groups", "A `match` regex uses a named group other than family, version, "
                         "size, active, variant or date."),
        ("model-condition", "A `when:` condition cannot be read (write `'>=3.1'`, "
                            "`'<70B'` ...)."),
        ("model-override", "An override has neither `id` nor `pattern`."),
        ("duplicate-family", "Two files define the same family."),
        ("missing-dialect", "A model names a dialect that rules/dialects/ does not define."),
        ("rule-id", "A rule's own id differs from its file name."),
        ("turn-constraints", "Turn constraints (capability `turn_*`) that say nothing as "
                             "written, e.g. `turn_system_stable` while system messages may "
                             "stand anywhere."),
    ),
    *_group(
        "dialects",
        ("dialect-call-open", "A call shape without `open` markers lacks `at: start`."),
        ("dialect-groups", "A header or route regex lacks the named group it must capture "
                           "(`(?P<name>...)`)."),
        ("dialect-marker-conflict", "One marker is used for two different things in the "
                                    "same region."),
        ("dialect-payload", "A payload's options contradict each other or its kind (a "
                            "grammar payload without `grammar:`, `rest: text` inside "
                            "markers ...)."),
        ("dialect-section", "A call names a section (`in:`) the dialect does not define."),
        ("missing-grammar", "A dialect names a Lark grammar that grammars/ does not hold."),
    ),
    *_group(
        "providers",
        ("provider-extends", "`extends:` names something that is not a provider."),
        ("provider-incomplete", "A section is missing a field it needs (a system placement "
                                "`field` without `path` ...)."),
        ("provider-transform", "A schema or message transform op is unknown or used in the "
                               "wrong place."),
        ("transform-op", "A transform op's parameters are wrong (the message says which)."),
        ("missing-strategy", "A schema strategy is not defined in "
                             "rules/schema_strategies.yaml."),
        ("missing-template-fix", "A model's `turn_tool_schema` names a fix that is not in "
                                 "the `template_fixes` table of "
                                 "rules/schema_strategies.yaml."),
        ("volatile-empty", "A `serve.volatile` pattern matches an empty text: it would take "
                           "nothing out, or everything between lines."),
        ("volatile-id", "Two `serve.volatile` entries of one provider share an id."),
        ("provider-media", "The media section contradicts itself (`move_results.to` is not "
                           "one of `media.roles`)."),
        ("provider-fields", "A provider served to clients (`serve:`) does not account for "
                            "every request field (`serve.fields`), or its `read` marks "
                            "disagree with what its readers take in."),
        ("provider-tools", "A provider served to clients has no `tools.read.refuse` rules "
                           "for tool entries it cannot carry."),
        ("http-incomplete", "A provider has an `http:` section without `path`."),
        ("http-base-url", "`http.base_url` is not an http(s) URL."),
        ("http-path", "An http path does not start with `/`."),
        ("http-auth", "An auth kind lacks the field it needs (header, param, env ...)."),
        ("http-placeholder", "`{region}` is used but no env var or default gives it."),
        ("constrained-empty", "`constrained:` says neither a format nor `native: strict`."),
        ("constrained-path", "`constrained.format` is given without the body field that "
                             "takes it (`constrained.path`)."),
    ),
    *_group(
        "emulation and templates",
        ("emulation-style", "A selection entry uses a style that is not defined."),
        ("emulation-condition", "A selection condition cannot be read (write a number or a "
                                "comparison like `'<8192'`)."),
        ("emulation-fallback", "The last selection entry has a `when:` (it must be the "
                               "fallback)."),
        ("emulation-dialect", "A style asks for an answer format no dialect parses."),
        ("emulation-template-mismatch", "A dialect and the emulation table name different "
                                        "templates for one format."),
        ("missing-template", "A rule names a template that templates/ does not hold."),
        ("template-syntax", "A Jinja template does not parse (or imports a missing one)."),
        ("template-call-macro", "A prompt template defines no `call(c)` macro, so its format "
                                "cannot be checked or used for examples and feedback."),
        ("template-render", "A chat template does not render a one-turn conversation."),
    ),
    *_group(
        "cross-cutting tables",
        ("errors-code", "An error code has no entry (recoverable, retry_strategy, fix)."),
        ("errors-condition", "An error mapping has no `exception`, `status` or `pattern`."),
        ("errors-duplicate-id", "Two error mappings share an id."),
        ("errors-exception", "An exception name is not a class name."),
        ("errors-ladder", "A retry strategy has no ladder under `ladders`."),
        ("errors-status", "A status is neither an HTTP status nor a class like `5xx`."),
        ("validation-coercion", "A coercion is defined twice."),
        ("validation-envelope", "An envelope code the executor emits has no message or "
                                "ToolError code."),
        ("tool-classes-overlap", "A word is both a read word and a write word."),
        ("loop-provider", "The loop table names a provider that does not exist."),
    ),
    *_group(
        "policies and tools",
        ("policy-levels", "A policy has no trust level."),
        ("policy-extends", "`extends:` names something that is not a policy."),
        ("policy-timeouts", "The default timeout is above the maximum."),
        ("policy-commands", "A command is listed twice in the allowlist."),
        ("policy-unicode", "A refused character category is not a Unicode general "
                           "category."),
        ("toolset-name", "A tool name is not accepted by some provider's name rule."),
        ("toolset-duplicate", "Two tool files define the same tool."),
        ("toolset-schema", "A tool's parameters are not an object schema."),
        ("toolset-arguments", "A tool option names an argument that is not a parameter."),
        ("toolset-tier", "A tool's tier is not a trust level of the default policy (the "
                         "tool would be unavailable)."),
    ),
    *_group(
        "evaluation",
        ("eval-entry", "An offline entry is listed twice or is incomplete."),
        ("eval-capability", "An entry's capability settings name something that does not "
                            "exist (a dialect ...)."),
        ("eval-strategy", "A strategy extends or names one that does not exist."),
        ("eval-preset", "A preset or an entry's scenario set matches nothing."),
        ("scenario-tool", "A scenario's tool is not a built-in of the tool set it runs with."),
        ("scenario-schema", "A scenario tool's parameters are not an object schema."),
        ("scenario-mock", "A mock tool answers in more than one way."),
        ("scenario-expect", "A scenario's expectations contradict each other."),
        ("scenario-matcher", "An argument matcher mixes operators with plain keys."),
        ("scenario-script", "A script step has neither calls nor an answer, or both."),
    ),
    *_group(
        "MCP servers",
        ("mcp-transport", "An MCP server rule needs exactly one of `command` (stdio) or `url` "
                          "(streamable HTTP), and fields of the other transport are unused."),
        ("mcp-url", "An MCP server's `url` is not an http(s) URL."),
        ("mcp-placeholder", "A value uses a placeholder other than `{workspace}` or "
                            "`${VAR}`."),
        ("mcp-namespace", "Tool names under the server's namespace are not names a provider "
                          "accepts."),
        ("mcp-tools", "A tool is both included and excluded."),
        ("mcp-tier", "A tool's tier is not a level of the default policy (the tool stays "
                     "unavailable unless a level names it)."),
        ("mcp-timeouts", "`startup_seconds` or `timeout` is not more than 0."),
        ("mcp-annotations", "rules/mcp.yaml: an annotation class is defined twice, or names a "
                            "tier the default policy lacks."),
        ("mcp-serve", "rules/mcp.yaml: a served-tool hint that never applies, or no hint "
                      "that holds for every tool."),
        ("mcp-schema", "rules/mcp.yaml: a schema normalization step that is not a known "
                       "transform op, or has bad parameters."),
    ),
    *_group(
        "the proxy",
        ("serve-route", "A route has neither `model` nor `pattern`."),
        ("serve-upstream", "A route's upstream has no provider, or one without `http:`."),
        ("serve-front", "A front (client API) is not a provider with a `serve:` section."),
        ("serve-style", "A route names an emulation style that does not exist."),
        ("serve-reserved", "`request_overrides` sets a reserved field (ignored)."),
        ("serve-constrained", "A route asks for constrained decoding from a provider that "
                              "takes no constraint."),
        ("serve-servers", "A route's several `servers`: not http(s) URLs, listed twice, beside "
                          "`base_url`, `slots` the provider cannot pin, or settings that need "
                          "several servers given for one."),
    ),
)


def lint_checks_by_group() -> dict[str, list[LintCheck]]:
    """The catalogue in its groups, in order."""
    out: dict[str, list[LintCheck]] = {}
    for check in LINT_CHECKS:
        out.setdefault(check.group, []).append(check)
    return out
