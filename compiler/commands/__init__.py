"""One module (or package) per subcommand; each exposes ``register(subparsers)``.

``register`` adds its parser and sets ``func`` to a ``(Namespace) -> int``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from compiler.commands import (
    argocd,
    check,
    compile,
    doctor,
    plan,
    schema,
    schemas,
    tools_cmd,
    validate,
)
from compiler.commands.weights import parsers as weights

Register = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]

COMMANDS: dict[str, Register] = {
    "compile": compile.register,
    "check": check.register,
    "plan": plan.register,
    "validate": validate.register,
    "schema": schema.register,
    "schemas": schemas.register,
    "doctor": doctor.register,
    "weights": weights.register,
    "argocd": argocd.register,
    "tools": tools_cmd.register,
}
