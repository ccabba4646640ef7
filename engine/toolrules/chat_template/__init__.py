"""The model's own chat template: rendering it as servers do, probing what it enforces,
drops and rewrites, reading it from a GGUF file, and fitting conversations to it.

A local server (llama-server, vLLM, LM Studio, Ollama ...) turns every request into one
prompt with the Jinja template the model's makers wrote. That template decides what a
conversation may look like (where system messages stand, whether turns alternate, what it
drops) and what the prompt looks like from one turn to the next. Everything toolrules does
about it lives here, below the proxy, the clients, the loop and emulation that use it:

- `_render`: the sandbox a template renders in, as servers provide it;
- `_gguf`: the template (and bos/eos tokens) from a GGUF file's metadata;
- `_inspect`: probe conversations rendered through a template, read as capability data;
- `_turns`: a conversation rewritten to fit the template's turn constraints;
- `_part`: the engine methods (`Engine.normalize_turns`, `Engine.inspect_template`).
"""
