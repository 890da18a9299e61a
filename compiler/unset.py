"""What a spec leaves to a default that decides something it should say itself: each is a
warning naming the field and what its default decides."""

from __future__ import annotations

from typing import Any

from compiler.load import PathKey, Problem, dotted_path

# (the field, what its default decides), for the fields whose absence is worth a warning.
DECIDING: tuple[tuple[PathKey, str], ...] = (
    (("spec", "model", "size"), "the seed's 14 GiB sizes the weights claim, the Jobs' "
     "deadlines and every load and rollout time in PLAN.md"),
    (("spec", "network", "link"), "the seed's 100 Gbit/s bounds every tier's egress and the "
     "takeover PLAN.md plans"),
    (("spec", "alerts", "outUrl"), "every alert's runbook_url points at runbooks.example.com, "
     "where nothing is; set it to where out/ is browsed "
     "(https://github.com/<org>/<repo>/blob/main/out) and the alerts link to their section "
     "of the RUNBOOK.md compiled beside PLAN.md"),
)  # fmt: skip


def _written(data: Any, path: PathKey) -> bool:
    node = data
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def problems(data: Any) -> list[Problem]:
    """A warning per field of ``DECIDING`` the spec ``data`` (as written) leaves out."""
    out: list[Problem] = []
    for path, decides in DECIDING:
        own_runbooks = path[-1] == "outUrl" and _written(data, (*path[:-1], "runbookBaseUrl"))
        if not _written(data, path) and not own_runbooks:
            out.append((path, f"{dotted_path(path)} is not set: {decides}"))
    return out
