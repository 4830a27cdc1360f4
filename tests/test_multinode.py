"""Distributed launch: the torchrun command per node, the GPU-count skip, and two harness processes
on localhost acting as node 0 and node 1 of a 2-node run (gloo), gathered into one run folder."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pandas as pd
import pytest

from harness.core import envinfo
from harness.core import nsys as nsys_mod
from harness.core.config import UsageError, compose
from harness.execution.runner import (
    Suite,
    Unit,
    distributed_skip,
    lock_name,
    multinode_run_dir,
    node_suffix,
    torchrun_program,
)
from tests.conftest import REPO

UNIT = Unit("ddp_bucketing", "baseline", "timing-1")


def _suite(*overrides: str):
    return compose(["+scenario=ddp_bucketing", *overrides])[1]


def _flag(cmd: list[str], name: str) -> str | None:
    return next((a.split("=", 1)[1] for a in cmd if a.startswith(f"--{name}=")), None)


def test_one_node_is_standalone_with_the_scenario_world_size(tmp_path):
    cmd = torchrun_program(_suite(), UNIT, 2, tmp_path / "spec.json")
    assert cmd[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--standalone" in cmd and _flag(cmd, "nproc-per-node") == "2"
    assert cmd[-4:] == ["-m", "harness.execution.worker", "--spec", str(tmp_path / "spec.json")]
    cmd = torchrun_program(_suite("dist.nproc_per_node=8"), UNIT, 2, tmp_path / "s.json")
    assert _flag(cmd, "nproc-per-node") == "8"


def test_multinode_command_uses_rendezvous_and_node_rank(tmp_path):
    base = ["dist.nnodes=2", "dist.rdzv_endpoint=node0:29400", "dist.run_name=r1"]
    cmd = torchrun_program(_suite(*base, "dist.node_rank=1"), UNIT, 2, tmp_path / "spec.json")
    assert "--standalone" not in cmd
    assert _flag(cmd, "nnodes") == "2" and _flag(cmd, "node-rank") == "1"
    assert _flag(cmd, "nproc-per-node") == "2"
    assert _flag(cmd, "rdzv-backend") == "static"
    assert _flag(cmd, "rdzv-endpoint") == "node0:29400"
    # one rendezvous per unit, so a node that is behind never joins another variant
    assert _flag(cmd, "rdzv-id") == "r1-ddp_bucketing-baseline-timing-1"
    assert _flag(cmd, "rdzv-conf") == "timeout=900"
    cmd = torchrun_program(
        _suite(*base, "dist.rdzv_backend=c10d", "dist.rdzv_id=job7"), UNIT, 2, tmp_path / "s"
    )
    assert _flag(cmd, "rdzv-backend") == "c10d" and _flag(cmd, "node-rank") is None
    assert _flag(cmd, "rdzv-conf").startswith("is_host=true,")
    assert _flag(cmd, "rdzv-id") == "job7-ddp_bucketing-baseline-timing-1"
    s1 = _suite(*base, "dist.node_rank=1")
    assert (lock_name(s1), node_suffix(s1)) == (".lock.node1", "-node1")
    assert (lock_name(_suite()), node_suffix(_suite())) == (".lock", "")


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["dist.nnodes=2", "dist.run_name=r"], "dist.rdzv_endpoint must be HOST:PORT"),
        (["dist.nnodes=2", "dist.rdzv_endpoint=h:1"], "dist.run_name is required"),
        (["dist.nnodes=2", "dist.node_rank=2"], "dist.node_rank must be in 0..1"),
        (["dist.rdzv_backend=etcd"], "dist.rdzv_backend must be one of"),
        (["dist.nproc_per_node=0"], "dist.nproc_per_node must be >= 1"),
        (["dist.run_name=../x"], "dist.run_name must be a plain name"),
    ],
)
def test_invalid_dist_settings_name_the_key(overrides, needle):
    with pytest.raises(ValueError) as err:
        _suite(*overrides)
    assert needle in str(err.value)


def test_fewer_gpus_than_processes_is_a_skip(tmp_path, monkeypatch):
    assert distributed_skip(_suite(), UNIT, 2, None) == ""  # CPU: gloo processes
    assert distributed_skip(_suite(), UNIT, 2, 2) == ""
    assert "needs 4 GPUs" in distributed_skip(_suite("dist.nproc_per_node=4"), UNIT, 2, 2)
    multi = _suite("dist.nnodes=2", "dist.rdzv_endpoint=h:1", "dist.run_name=r")
    assert "single-process scenario" in distributed_skip(multi, UNIT, 1, None)
    # Through the runner, with nvidia-smi reporting one GPU (the parent never touches CUDA).
    one = envinfo.GpuInfo(names=["NVIDIA H200"], driver="580", memory_mib=[143771])
    monkeypatch.setattr(envinfo, "detect_gpus", lambda: one)
    raw, suite = compose(["+scenario=ddp_bucketing", "nsys.enabled=false"])
    out = Suite(suite, raw).run_unit(UNIT, tmp_path)
    assert out.status == "skipped"
    assert out.error.endswith("needs 2 GPUs on this node (one per process), this machine has 1")
    assert not (UNIT.dir(tmp_path) / "spec.json").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _args(results, cache_dir, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "harness",
        "run",
        "+scenario=ddp_bucketing",
        "size=smoke",
        "harness.repeats=1",
        "harness.progress=false",
        f"harness.results_dir={results}",
        f"harness.cache_dir={cache_dir}",
        "scenario.ddp_bucketing.variants=[tuned_buckets]",
        "dist.nnodes=2",
        "dist.nproc_per_node=1",
        "dist.run_name=two-nodes",
        "dist.rdzv_timeout_s=120",
        *extra,
    ]


@pytest.mark.slow
def test_two_nodes_on_localhost_land_in_one_run_folder(tmp_path, cache_dir):
    """Node 0 and node 1 as two harness processes (1 gloo rank each, static rendezvous on a free
    port); each profiles its own rank under its own nsys when nsys is installed."""
    profiled = nsys_mod.find() is not None
    results = tmp_path / "results"
    extra = [
        f"nsys.enabled={str(profiled).lower()}",
        f"dist.rdzv_endpoint=127.0.0.1:{_free_port()}",
    ]
    procs, logs = [], []
    for k in (0, 1):
        log = open(tmp_path / f"node{k}.log", "w")
        logs.append(log)
        cmd = _args(results, cache_dir, *extra, f"dist.node_rank={k}")
        procs.append(subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT))
    try:
        codes = [p.wait(timeout=400) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for log in logs:
            log.close()
    said = [(tmp_path / f"node{k}.log").read_text()[-3000:] for k in (0, 1)]
    assert codes == [0, 0], said

    run = results / "two-nodes"
    node1 = run / "node1"
    for folder in (run, node1):
        assert json.loads((folder / "state.json").read_text())["state"] == "complete"
        assert (folder / "manifest.json").is_file()
    assert json.loads((node1 / "manifest.json").read_text())["config"]["dist"]["node_rank"] == 1
    runs = pd.read_csv(run / "runs.csv").set_index("variant")
    assert runs.loc["tuned_buckets", "status"] == "ok", runs.loc["tuned_buckets", "error"]
    assert not (node1 / "runs.csv").exists()  # tables are node 0's

    unit0 = run / "ddp_bucketing" / "tuned_buckets"
    unit1 = node1 / "ddp_bucketing" / "tuned_buckets"
    result = json.loads((unit0 / "timing-1" / "result.json").read_text())
    assert result["world_size"] == 2 and result["rank"] == 0  # one rank per node
    assert result["metrics"]["buckets"] >= 1
    assert json.loads((unit1 / "timing-1" / "status.json").read_text())["status"] == "ok"
    assert not (unit1 / "timing-1" / "result.json").exists()  # written by global rank 0 only
    assert not list(results.glob(".lock*"))

    if profiled:
        from analysis.trace import open_trace, step_ranges

        reports = {
            0: unit0 / "profile" / "ddp_bucketing__tuned_buckets",
            1: unit1 / "profile" / "ddp_bucketing__tuned_buckets-node1",
        }
        pids = []
        for base in reports.values():
            assert base.with_suffix(".nsys-rep").is_file()
            with open_trace(base.with_suffix(".sqlite")) as trace:
                steps = step_ranges(trace)
            assert steps["pid"].nunique() == 1  # each node's nsys sees its own rank only
            pids.append(int(steps["pid"].iloc[0]))
        assert pids[0] != pids[1]
        assert runs.loc["tuned_buckets", "profiled"]


def test_run_folders_per_node_and_reusing_a_run_name_is_refused(tmp_path):
    common = ["dist.nnodes=2", "dist.rdzv_endpoint=h:1", "dist.run_name=two-nodes"]
    common.append(f"harness.results_dir={tmp_path}")
    assert multinode_run_dir(_suite()) is None
    node1 = multinode_run_dir(_suite(*common, "dist.node_rank=1"))
    node0 = multinode_run_dir(_suite(*common))  # the folder node 1 created first is fine
    assert (node0, node1) == (tmp_path / "two-nodes", tmp_path / "two-nodes" / "node1")
    (node0 / "manifest.json").write_text("{}")
    with pytest.raises(UsageError, match=r"already holds a run.*dist\.run_name"):
        multinode_run_dir(_suite(*common))
    assert multinode_run_dir(_suite(*common, "dist.node_rank=1")) == node1  # no manifest yet
