"""Finding, checking and driving Nsight Systems.

Search order for the binary: config ``nsys.path``, ``$NSYS``, ``PATH``,
``/opt/nvidia/nsight-systems/*/bin``, ``/usr/local/cuda/bin`` and the copy bundled with Nsight
Compute (``/opt/nvidia/nsight-compute/*/host/target-linux-x64``). Every command is an argument
list; nothing is passed through a shell.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

SEARCH_GLOBS = (
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/usr/local/cuda/bin/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
)


class NsysError(RuntimeError):
    """nsys is unusable or one of its steps failed; the message says what to do."""


@dataclass(frozen=True)
class Nsys:
    """A checked nsys binary."""

    path: str
    version: str

    @property
    def version_tuple(self) -> tuple[int, ...]:
        m = re.search(r"(\d{4})\.(\d+)(?:\.(\d+))?", self.version)
        return tuple(int(x) for x in m.groups() if x is not None) if m else ()


def tool_candidates(
    configured: str | None, env: str, name: str, globs: tuple[str, ...]
) -> list[str]:
    """Places to look for a profiler's executable, in order, without duplicates: the configured
    path, ``$env``, ``name`` on PATH, then each glob's matches, newest version first (nsys here,
    ncu in :mod:`harness.kernels.command`)."""
    out: list[str] = []
    if configured:
        out.append(configured)
    if os.environ.get(env):
        out.append(os.environ[env])
    which = shutil.which(name)
    if which:
        out.append(which)
    for pattern in globs:
        out.extend(sorted(glob.glob(pattern), reverse=True))
    seen: set[str] = set()
    return [c for c in out if not (c in seen or seen.add(c))]


def candidates(configured: str | None) -> list[str]:
    """Places to look for nsys, in order, without duplicates."""
    return tool_candidates(configured, "NSYS", "nsys", SEARCH_GLOBS)


def find(configured: str | None = None) -> Nsys | None:
    """The first working nsys, or None when there is none. A configured path that fails raises."""
    for cand in candidates(configured):
        if not (os.path.isfile(cand) and os.access(cand, os.X_OK)):
            if cand == configured:
                raise NsysError(f"nsys.path={configured} is not an executable file")
            continue
        try:
            proc = subprocess.run(
                [cand, "--version"], capture_output=True, text=True, timeout=60, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            if cand == configured:
                raise NsysError(f"nsys.path={configured} does not run: {exc}") from exc
            continue
        text = (proc.stdout + proc.stderr).strip()
        if proc.returncode == 0 and "Nsight Systems" in text:
            return Nsys(path=cand, version=text.splitlines()[-1].strip())
        if cand == configured:
            raise NsysError(f"nsys.path={configured} --version failed: {text[-500:]}")
    return None


def _options(
    nsys: Nsys,
    output: Path,
    trace: list[str],
    cuda_memory_usage: bool,
    cuda_graph_trace: str | None,
) -> list[str]:
    cmd = [
        nsys.path,
        "profile",
        f"--trace={','.join(trace)}",
        "--sample=none",
        "--cpuctxsw=none",
        f"--output={output}",
        "--force-overwrite=true",
    ]
    if cuda_memory_usage:
        cmd.append("--cuda-memory-usage=true")
    if cuda_graph_trace:
        cmd.append(f"--cuda-graph-trace={cuda_graph_trace}")
    return cmd


def profile_command(
    nsys: Nsys,
    output: Path,
    program: list[str],
    *,
    trace: list[str],
    gpu: bool,
    cuda_memory_usage: bool = False,
    cuda_graph_trace: str | None = None,
    extra_args: list[str] | None = None,
) -> list[str]:
    """``nsys profile`` around ``program``; on a GPU only the cudaProfilerApi range is captured."""
    cmd = _options(nsys, output, trace, cuda_memory_usage, cuda_graph_trace)
    if gpu:
        cmd += ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"]
    return cmd + list(extra_args or []) + program


def server_command(
    nsys: Nsys,
    output: Path,
    *,
    trace: list[str],
    gpu: bool,
    window_range: str,
    cuda_memory_usage: bool = False,
    cuda_graph_trace: str | None = None,
    extra_args: list[str] | None = None,
) -> list[str]:
    """``nsys profile`` in front of a fork server (:class:`harness.execution.forkserver.ForkServer`'s
    ``command_prefix``): nsys traces every child the server forks (which never exec), and each
    capture range, one per child's measured window (cudaProfilerStart/Stop on a GPU, the NVTX
    range ``window_range`` elsewhere), becomes a report of its own, ``OUTPUT.<k>.nsys-rep``
    (``.qdstrm`` where the importer cannot run), written once the server has ended."""
    cmd = _options(nsys, output, trace, cuda_memory_usage, cuda_graph_trace)
    if gpu:
        cmd.append("--capture-range=cudaProfilerApi")
    else:
        cmd += ["--capture-range=nvtx", f"--nvtx-capture={window_range}"]
    cmd += ["--capture-range-end=repeat", "--trace-fork-before-exec=true"]
    return cmd + list(extra_args or [])


#: The environment a traced fork server needs: nsys matches an NVTX capture range by any
#: string, not only registered ones.
SERVER_ENV = {"NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}


def export_command(nsys: Nsys, report: Path, sqlite: Path) -> list[str]:
    return [
        nsys.path,
        "export",
        "--type=sqlite",
        f"--output={sqlite}",
        "--force-overwrite=true",
        "--quiet=true",
        str(report),
    ]


def importer_paths(nsys: Nsys) -> list[Path]:
    """Where this nsys keeps its QdstrmImporter (next to the resolved target folder)."""
    target = Path(os.path.realpath(nsys.path)).parent
    found = [Path(p) for p in glob.glob(str(target.parent / "*" / "QdstrmImporter"))]
    return sorted(found)


def importer_problem(nsys: Nsys) -> str:
    """Say why the importer cannot run (missing shared libraries, missing folder)."""
    importers = importer_paths(nsys)
    if not importers:
        return _no_importer(nsys)
    problems = [p for p in map(_library_problem, importers) if p]
    return "; ".join(problems) or f"importer {importers[0]} failed; see the nsys log"


def importer_missing(nsys: Nsys) -> str:
    """Why this nsys cannot turn a capture into a report, seen before profiling anything: no
    QdstrmImporter beside it, or none whose shared libraries load; '' when one looks usable
    (whether it then works, only a profile tells)."""
    importers = importer_paths(nsys)
    if not importers:
        return _no_importer(nsys)
    problems = [_library_problem(imp) for imp in importers]
    return "; ".join(problems) if all(problems) else ""


def _no_importer(nsys: Nsys) -> str:
    target = Path(os.path.realpath(nsys.path)).parent
    return (
        f"no QdstrmImporter beside {target} (nsys 2022.4 looks in "
        f"{target.parent / 'host-linux-x64'}; scripts/install-nsys-cpu.sh links it)"
    )


def _library_problem(importer: Path) -> str:
    """The shared libraries ``importer`` cannot load, in words; '' when ldd finds them all."""
    try:
        ldd = subprocess.run(
            ["ldd", str(importer)], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    missing = [ln.split()[0] for ln in ldd.stdout.splitlines() if "not found" in ln]
    if not missing:
        return ""
    return f"{importer} cannot load {', '.join(missing)} (put the library on LD_LIBRARY_PATH)"


def qdstrm_message(nsys: Nsys, qdstrm: Path, log_tail: str) -> str:
    """The one-paragraph error for a profile that left only a .qdstrm file."""
    return (
        f"nsys wrote only {qdstrm.name}, not a .nsys-rep: its importer could not convert the raw "
        f"capture. Cause: {importer_problem(nsys)}. On one GPU machine the importer lacked "
        f"libdw.so.1. Timing results are kept; this variant has no evidence. nsys said: "
        f"{log_tail.strip()[-400:]}"
    )
