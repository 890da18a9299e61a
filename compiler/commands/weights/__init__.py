"""``standbyc weights``: manifest, diff, apply, verify for safetensors checkpoints, and
publish, sync and report for a store of generations.

``parsers.py`` registers the command; ``checkpoints.py`` (manifest, diff, apply, verify)
and ``run.py`` (publish, sync, report) run each action, imported only when one runs;
``exits.py`` says what exit code each of the library's errors means. This package's root
imports none of them, so an action's import of ``exits.py`` loads nothing that loads the
action.
"""
