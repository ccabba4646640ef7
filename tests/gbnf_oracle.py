"""llama.cpp's own GBNF engine as a test oracle: does a grammar compile, does it admit a
text. Runs over the vocabulary of the bundled weights, loaded without the model's tensors
(`vocab_only`), so a check costs microseconds and no inference.

A text is fed token by token: each token must survive the grammar sampler (its logit is
not set to -inf), then is accepted; at the end the end-of-generation token must be allowed,
which the grammar allows only in an accepting state.
"""

from __future__ import annotations

import atexit
import ctypes
import math
from typing import Any

__all__ = ["GbnfOracle", "oracle_or_skip"]

_ORACLE: list[Any] = []


class GbnfOracle:
    def __init__(self, path: str):
        import llama_cpp

        self._lib = llama_cpp
        self._llm = llama_cpp.Llama(path, vocab_only=True, verbose=False)
        self._vocab = self._llm._model.vocab
        self._eos = llama_cpp.llama_vocab_eos(self._vocab)
        self._samplers: dict[str, Any] = {}

    def _sampler(self, grammar: str) -> Any:
        smpl = self._samplers.get(grammar)
        if smpl is None:
            smpl = self._lib.llama_sampler_init_grammar(self._vocab, grammar.encode("utf-8"),
                                                        b"root")
            if not smpl:
                raise ValueError("the grammar does not compile:\n" + grammar)
            if len(self._samplers) > 256:
                for old in self._samplers.values():
                    self._lib.llama_sampler_free(old)
                self._samplers.clear()
            self._samplers[grammar] = smpl
        return smpl

    def close(self) -> None:
        for smpl in self._samplers.values():
            self._lib.llama_sampler_free(smpl)
        self._samplers.clear()
        self._llm.close()

    def compiles(self, grammar: str) -> bool:
        try:
            self._sampler(grammar)
        except ValueError:
            return False
        return True

    def _allowed(self, smpl: Any, tok: int) -> bool:
        lib = self._lib
        arr = (lib.llama_token_data * 1)(lib.llama_token_data(tok, 0.0, 0.0))
        cur = lib.llama_token_data_array(arr, 1, -1, False)
        lib.llama_sampler_apply(smpl, ctypes.byref(cur))
        return not math.isinf(arr[0].logit)

    def accepts(self, grammar: str, text: str) -> bool:
        """The grammar admits exactly `text` (a whole answer)."""
        smpl = self._sampler(grammar)
        self._lib.llama_sampler_reset(smpl)
        tokens = self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        for tok in tokens:
            if not self._allowed(smpl, tok):
                return False
            self._lib.llama_sampler_accept(smpl, tok)
        return self._allowed(smpl, self._eos)


def oracle_or_skip() -> GbnfOracle:
    """The oracle (built once), or a skipped test when llama_cpp or the weights are
    missing."""
    import pytest

    if _ORACLE:
        return _ORACLE[0]
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        pytest.skip("llama_cpp is not installed (pip install 'toolrules[local]'): GBNF "
                    "acceptance is checked with llama.cpp's own grammar engine")
    from toolrules.clients import default_gguf

    try:
        path = default_gguf()
    except (ImportError, OSError) as exc:
        pytest.skip(f"the bundled local weights are not installed: {exc}")
    _ORACLE.append(GbnfOracle(path))
    atexit.register(_ORACLE[0].close)
    return _ORACLE[0]
