"""Every reuse of earlier work, behind one switch.

standbyc is a plain compiler and a plain validator; everything that makes a second run
cheap lives here, so what it assumes can be read in one place:

- ``store``: the content-addressed cache (one SQLite file) of passes, renderings and
  parsed spec texts, keyed on every input that can change them;
- ``identity``: which promtool and Kyverno tests of different specs are the same test but
  for the spec's names, shown sound text by text;
- ``shapes``: which kubeconform verdicts carry from one Kubernetes version to another,
  from the schemas' shapes;
- ``compiled``: the compile's side of the store (parsed texts, renderings);
- ``verdicts``: the gate's one seam (``GateMemo``, the gate's ``compiler.gate.reuse.Reuse``):
  ``plan(work)`` (what must run), ``settle(ran)`` (what must run too), ``results()`` (every
  verdict, reused ones put back); it reads through ``reading`` (the tree's files, the
  store) and keys each pass as ``keys`` says.

Reuse imports the gate, never the other way round: ``compiler.validation`` hands the gate
its reuse.

``STANDBYC_REUSE=off`` (``switch.enabled``) turns all of it off: every validator runs on
every input (the gate gets ``compiler.gate.reuse.Recompute``) and every spec is rendered.
``tests/gate/test_differential.py`` holds the two to the same verdicts.
"""

from compiler.reuse.switch import enabled

__all__ = ["enabled"]
