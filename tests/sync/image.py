"""What the weight-sync image (the Dockerfile's last stage) holds: standbyc, the packages its
build stage lists, and what they require, as pip would install them."""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import REPO

DOCKERFILE = (REPO / "Dockerfile").read_text()
STAGES = {s.split("\n", 1)[0].rsplit(" AS ", 1)[1]: s for s in DOCKERFILE.split("\nFROM ")[1:]}
# What the build stage wheels with its dependencies (the image installs these and standbyc).
LISTED = set(re.findall(r"^ +(numpy .*)$", STAGES["build"], re.MULTILINE)[0].split())


def closure(names: Iterable[str]) -> set[str]:
    """The distributions pip installs for ``names``: each, and what it requires (markers
    evaluated for this interpreter, no extras), as installed here."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        for line in metadata.requires(name) or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen
