"""One module per subcommand; each exposes ``register(subparsers)``.

``register`` adds its parser and sets ``func`` to a ``(Namespace) -> int``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

Register = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]

COMMANDS: dict[str, Register] = {}
