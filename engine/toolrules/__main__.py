"""`python -m toolrules ...`: the same CLI as the `toolrules` command."""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    main()
