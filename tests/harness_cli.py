"""``python tests/harness_cli.py ARGS`` is ``python -m harness ARGS`` with torch barred from this
process: every CLI test runs the harness this way, so each checks that the harness's own process
(which plans, gates, exports, judges and reports) never imports torch. Only workers and the fork
server may; they are new interpreters, where the bar does not reach."""

from __future__ import annotations

import importlib.abc
import os
import runpy
import sys


class NoTorch(importlib.abc.MetaPathFinder):
    """Refuses ``torch`` and its submodules: an import of either fails the run loudly."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"the harness's own process imported {name}: only workers may")
        return None


if __name__ == "__main__":
    sys.meta_path.insert(0, NoTorch())
    sys.path[0] = os.getcwd()  # as `python -m` does: the working folder first, not tests/
    runpy.run_module("harness", run_name="__main__", alter_sys=True)
