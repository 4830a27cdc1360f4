"""Profiler tools scored against the ground truth, one adapter per file.

The contract (docs/tools.md has a worked example). An adapter is a class in a module of this
package, decorated with :func:`harness.tools.base.register`, with

- ``name``: what ``harness score --tool NAME`` and ``tools.run`` take (``hta``, ``nsys-ai``);
- ``reads``: the traces its tool reads, one of ``sqlite`` (the nsys export), ``kineto`` (the
  PyTorch Profiler's traces, one per rank) or ``text`` (a command's output);
- ``missing() -> str | None``: why the tool cannot run on this machine (not installed), or None;
- ``judge(traces: Traces, ctx: Context) -> dict[class, Call]``: a :class:`~.base.Call` for
  **every** class: ``flagged`` or ``clear``, with the tool's own evidence (its numbers, rule or
  API names), or ``n/a`` with the reason where the tool cannot see the class or read the
  traces. ``n/a`` is never a miss: the report is left out of that tool's score for the class.

Settings an adapter needs are fields of a config section (``harness/core/tools_config.py``:
keyword-only dataclasses, validated, recorded in the run's manifest, overridable as
``tools.KEY=VALUE`` and ``harness score --tool-set KEY=VALUE``). Nothing else registers a tool:
the registry imports every module here (:func:`~.base.adapters`).

Adapters: ``ours`` (the suite's detectors), ``nsys-rules`` (nsys's expert rules), ``keyword``
(any text, by the class specs' words), ``hta`` (Holistic Trace Analysis, optional extra),
``nsys-ai`` (its offline root-cause patterns and tensor_core_usage, optional extra),
``tb-plugin`` (the PyTorch profiler plugin's tensor-core rule on the export's kernels). The truth they are scored against
is read in one place, :func:`harness.tools.truth.truth_table`; the table is
:mod:`harness.tools.table`.
"""
