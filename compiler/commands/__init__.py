"""One module per subcommand; each exposes ``register(subparsers)``.

``register`` adds its parser and sets ``func`` to a ``(Namespace) -> int``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from compiler.commands import weights

Register = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]

COMMANDS: dict[str, Register] = {
    "weights": weights.register,
}
