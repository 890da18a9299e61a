"""The README's tables agree with the code: every alert the registry builds is in the
alerts table and nothing else is; every command and flag in the commands table exists, and
every command is in it."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from compiler import alerts
from compiler.api import compile_tree
from compiler.cli import build_parser
from tests.conftest import REPO

README = (REPO / "README.md").read_text()


def _rows(heading: str) -> list[str]:
    """The rows of the first table after ``heading``."""
    after = README.split(heading, 1)[1]
    lines = after[after.index("\n|") + 1 :].splitlines()
    rows = lines[: next(i for i, x in enumerate(lines) if not x)]
    return rows[2:]  # without the header and its rule


def _table(heading: str) -> list[str]:
    """The first column of the first table after ``heading``."""
    found: list[str] = []
    for row in _rows(heading):
        found += re.findall(r"^\| (`[^|]*(?:\\\|[^|]*)*`) \|", row)
    return found


def _built(tmp_path: Path) -> list[alerts.Alert]:
    result = compile_tree([REPO / "specs"], tmp_path / "out", validate=False, write=False)
    return [a for one in result.specs for a in alerts.build_all(one.plan)]


def test_the_alerts_table_is_the_registry(tmp_path: Path) -> None:
    listed = {r.strip("`") for r in _table("### Alerts")}
    built = {a.name for a in _built(tmp_path)}
    assert len(built) == len(alerts.ALERTS)  # the example specs use every alert
    assert listed == built


def test_each_line_on_missing_data_is_a_generated_case(tmp_path: Path) -> None:
    """The table of what each alert does when its exporter is down, restarted or missing:
    every alert has a line, and every case a line quotes ("…": any text) is one of the
    generated cases of an alert on that line, for the example specs."""
    cases: dict[str, set[str]] = {}
    for alert in _built(tmp_path):
        cases.setdefault(alert.name, set()).update(c.name for c in alert.cases)
    rows = _rows("What each alert does when its data is not there")
    covered: set[str] = set()
    for row in rows:
        names = re.findall(r"`(\w+)`", row.split(" | ")[0])
        covered.update(names)
        quoted = re.findall(r'"([^"]+)"', row)
        assert quoted, row
        for text in quoted:
            # "…" stands for any text, at the end or in between
            pattern = ".*".join(re.escape(part.strip()) for part in text.split("…"))
            found = [
                c for name in names for c in cases[name] if re.fullmatch(f"{name} {pattern}", c)
            ]
            assert found, (names, text)
    assert covered == set(cases)


Leaves = dict[tuple[str, ...], argparse.ArgumentParser]


def _leaves(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> Leaves:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {prefix: parser}
    out: Leaves = {}
    for name, child in subs[0].choices.items():
        out |= _leaves(child, (*prefix, name))
    return out


def test_the_commands_table_is_the_parser() -> None:
    leaves = _leaves(build_parser())
    seen: set[tuple[str, ...]] = set()
    for row in _table("## Commands"):
        text = row.strip("`").replace("\\|", "|")
        words = text.split()
        assert words[0] == "standbyc", row
        path: list[str] = []
        for word in words[1:]:
            if word.startswith(("[", "-")) or word.isupper():
                break
            path.append(word)
        # `weights {manifest,diff,...}` stands for each of them
        if path and path[-1].startswith("{"):
            names = path.pop().strip("{}").split(",")
            keys = [(*path, n) for n in names]
        else:
            keys = [tuple(path)]
        for key in keys:
            if key not in leaves and key[:-1] in leaves:  # `schemas build`: a positional
                chosen = [
                    a for a in leaves[key[:-1]]._actions if a.choices and not a.option_strings
                ]
                assert any(key[-1] in a.choices for a in chosen), row  # type: ignore[operator]
                key = key[:-1]  # noqa: PLW2901
            assert key in leaves, f"{row}: no command {' '.join(key)}"
            seen.add(key)
            flags = {o for a in leaves[key]._actions for o in a.option_strings}
            for flag in re.findall(r"(--[a-z][a-z-]*)", text):
                assert flag in flags, f"{row}: {' '.join(key)} has no {flag}"
    assert set(leaves) == seen, sorted(set(leaves) - seen)
