"""YAML reading for rule files: safe tags only, every node remembers its line and column.

Mappings load as `MarkedDict` and sequences as `MarkedList`; both keep the 1-based
(line, col) of themselves and of each key/item so diagnostics can point into the file.
Duplicate keys are reported instead of silently overwritten.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import yaml

__all__ = ["MarkedDict", "MarkedList", "YamlProblem", "load_yaml", "mark_of", "plain"]


@cache
def _lib() -> tuple[Any, Any, Any]:
    """PyYAML, its loader and a scalar constructor, imported when YAML is first read (a
    rule set loaded from the validated cache reads none)."""
    import yaml

    try:  # libyaml's composer is several times faster than the pure-Python one
        from yaml import CSafeLoader as loader
    except ImportError:  # pragma: no cover - depends on the PyYAML build
        from yaml import SafeLoader as loader  # type: ignore[assignment]
    return yaml, loader, yaml.constructor.SafeConstructor()


class MarkedDict(dict):
    """A dict that knows where it and each of its keys stand in the source file."""

    __slots__ = ("key_marks", "mark", "value_marks")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.mark: tuple[int, int] = (1, 1)
        self.key_marks: dict[Any, tuple[int, int]] = {}
        self.value_marks: dict[Any, tuple[int, int]] = {}


class MarkedList(list):
    """A list that knows where it and each item stand in the source file."""

    __slots__ = ("item_marks", "mark")

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.mark: tuple[int, int] = (1, 1)
        self.item_marks: list[tuple[int, int]] = []


class YamlProblem(Exception):
    """A YAML syntax problem or a forbidden construct, with its position."""

    def __init__(self, message: str, line: int, col: int, check: str = "yaml-syntax"):
        super().__init__(message)
        self.message = message
        self.line = line
        self.col = col
        self.check = check


def _pos(node: yaml.Node) -> tuple[int, int]:
    return (node.start_mark.line + 1, node.start_mark.column + 1)


def _build(node: yaml.Node, duplicates: list[YamlProblem], depth: int = 0) -> Any:
    yaml, _, scalars = _lib()
    if depth > 64:
        raise YamlProblem("nesting deeper than 64 levels", *_pos(node), check="yaml-depth")
    if isinstance(node, yaml.MappingNode):
        out = MarkedDict()
        out.mark = _pos(node)
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise YamlProblem("YAML merge keys (<<) are not supported in rule files",
                                  *_pos(key_node), check="yaml-merge")
            key = _build(key_node, duplicates, depth + 1)
            if isinstance(key, (dict, list)):
                raise YamlProblem("mapping keys must be scalars", *_pos(key_node))
            if key in out:
                duplicates.append(YamlProblem(f"duplicate key {key!r}; the later value wins",
                                              *_pos(key_node), check="yaml-duplicate-key"))
            out[key] = _build(value_node, duplicates, depth + 1)
            out.key_marks[key] = _pos(key_node)
            out.value_marks[key] = _pos(value_node)
        return out
    if isinstance(node, yaml.SequenceNode):
        seq = MarkedList()
        seq.mark = _pos(node)
        for item in node.value:
            seq.append(_build(item, duplicates, depth + 1))
            seq.item_marks.append(_pos(item))
        return seq
    try:
        return scalars.construct_object(node, deep=True)
    except yaml.constructor.ConstructorError as exc:
        raise YamlProblem(f"unsupported YAML value: {exc.problem}", *_pos(node),
                          check="yaml-tag") from None


def load_yaml(text: str) -> tuple[Any, list[YamlProblem]]:
    """Parse one YAML document. Returns (data, warnings); raises YamlProblem on errors."""
    yaml, loader, _ = _lib()
    try:
        node = yaml.compose(text, Loader=loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise YamlProblem(f"YAML syntax: {exc.problem or exc.context}", line, col) from None
    except yaml.YAMLError as exc:
        raise YamlProblem(f"YAML: {exc}", 1, 1) from None
    if node is None:
        return None, []
    duplicates: list[YamlProblem] = []
    return _build(node, duplicates), duplicates


def mark_of(doc: Any, path: tuple[Any, ...] | list[Any]) -> tuple[int, int]:
    """The (line, col) of the deepest node of `path` that exists in `doc`."""
    best = getattr(doc, "mark", (1, 1))
    node = doc
    for step in path:
        if isinstance(node, MarkedDict) and step in node:
            best = node.key_marks.get(step, best)
            node = node[step]
        elif isinstance(node, MarkedList) and isinstance(step, int) and 0 <= step < len(node):
            best = node.item_marks[step]
            node = node[step]
        else:
            break
    return best


def plain(value: Any) -> Any:
    """Marked containers converted to plain dicts and lists (for caching and output)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value
