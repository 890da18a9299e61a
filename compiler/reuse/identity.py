"""A generated unit test with its spec's identity abstracted: the namespace and name of the
spec directory it lies under (``<namespace>/<name>/...``) replaced by placeholders, so
that specs stamped from one template share one promtool or Kyverno run per shape.

Sharing is sound only where renaming the identity everywhere at once cannot change what a
tool decides. That is shown for each text, never assumed from a list of what might break:

- **Not a number.** No string holding the name may read as a number: one that starts
  with a digit (after a sign or a dot), is made only of the characters of numbers (hex digits,
  ``x``, ``o``, ``b``, ``p``, ``.``, ``_``, signs) with a digit, or is ``Inf`` or ``NaN``.
  So no label value holding it is ever read as a number (a histogram's ``le``,
  ``humanize``).
- **Positions.** Every occurrence stands where its tool compares strings for equality:
  a promtool test's names, expected labels and annotations, a label matcher's value in
  PromQL, the literal text of a Go template, any string value of a Kyverno file; never a
  key, a number, a duration, an alert or record name, PromQL outside a matcher's value,
  or inside a template's action. Checked on the parsed files: the text with the identity
  replaced by probe names must parse exactly as the original with the probes put in
  those positions, and anywhere else not at all.
- **Functions.** Every function a PromQL expression or a Go template calls is on an
  allow-list of functions that read a label value only for equality (``PROMQL_FUNCTIONS``,
  ``TEMPLATE_FUNCTIONS``); ``printf`` only with verbs that embed a value whole.
- **Regexes.** A regex matcher over a label whose values hold the identity is a finite
  set of literal strings that hold it whole.
- **Kyverno.** No wildcard and no variable anywhere; the key also holds, for every string
  holding the identity, whether it fits the 63 and 253 character limits of names.

Where any of these fails, the key is over the exact bytes (``abstract`` returns None).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from compiler import yamlio
from compiler.reuse import store

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
PLACEHOLDER = {"name": "\x00name\x00", "namespace": "\x00namespace\x00"}
# Letters outside every number syntax the tools read: digits, '.', '_', sign, exponent
# (e, p), hex digits (a-f) and prefixes (x, o, b), inf, infinity, nan, and the duration
# units (ns, us, ms, s, m, h, d, w, y).
_NUMERIC_START = re.compile(r"[+-]?\.?[0-9]")
_NUMERIC_WORD = re.compile(r"[+-]?(?:inf(?:inity)?|nan)", re.IGNORECASE)
_NUMERIC_CHARS = re.compile(r"[0-9a-fA-FxXoObBpP._+-]*[0-9][0-9a-fA-FxXoObBpP._+-]*")
_PROBES = ("qzprobe-namespace-vq", "qzprobe-name-vq")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


PROMQL_FUNCTIONS = _words(
    # aggregations and their modifiers, and set operators before a parenthesis
    "sum min max avg count group stddev stdvar quantile count_values "
    "by without on ignoring group_left group_right bool and or unless "
    # functions of sample values and time (none reads a label)
    "abs absent absent_over_time acos acosh asin asinh atan atanh avg_over_time ceil changes "
    "clamp clamp_max clamp_min cos cosh count_over_time day_of_month day_of_week day_of_year "
    "days_in_month deg delta deriv exp floor histogram_quantile hour idelta increase irate "
    "last_over_time ln log10 log2 mad_over_time max_over_time min_over_time minute month pi "
    "predict_linear present_over_time quantile_over_time rad rate resets round scalar sgn sin "
    "sinh sqrt stddev_over_time stdvar_over_time sum_over_time tan tanh time timestamp vector "
    "year start end"
)
TEMPLATE_FUNCTIONS = _words(
    "if else end range with and or not eq ne nil true false query first value label printf "
    "humanize humanize1024 humanizeDuration humanizePercentage humanizeTimestamp toTime "
    "strvalue"
)
# printf verbs that embed a value whole: no width, precision or flags (%5s pads by length).
_VERB = re.compile(r"%(.)")
_WHOLE_VERBS = frozenset("qdfge%")

PLAIN, PROMQL, TEMPLATE = "plain", "promql", "template"
_ANY = "?"  # any key
_LABEL_MAPS = ("exp_labels", "external_labels", "labels")
# Where a promtool test file holds strings compared only for equality (or PromQL).
_TEST_POSITIONS: dict[tuple[str, ...], str] = {
    ("rule_files", "*"): PLAIN,
    ("group_eval_order", "*"): PLAIN,
    ("tests", "*", "name"): PLAIN,
    ("tests", "*", "external_labels", _ANY): PLAIN,
    ("tests", "*", "input_series", "*", "series"): PROMQL,
    ("tests", "*", "alert_rule_test", "*", "alertname"): PLAIN,
    ("tests", "*", "alert_rule_test", "*", "exp_alerts", "*", "exp_labels", _ANY): PLAIN,
    ("tests", "*", "alert_rule_test", "*", "exp_alerts", "*", "exp_annotations", _ANY): PLAIN,
    ("tests", "*", "promql_expr_test", "*", "expr"): PROMQL,
    ("tests", "*", "promql_expr_test", "*", "exp_samples", "*", "labels"): PROMQL,
}
# ... and a rules file.
_RULE_POSITIONS: dict[tuple[str, ...], str] = {
    ("groups", "*", "name"): PLAIN,
    ("groups", "*", "labels", _ANY): PLAIN,
    ("groups", "*", "rules", "*", "expr"): PROMQL,
    ("groups", "*", "rules", "*", "labels", _ANY): TEMPLATE,
    ("groups", "*", "rules", "*", "annotations", _ANY): TEMPLATE,
}

# PromQL: string literals (double, single, back quotes) and comments.
_PROMQL_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`|#[^\n]*', re.DOTALL)
_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")
# A label matcher: the label, its operator, then the string literal that is its value.
_MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*$")
_ESCAPE = re.compile(r"\\[\\\"']")
_STR = r'("(?:[^"\\]|\\.)*")'
_LAST_FOUR = re.compile(rf"{_STR}\s*,\s*{_STR}\s*,\s*{_STR}\s*,\s*{_STR}\s*\)")
# Regex syntax that Go's RE2 and Python's re read differently, or only one of them reads.
_UNSAFE_REGEX = re.compile(r"\[:|\\[pPQECzAbB]|\(\?")
_REPL_REF = re.compile(r"\$(?:\{(\w+)\}|(\d+))")
_ACTION = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_TEMPLATE_TOKEN = re.compile(
    r'"(?:[^"\\]|\\.)*"|`[^`]*`|\'(?:[^\'\\]|\\.)*\'|[$.]?[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_]\w*)*'
)
# Kyverno: a wildcard in a pattern, or a variable (a JMESPath expression may read a name).
_KYVERNO_READS = re.compile(r"[*?]|\{\{")


def abstract(
    rel: str,
    texts: Sequence[bytes],
    *,
    kyverno: bool = False,
    parsed: Sequence[Sequence[Any] | None] = (),
) -> list[bytes] | None:
    """``texts`` with the spec's identity replaced, or None where that is not shown sound
    (the caller then keys on the exact bytes). ``texts`` are a promtool test and the rule
    files it lists (in that order), or with ``kyverno`` the files of a Kyverno test; for
    those, one more item follows the texts: which of Kubernetes' name limits each string
    holding the identity fits. ``parsed``: for some texts, the documents they read back as
    (known to the caller), so they are not parsed again."""
    parts = rel.split("/")
    if len(parts) < 3 or not all(_DNS_LABEL.match(p) for p in parts[:2]):
        return None
    checker = _Checker(rel, kyverno=kyverno)
    out: list[bytes] = []
    for i, text in enumerate(texts):
        if not text.startswith(yamlio.HEADER_MARK.encode()):
            return None
        body = text.split(b"\n", 1)[1] if b"\n" in text else b""
        checker.positions = _TEST_POSITIONS if i == 0 else _RULE_POSITIONS  # (not Kyverno's)
        if not checker.holds_in(body, parsed[i] if i < len(parsed) else None):
            return None
        out.append(replace(rel, body))
    if checker.numeric or not checker.reads_equal_only():
        return None
    if kyverno:  # name limits: a longer name may be refused where a shorter one is not
        out.append(bytes(checker.limits))
    return out


# A promtool test for ``abstract_digest``: its path, its texts (the test, then the rule files
# it lists) and the documents some of them are known to read back as.
TestJob = tuple[str, Sequence[bytes], Sequence[Sequence[Any] | None]]


def abstract_digest(job: TestJob) -> str | None:
    """``abstract`` of a promtool test as one digest (what a worker process sends back),
    or None where it is not shown sound."""
    rel, texts, parsed = job
    out = abstract(rel, texts, parsed=parsed)
    return None if out is None else store.key("abstract", *out)


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


@functools.lru_cache(maxsize=256)
def _probe_pairs(rel: str) -> tuple[tuple[str, str], ...]:
    """``_pairs`` with each placeholder's probe name, once per ``rel``."""
    probe_of = {PLACEHOLDER["namespace"].encode(): _PROBES[0],
                PLACEHOLDER["name"].encode(): _PROBES[1]}  # fmt: skip
    return tuple((value.decode(), probe_of[placeholder]) for value, placeholder in _pairs(rel))


def _probe(rel: str, text: str) -> str:
    """``text`` with the identity replaced by the probe names (as ``replace`` would)."""
    for value, probe in _probe_pairs(rel):
        text = text.replace(value, probe)
    return text


class _Checker:
    """Walks the parsed texts of one test: builds what each probed text must parse as, and
    collects what the soundness of them all depends on."""

    def __init__(self, rel: str, *, kyverno: bool) -> None:
        self.rel = rel
        self.kyverno = kyverno
        self.positions: dict[tuple[str, ...], str] = {}  # empty: every value is plain
        self.values = [v.decode() for v, _ in _pairs(rel)]
        # per string holding the identity, in order: 0 fits 63 characters (a DNS label, a
        # label value), 1 fits 253 (a DNS subdomain), 2 neither
        self.limits: list[int] = []
        self.numeric = False  # whether a string holding it may read as a number
        # every distinct PromQL and Go template text, and what its probed form must be
        # (a test repeats its series in every case: each is read once)
        self.promql: dict[str, str] = {}
        self.templates: dict[str, str] = {}
        self.label_values: list[tuple[str, str]] = []  # (label, value) of label maps

    def holds(self, text: str) -> bool:
        return any(v in text for v in self.values)

    def holds_in(self, body: bytes, docs: Sequence[Any] | None = None) -> bool:
        """Whether every occurrence of the identity in ``body`` stands where it may."""
        try:
            text = body.decode("utf-8")
            if any(p in text for p in _PROBES):
                return False
            if self.kyverno and _KYVERNO_READS.search(text):
                return False
            if docs is None:
                docs = yamlio.read_back(text)
            probed = yamlio.read_back(_probe(self.rel, text))
        except Exception:  # not plain YAML (an alias, a tag, a duplicate key): keep it exact
            return False
        return [self.walk(doc, ()) for doc in docs] == probed

    def _language(self, path: tuple[str, ...]) -> str | None:
        if self.kyverno:
            return PLAIN
        found = self.positions.get(path)
        if found is None and path:
            found = self.positions.get((*path[:-1], _ANY))
        return found

    def walk(self, node: Any, path: tuple[str, ...]) -> Any:
        if isinstance(node, dict):
            return {k: self.walk(v, (*path, str(k))) for k, v in node.items()}
        if isinstance(node, list):
            return [self.walk(v, (*path, "*")) for v in node]
        return self._string(node, path) if isinstance(node, str) else node

    def _string(self, node: str, path: tuple[str, ...]) -> str:
        language = self._language(path)
        if language == PROMQL:
            if node not in self.promql:
                self.promql[node] = self._promql(node)
            return self.promql[node]
        if len(path) >= 2 and path[-2] in _LABEL_MAPS:
            self.label_values.append((path[-1], node))
        if language == TEMPLATE:
            if node not in self.templates:
                self.templates[node] = self._template(node)
            return self.templates[node]
        if language == PLAIN:
            self._held(node)
            return _probe(self.rel, node)
        return node  # nowhere the identity may stand: the probed text must keep it

    def _held(self, value: str) -> None:
        """Note a value in a position where the identity may stand."""
        if self.holds(value):
            self.limits.append(0 if len(value) <= 63 else 1 if len(value) <= 253 else 2)
            self.numeric = self.numeric or _number_like(value)

    def _promql(self, expr: str) -> str:
        """``expr`` with the identity probed only inside label matchers' values."""
        out, last = [], 0
        for m in _PROMQL_STRING.finditer(expr):
            literal = m.group(0)
            before = expr[last : m.start()]
            out.append(before)
            is_value = literal[0] != "#" and _MATCHER.search(before) is not None
            if is_value:
                self._held(literal[1:-1])
            out.append(_probe(self.rel, literal) if is_value else literal)
            last = m.end()
        out.append(expr[last:])
        return "".join(out)

    def _template(self, text: str) -> str:
        """``text`` with the identity probed only in its literal text, not in actions."""
        out, last = [], 0
        for m in _ACTION.finditer(text):
            out.append(_probe(self.rel, text[last : m.start()]))
            out.append(m.group(0))
            last = m.end()
        out.append(_probe(self.rel, text[last:]))
        return "".join(out)

    def reads_equal_only(self) -> bool:
        """Whether every function called is on the allow-lists, and every label value
        holding the identity that is read beyond equality (a regex matcher, a
        ``label_replace``, a ``sortByLabel``) gives what its probed form gives."""
        exprs, sorted_by = list(self.promql), []
        for template in self.templates:
            for action in _ACTION.findall(template):
                found = _template_ok(action)
                if found is None:
                    return False
                exprs += found[0]
                sorted_by += found[1]
        reads = _Reads()
        if not all(reads.add(expr) for expr in exprs):
            return False
        values = reads.values
        for label, value in self.label_values:
            values.setdefault(label, set()).add(value)
        if not all(
            self._same_match(r, values.get(src, set()), repl) for _, repl, src, r in reads.replaced
        ):
            return False
        _add_made(values, reads.replaced)
        if any(self.holds(v) for label in sorted_by for v in values.get(label, ())):
            return False
        return all(
            self._same_match(p, values.get(label, set()), None) for label, p in reads.regexes
        )

    def _same_match(self, pattern: str, values: set[str], repl: str | None) -> bool:
        """Whether ``pattern`` (anchored, as Prometheus anchors it) matches each value as its
        probed form matches the probed value, and ``repl`` expands to the probed result."""
        if _UNSAFE_REGEX.search(pattern):
            return False  # syntax where Go's RE2 and Python's re may differ
        try:
            real = re.compile(pattern)
            probed = re.compile(_probe(self.rel, pattern))
        except re.error:
            return False
        template = _REPL_REF.sub(r"\\g<\1\2>", repl) if repl is not None else None
        for value in values:
            a, b = real.fullmatch(value), probed.fullmatch(_probe(self.rel, value))
            if (a is None) != (b is None):
                return False
            if a is not None and b is not None and template is not None:
                try:
                    if _probe(self.rel, a.expand(template)) != b.expand(template):
                        return False
                except (re.error, IndexError):
                    return False
        return True


def _number_like(text: str) -> bool:
    """Whether ``text`` may read as a number or a duration to some tool (a superset)."""
    return (
        _NUMERIC_START.match(text) is not None
        or _NUMERIC_WORD.fullmatch(text) is not None
        or _NUMERIC_CHARS.fullmatch(text) is not None
    )


class _Reads:
    """What PromQL texts read of label values: regex matchers, ``label_replace`` calls,
    and every value a matcher compares a label with."""

    def __init__(self) -> None:
        self.regexes: list[tuple[str, str]] = []  # (label, pattern)
        self.replaced: list[tuple[str, str, str, str]] = []  # (dst, repl, src, regex)
        self.values: dict[str, set[str]] = {}

    def add(self, expr: str) -> bool:
        """Note what ``expr`` reads; False when it calls a function off the allow-list or
        holds a string this reader cannot read."""
        calls = _CALL.findall(_PROMQL_STRING.sub(" ", expr))
        if any(name not in PROMQL_FUNCTIONS and name != "label_replace" for name in calls):
            return False
        literals = _literals(expr)
        if any(value is None for _, _, value in literals):
            return False  # an escape this reader does not know
        for label, op, value in literals:
            if label is None or value is None:
                continue
            if op in ("=~", "!~"):
                self.regexes.append((label, value))
            else:
                self.values.setdefault(label, set()).add(value)
        if "label_replace" in calls:
            args = _label_replace_args(expr)
            if args is None:
                return False
            self.replaced += args
        return True


def _add_made(values: dict[str, set[str]], replaced: list[tuple[str, str, str, str]]) -> None:
    """Add to ``values`` what each ``label_replace`` makes of them (until nothing new)."""
    for _ in range(len(replaced) + 1):
        before = sum(map(len, values.values()))
        for dst, repl, src, regex in replaced:
            pattern = re.compile(regex)
            template = _REPL_REF.sub(r"\\g<\1\2>", repl)
            for value in list(values.get(src, ())):
                if (m := pattern.fullmatch(value)) is not None:
                    values.setdefault(dst, set()).add(m.expand(template))
        if sum(map(len, values.values())) == before:
            return


def _template_ok(action: str) -> tuple[list[str], list[str]] | None:
    """The string literals of a template action (each may be a query) and the labels it
    sorts by, when it calls only allowed functions and formats with whole-value verbs;
    else None."""
    strings: list[str] = []
    sorted_by: list[str] = []
    tokens = _TEMPLATE_TOKEN.findall(action)
    for i, token in enumerate(tokens):
        if token[0] in "\"'`":
            literal = _unquote(token)
            if literal is None or any(v not in _WHOLE_VERBS for v in _VERB.findall(literal)):
                return None
            strings.append(literal)
        elif token == "sortByLabel" and i + 1 < len(tokens) and tokens[i + 1][0] == '"':
            sorted_by.append(tokens[i + 1][1:-1])
        elif token[0] not in "$." and token not in TEMPLATE_FUNCTIONS:
            return None
    return strings, sorted_by


def _unquote(literal: str) -> str | None:
    """A Go or PromQL string literal's value; None for an escape other than \\\\, \\" and \\'."""
    if literal[0] == "`":
        return literal[1:-1]
    body = literal[1:-1]
    if _ESCAPE.sub("", body).count("\\"):
        return None
    return _ESCAPE.sub(lambda m: m.group(0)[1], body)


def _literals(expr: str) -> list[tuple[str | None, str, str | None]]:
    """Each string literal of a PromQL text: (its matcher's label, operator, value) when
    it is a matcher's value, else (None, "", value); comments left out."""
    out: list[tuple[str | None, str, str | None]] = []
    last = 0
    for m in _PROMQL_STRING.finditer(expr):
        literal = m.group(0)
        matcher = _MATCHER.search(expr[last : m.start()])
        last = m.end()
        if literal[0] == "#":
            continue
        if matcher is None:
            out.append((None, "", _unquote(literal)))
        else:
            out.append((matcher.group(1), matcher.group(2), _unquote(literal)))
    return out


def _label_replace_args(expr: str) -> list[tuple[str, str, str, str]] | None:
    """(dst, replacement, src, regex) of every ``label_replace`` call in ``expr``, or None
    when one's last four arguments are not plain string literals."""
    out: list[tuple[str, str, str, str]] = []
    for m in re.finditer(r"\blabel_replace\s*\(", expr):
        tail = _LAST_FOUR.search(expr, m.end())
        if tail is None:
            return None
        args = [_unquote(tail.group(i)) for i in range(1, 5)]
        if any(a is None for a in args):
            return None
        dst, repl, src, regex = (a or "" for a in args)
        out.append((dst, repl, src, regex))
    return out
