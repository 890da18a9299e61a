"""A generated test with its spec's identity abstracted: the namespace and name of the spec
directory it lies under (``<namespace>/<name>/...``) replaced by placeholders.

Two specs that differ only in name and namespace get unit tests that differ only in those
strings, and such tests have the same outcome: what promtool and kyverno make of a label
value or a namespace (equality with another value, the text of an annotation, a namespace
a policy matches) survives renaming it everywhere at once, and the two names, DNS-1123
labels, carry nothing else a rule or a policy could read. So a pass of one stands for the
other, within a run and in the cache (``compiler.gate.memo``), and specs stamped from one
template cost one promtool run per shape instead of one per spec.

Where a value could be read beyond equality the files are not abstracted (their keys stay
exact): a regex matcher, a sort or a wildcard over a label that holds the name, a regex
template function or label rewriting anywhere; and only files standbyc generated are (their
first line, which names the spec file, is left out).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from compiler import yamlio

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
PLACEHOLDER = {"name": "\x00name\x00", "namespace": "\x00namespace\x00"}
# Reads strings beyond equality wherever it stands: a template function over text (a
# template may span lines, so the word alone counts), label rewriting, a sort, topk.
_ANYWHERE = re.compile(
    rb"\b(?:reReplaceAll|match|title|toUpper|toLower|stripPort|stripDomain|parseDuration)\b"
    rb"|\b(?:label_replace|label_join|sort|sort_desc|sort_by_label|sort_by_label_desc)\s*\("
    rb"|\b(?:topk|bottomk|limitk|limit_ratio)\b"
)
_WORDS = (b"reReplaceAll", b"match", b"title", b"toUpper", b"toLower", b"strip",
          b"parseDuration", b"label_replace", b"label_join", b"sort", b"topk", b"bottomk",
          b"limit")  # fmt: skip
# Kyverno: a wildcard in a pattern, or a variable (a JMESPath expression may read a name).
_KYVERNO_READS = re.compile(rb"[*?]|\{\{")
# Labels whose values are read beyond equality: regex matchers and sortByLabel.
# (A quote may be escaped, inside a double-quoted YAML string.)
_READ_LABELS = re.compile(rb'\b(\w+)\s*[=!]~\s*(\\?)"(.*?)\2"|sortByLabel\s+(\\?)"(\w+)\4"')
# A regex that is a finite set of strings: a literal prefix, then literal alternatives.
_FINITE = re.compile(rb"^((?:[a-z0-9_-]|\x00\w+\x00)*)(?:\(((?:[a-z0-9_-]+\|)*[a-z0-9_-]+)\))?$")
# A label and (the start of) its value: a PromQL matcher, or a YAML key at a line's start.
_PROMQL_PAIR = re.compile(rb'\b(\w+)\s*(?:=~|!~|!=|=)\s*\\?"([^"\\]*)')
_YAML_PAIR = re.compile(rb'^\s*(?:-\s+)?(\w+):\s*\\?"?([^"\n]*)')


def abstract(rel: str, texts: Sequence[bytes], *, kyverno: bool = False) -> list[bytes] | None:
    """``texts`` (the files of one test, under ``rel``) with the spec's identity replaced,
    or None where that would not be sound (the caller then keys on the exact bytes).
    ``kyverno``: the texts are a Kyverno test's (policies and resources), not promtool's."""
    parts = rel.split("/")
    if len(parts) < 3 or not all(_DNS_LABEL.match(p) for p in parts[:2]):
        return None
    out: list[bytes] = []
    for text in texts:
        if not text.startswith(yamlio.HEADER_MARK.encode()):
            return None
        body = replace(rel, text.split(b"\n", 1)[1] if b"\n" in text else b"")
        if not _sound(rel, body, kyverno=kyverno):
            return None
        out.append(body)
    return out


def replace(rel: str, body: bytes) -> bytes:
    """``body`` with the namespace and name that ``rel`` starts with replaced: the longer
    first, so one that holds the other is replaced whole; the same string for both is one
    placeholder (and keys apart from specs where the two differ)."""
    for value, placeholder in _pairs(rel):
        body = body.replace(value, placeholder)
    return body


def _pairs(rel: str) -> list[tuple[bytes, bytes]]:
    namespace, name = rel.split("/")[:2]
    pairs = {name.encode(): PLACEHOLDER["name"].encode()}
    pairs.setdefault(namespace.encode(), PLACEHOLDER["namespace"].encode())
    return sorted(pairs.items(), key=lambda pair: -len(pair[0]))


def _fill(rel: str, body: bytes) -> bytes:
    for value, placeholder in _pairs(rel):
        body = body.replace(placeholder, value)
    return body


def _sound(rel: str, body: bytes, *, kyverno: bool) -> bool:
    """Whether every value that holds a placeholder is read only for equality."""
    if b"\x00" not in body:
        return True  # nothing was replaced
    if kyverno:
        return _KYVERNO_READS.search(body) is None
    if _reads_text(body):
        return False
    read = [(m.group(1) or m.group(5), m.group(3))
            for ln in _lines_with(body, (b"~", b"sortByLabel"))
            for m in _READ_LABELS.finditer(ln)]  # fmt: skip
    # Labels whose value holds a placeholder somewhere, in PromQL (l="...") or YAML (l: ...).
    named = {
        m.group(1)
        for line in (_lines_with(body, (b"\x00",)) if read else [])
        for m in (*_PROMQL_PAIR.finditer(line), *_YAML_PAIR.finditer(line))
        if b"\x00" in m.group(2)
    }
    return all(
        _finite(rel, pattern) if pattern and b"\x00" in pattern else label not in named
        for label, pattern in read
    )


def _lines_with(body: bytes, words: Sequence[bytes]) -> list[bytes]:
    """The lines of ``body`` holding one of ``words`` (found with bytes.find: fast)."""
    starts: set[int] = set()
    for word in words:
        i = body.find(word)
        while i != -1:
            starts.add(body.rfind(b"\n", 0, i) + 1)
            i = body.find(word, i + 1)
    return [body[s : (body.find(b"\n", s) + 1 or len(body) + 1) - 1] for s in sorted(starts)]


def _reads_text(body: bytes) -> bool:
    return any(_ANYWHERE.search(line) for line in _lines_with(body, _WORDS))


def _finite(rel: str, pattern: bytes) -> bool:
    """Whether ``pattern`` is a literal prefix and literal alternatives whose every
    expansion, filled with the real names, abstracts back to itself (no name is formed
    across a piece boundary): then matching it is equality with one of those strings."""
    m = _FINITE.match(pattern)
    if m is None:
        return False
    prefix, alternatives = m.group(1), (m.group(2) or b"").split(b"|")
    return all(replace(rel, _fill(rel, prefix + alt)) == prefix + alt for alt in alternatives)
