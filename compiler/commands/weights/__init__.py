"""``standbyc weights``: manifest, diff, apply, verify for safetensors checkpoints, and
publish, sync and report for a store of generations.

``parsers.py`` registers the command; ``run.py`` runs each action (imported only when
one runs); ``exits.py`` says what exit code each of the library's errors means.
"""

from __future__ import annotations

from compiler.commands.weights.parsers import register

__all__ = ["register"]
