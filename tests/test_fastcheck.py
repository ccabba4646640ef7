"""The fast schema reader never accepts what cerberus rejects."""

from __future__ import annotations

import copy
import random

from cerberus import Validator

from conftest import REPO
from toolrules.rules._fastcheck import quick_valid
from toolrules.rules._loader import discover, layers_for, parse_all
from toolrules.rules._schemas import schema_for


def _files():
    layers = [layers_for(use_env=False)]
    for case in sorted((REPO / "tests" / "lint_cases").iterdir()):
        layers.append(layers_for([case], use_env=False, include_bundled=False))
    for layer in layers:
        rs = discover(layer)
        parse_all(rs)
        for rf in rs.all_files():
            schema = schema_for(rf.kind, rf.id)
            if schema is not None and isinstance(rf.data, dict):
                yield rf, schema


def _mutations(doc, rng):
    """Small corruptions of a valid document: wrong types, unknown keys, dropped keys."""
    out = []
    paths = []

    def walk(node, path):
        if isinstance(node, dict):
            for k, v in node.items():
                paths.append(path + (k,))
                walk(v, path + (k,))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                paths.append(path + (i,))
                walk(v, path + (i,))

    walk(doc, ())
    for path in rng.sample(paths, min(len(paths), 25)):
        for bad in (12345, "x", None, [], {"unknown_field_zz": 1}, True, -1):
            d = copy.deepcopy(doc)
            node = d
            for step in path[:-1]:
                node = node[step]
            node[path[-1]] = bad
            out.append(d)
        d = copy.deepcopy(doc)
        node = d
        for step in path[:-1]:
            node = node[step]
        if isinstance(node, dict):
            del node[path[-1]]
            node["zz_unknown"] = 1
            out.append(d)
    return out


def test_fast_reader_agrees_with_cerberus():
    rng = random.Random(7)
    checked = 0
    for rf, schema in _files():
        v = Validator(schema, allow_unknown=False)
        docs = [rf.data] + _mutations(rf.data, rng)
        for doc in docs:
            fast = quick_valid(doc, schema)
            if fast:
                assert v.validate(doc, normalize=False), (rf.display, v.errors)
            checked += 1
    assert checked > 1000
