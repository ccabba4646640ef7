"""MkDocs hook: the reference pages written from the engine's own tables (rule-file
schemas from the cerberus schemas, lint check ids from their catalogue), generated at
every build so they never drift from the code."""

from __future__ import annotations

from typing import Any

from mkdocs.structure.files import File, Files

from toolrules.rules._schema_docs import lint_checks_markdown, schemas_markdown

PAGES = {
    "reference/rule-schemas.md": schemas_markdown,
    "reference/lint-checks.md": lint_checks_markdown,
}


def on_files(files: Files, config: Any) -> Files:
    for uri, make in PAGES.items():
        files.append(File.generated(config, uri, content=make()))
    return files
