"""Facts about the machine, gathered without touching CUDA (the parent never initialises it)."""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path


@dataclass(frozen=True)
class GpuInfo:
    """What nvidia-smi reports; empty when there is no NVIDIA GPU."""

    names: list[str] = field(default_factory=list)
    driver: str | None = None
    memory_mib: list[int] = field(default_factory=list)
    compute_modes: list[str] = field(default_factory=list)
    """Per GPU: 'Default' (any number of processes), 'Exclusive_Process' (one at a time), ..."""

    @property
    def present(self) -> bool:
        return bool(self.names)

    @property
    def shared(self) -> bool:
        """Several processes may hold a CUDA context on each GPU at once (compute mode
        'Default'): what starting a worker beside another one's tear-down needs."""
        return all(mode.lower() == "default" for mode in self.compute_modes)

    @property
    def slug(self) -> str:
        """Short folder-friendly name: 'h100', 'h200x2', 'cpu'."""
        if not self.names:
            return "cpu"
        m = re.search(r"\b([A-Z]{1,3}\d{2,4}[A-Z]?)\b", self.names[0])
        base = (m.group(1) if m else re.sub(r"\W+", "-", self.names[0])).lower()
        return base if len(self.names) == 1 else f"{base}x{len(self.names)}"


def detect_gpus() -> GpuInfo:
    """Ask nvidia-smi (never CUDA) which GPUs this machine has."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return GpuInfo()
    try:
        proc = subprocess.run(
            [
                smi,
                "--query-gpu=name,driver_version,memory.total,compute_mode",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return GpuInfo()
    if proc.returncode != 0:
        return GpuInfo()
    return parse_gpus(proc.stdout)


def parse_gpus(text: str) -> GpuInfo:
    """GpuInfo from ``nvidia-smi --query-gpu=name,driver_version,memory.total,compute_mode
    --format=csv,noheader,nounits`` output (a missing compute mode reads as 'Default')."""
    names, mem, modes, driver = [], [], [], None
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3:
            names.append(parts[0])
            driver = parts[1]
            try:
                mem.append(int(float(parts[2])))
            except ValueError:
                mem.append(0)
            modes.append(parts[3] if len(parts) >= 4 and parts[3] else "Default")
    return GpuInfo(names=names, driver=driver, memory_mib=mem, compute_modes=modes)


#: Where a copy of the checkout without git metadata (the GPU machine's) says its commit:
#: ``scripts/device/run-reference.sh`` sets it from ``.revision``, which
#: ``git rev-parse HEAD > .revision`` writes here before the tree is sent.
REVISION_ENV = "BOTTLENECK_GIT_SHA"


def git_sha(repo: Path) -> str | None:
    """``$BOTTLENECK_GIT_SHA`` where it is set (a copy of the tree sent to a GPU machine may
    carry the git metadata of an older commit), else the checkout's commit (``-dirty`` with
    uncommitted changes to tracked files), else None."""
    return os.environ.get(REVISION_ENV) or _git_sha(repo)


def _git_sha(repo: Path) -> str | None:
    git = shutil.which("git")
    if not git:
        return None
    try:
        proc = subprocess.run(
            [git, "-C", str(repo), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    sha = proc.stdout.strip()
    if proc.returncode != 0 or not sha:
        return None
    dirty = subprocess.run(
        [git, "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    ).stdout.strip()
    return sha + ("-dirty" if dirty else "")


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def host_facts() -> dict[str, str | int | None]:
    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": package_version("torch"),
        "nvidia_dali": package_version("nvidia-dali-cuda120")
        or package_version("nvidia-dali-cuda130")
        or package_version("nvidia-dali-cuda110"),
        "hydra_core": package_version("hydra-core"),
    }
