"""The kernels row's analyzers: the planner on real H200 exports (cut from a run of main@1ee4050,
tests/data/ncu/README.md), the raw-CSV parser and the classifier on the pages ncu 2025.3.1
wrote on an H200 (the first GPU run of the row), the step's roofline limit, the choice of
kernels with reuse across variants, and the time model against that run's wall."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import trace as T
from analysis.gpu_work import gpu_work
from harness.core.kernels_config import KernelsConfig, kernels_config
from harness.kernels import classify as K
from harness.kernels import select
from harness.kernels.choose import Chooser, choose, config_key
from harness.kernels.command import name_regex, ncu_argv
from harness.kernels.parse import NcuCsvError, kernel_metrics, read_raw, unit_factor
from harness.kernels.plan import plan_export
from harness.kernels.tables import Bound, Family, Pipe
from tests import _ncu_dev1
from tests._fixtures import DATA, sqlite_fixture

NCU = DATA / "ncu"


def export(name: str):
    return sqlite_fixture(name, NCU)


@pytest.fixture(scope="module")
def dev1(tmp_path_factory) -> Path:
    return _ncu_dev1.extract(tmp_path_factory.mktemp("ncu"))


@pytest.fixture(scope="module")
def recollected(dev1: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    return _ncu_dev1.recollect(dev1)


def _page(dev1: Path, label: str) -> Path:
    return dev1 / "ncu" / label / "ncu.csv"


# -- the plan --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["h200_forced_sync__baseline", "h200_kernel_flood__baseline"])
def test_plan_ranks_launch_configs_by_time_in_the_window(name: str) -> None:
    path = export(name)
    plan = plan_export(path, top=10, min_share=0.0)
    with T.open_trace(path) as trace:
        work = gpu_work(trace).iloc[0]
        lo, hi = T.window(trace)
    # the window's kernel time per step: the same number analysis.gpu_work computes its own way
    assert plan.steps == work["steps"]
    assert plan.window_kernel_ms_per_step == pytest.approx(work["kernel_ms_per_step"], rel=1e-9)
    # each planned row against SQL over the raw table: launches and time of its configuration
    db = sqlite3.connect(path)
    for r in plan.kernels.itertuples():
        gx, gy, gz = (int(x) for x in re.findall(r"\d+", r.grid))
        bx, by, bz = (int(x) for x in re.findall(r"\d+", r.block))
        n, ns = db.execute(
            "SELECT COUNT(*), SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.mangledName WHERE s.value = ? AND k.start >= ? "
            "AND k.start < ? AND gridX = ? AND gridY = ? AND gridZ = ? AND blockX = ? "
            "AND blockY = ? AND blockZ = ?",
            (r.mangled, lo, hi, gx, gy, gz, bx, by, bz),
        ).fetchone()
        assert n == r.launches
        assert ns / 1e6 / plan.steps == pytest.approx(r.kernel_ms_per_step)
    ms = plan.kernels["kernel_ms_per_step"].to_numpy()
    assert (np.diff(ms) <= 0).all() and len(ms) == 10
    assert plan.coverage == pytest.approx(ms.sum() / plan.window_kernel_ms_per_step)
    assert plan.name_base == "mangled" and not plan.graph_level


def test_plan_min_share_and_top_cut_the_list() -> None:
    path = export("h200_kernel_flood__baseline")
    full = plan_export(path, top=50, min_share=0.0)
    cut = plan_export(path, top=50, min_share=0.05)
    assert len(cut.kernels) < len(full.kernels)
    assert (cut.kernels["share"] >= 0.05).all()
    assert len(plan_export(path, top=3).kernels) == 3


def test_a_graph_level_trace_plans_nothing_and_says_why() -> None:
    plan = plan_export(export("h200_kernel_flood__cuda_graphs"))
    assert plan.kernels.empty and plan.names == [] and plan.graph_level
    assert "graph" in plan.note and plan.graph_ms_per_step > 0


# -- the command line ------------------------------------------------------------------------


def test_name_regex_matches_exactly_the_planned_mangled_names() -> None:
    plan = plan_export(export("h200_forced_sync__baseline"))
    pattern = re.compile(name_regex(plan.names).removeprefix("regex:"))
    assert all(pattern.fullmatch(n) for n in plan.names)
    assert not pattern.search(plan.names[0] + "x")
    assert not pattern.search("_ZN2at6native13reduce_kernelILi512ELi1E")


def test_ncu_argv_keeps_the_clocks_and_takes_the_process_wide_window(tmp_path) -> None:
    argv = ncu_argv("ncu", KernelsConfig(), log=tmp_path / "a.csv", program=["python", "w.py"],
                    names=["k1", "k2"], report=tmp_path / "r")  # fmt: skip
    joined = " ".join(argv)
    assert argv[argv.index("--clock-control") + 1] == "none"
    assert "--profile-from-start off" in joined and "--nvtx" not in argv
    assert "--apply-rules no" in joined
    assert "--filter-mode per-launch-config --launch-skip 0 --launch-count 1" in joined
    assert argv[argv.index("--kernel-name") + 1] == "regex:^(k1|k2)$"
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--section"] == ["SpeedOfLight"]
    assert argv[-2:] == ["python", "w.py"] and "--log-file" in argv


def test_the_nvtx_filter_of_the_first_run_lost_every_backward_kernel(dev1: Path) -> None:
    """Why the row no longer filters on the NVTX ``measure`` range: it belongs to the thread
    that pushed it, and autograd's backward thread launched half the step's kernels. On the
    first H200 run no backward kernel was profiled although the filter named them."""
    backward = re.compile(r"backward|Backward|_NNT$|_NTN$|simt_sgemm|dgrad|wgrad")
    asked, got = set(), set()
    for outcome in sorted((dev1 / "ncu").glob("*/*/outcome.json")):
        argv = json.loads(outcome.read_text())["argv"]
        assert "--nvtx-include" in argv
        names = argv[argv.index("--kernel-name") + 1].removeprefix("regex:^(").removesuffix(")$")
        asked |= {n for n in re.split(r"(?<!\\)\|", names) if backward.search(n)}
        page = kernel_metrics(read_raw(outcome.parent / "ncu.csv"))
        got |= {n for n in page["ncu_kernel"] if backward.search(n)}
    assert len(asked) >= 8 and got == set()


# -- parsing the real pages ------------------------------------------------------------------


def test_a_real_page_parses_to_base_units(dev1: Path) -> None:
    page = read_raw(_page(dev1, "fp32_matmul/baseline"))
    assert len(page.frame) == 2 and len(page.frame.columns) > 500
    first = kernel_metrics(page).iloc[0]
    assert first["ncu_kernel"].startswith("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n")
    assert (first["grid"], first["block"]) == ("(128, 32, 1)", "(128, 1, 1)")
    assert first["duration_us"] == pytest.approx(2773.952)  # "2,773,952" nanoseconds
    assert (first["sm_throughput_pct"], first["memory_throughput_pct"]) == (85.43, 66.97)
    assert first["dram_throughput_pct"] == 10.20
    assert first["fma_pipe_pct"] == 77.16  # the busier of cycles active (77.16) and issued (77.15)
    assert first["tensor_pipe_pct"] == 0.0
    assert first["alu_pipe_pct"] == 8.43  # on the elapsed basis: the run asked for no active one
    assert first["sm_frequency_ghz"] == pytest.approx(1.974, abs=1e-3)  # clocks left alone
    assert first["passes"] == 12 and first["backed_up_bytes"] == 3_433_747_738
    assert first["dram_bytes"] == 1_361_954_816


def test_every_page_of_the_run_parses(dev1: Path) -> None:
    pages = sorted((dev1 / "ncu").glob("*/*/ncu.csv"))
    assert len(pages) == 16
    rows = pd.concat([kernel_metrics(read_raw(p)) for p in pages])
    assert len(rows) == 84
    assert (rows["duration_us"] > 0).all() and (rows["passes"] == 12).all()
    for col in ("sm_throughput_pct", "memory_throughput_pct", "tensor_pipe_pct", "fma_pipe_pct"):
        assert rows[col].between(0, 100).all(), col


def test_unit_factors() -> None:
    assert unit_factor("nsecond") == 1e-9 and unit_factor("usecond") == 1e-6
    assert unit_factor("Kbyte") == 1e3 and unit_factor("byte/second") == 1.0
    assert unit_factor("Gbyte/second") == 1e9 and unit_factor("cycle/nsecond") == pytest.approx(1e9)
    assert unit_factor("%") == 1.0


def test_a_run_that_profiled_nothing_is_an_empty_page_and_garbage_raises(tmp_path) -> None:
    none = tmp_path / "none.csv"
    none.write_text("==PROF== Disconnected\n==WARNING== No kernels were profiled.\n")
    assert read_raw(none).frame.empty
    bad = tmp_path / "bad.csv"
    bad.write_text('"a","b"\n"1","2"\n')
    with pytest.raises(NcuCsvError):
        read_raw(bad)


# -- classification --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sm", "mem", "expected"),
    [(88.0, 60.0, Bound.COMPUTE), (30.0, 91.0, Bound.MEMORY), (20.0, 12.0, Bound.LATENCY),
     (59.9, 59.0, Bound.LATENCY), (np.nan, np.nan, Bound.UNKNOWN)],
)  # fmt: skip
def test_bound_by_the_speed_of_light_shares(sm: float, mem: float, expected: Bound) -> None:
    assert K.bound(sm, mem, 60.0) is expected


def test_the_thresholds_are_knobs() -> None:
    assert K.bound(50.0, 10.0, 40.0) is Bound.COMPUTE
    with pytest.raises(ValueError):
        KernelsConfig(bound_min_pct=120)
    with pytest.raises(ValueError):
        KernelsConfig(pipe_min_pct=-1)


def test_the_pipe_is_the_busiest_above_the_floor_and_a_gemm_is_tensor_or_fma() -> None:
    nan = float("nan")
    reading = {Pipe.TENSOR: 5.13, Pipe.FMA: 16.7, Pipe.ALU: 48.4, Pipe.FP64: 0.0, Pipe.XU: 0.0}
    assert K.pipe(reading, False, 20.0) == (Pipe.ALU, 48.4)
    assert K.pipe(reading, True, 20.0) == (Pipe.FMA, 16.7)  # a GEMM: the tensor-or-FMA question
    quiet = {Pipe.TENSOR: 0.0, Pipe.FMA: 9.5, Pipe.ALU: 10.3}
    assert K.pipe(quiet, False, 20.0)[0] is Pipe.NONE  # a memory-bound kernel names no pipe
    assert K.pipe({Pipe.TENSOR: 15.0, Pipe.FMA: 2.0}, True, 20.0)[0] is Pipe.TENSOR
    assert K.pipe({Pipe.TENSOR: nan, Pipe.FMA: nan}, True, 20.0)[0] is Pipe.UNKNOWN


def test_the_real_kernels_classify_as_what_they_are(recollected) -> None:
    k, _ = recollected
    fam = dict(zip(k["kernel"], k["family"], strict=False))
    assert fam["nchwToNhwcKernel"] == fam["nhwcToNchwKernel"] == Family.LAYOUT
    assert fam["triton_poi_fused_add_mul_pow_tanh_0"] == Family.ELEMENTWISE
    assert fam["multi_tensor_apply_kernel"] == Family.OTHER
    gemm, rest = k[k["family"] == Family.MATMUL], k[k["family"] != Family.MATMUL]
    # a GEMM is on tensor cores or the FMA pipe, whichever reads higher; nothing else is on
    # the tensor pipe (the old 5% rule put bf16 elementwise kernels there)
    assert set(gemm["pipe"]) == {Pipe.TENSOR, Pipe.FMA}
    on_tensor = gemm["tensor_pipe_pct"] > gemm["fma_pipe_pct"]
    assert ((gemm["pipe"] == Pipe.TENSOR) == on_tensor).all()
    assert not (rest["pipe"] == Pipe.TENSOR).any()
    # those with 5% on it are on the pipe that was busy: ALU (index math, conversions) or FMA
    assert set(rest.loc[rest["tensor_pipe_pct"] >= 5, "pipe"]) == {Pipe.ALU, Pipe.FMA}
    # fp32 without TF32: cuBLAS's SIMT GEMMs, compute-bound on the FMA pipe, tensor pipe idle
    fp32 = gemm[gemm["variant"].eq("baseline") & gemm["scenario"].eq("fp32_matmul")]
    assert len(fp32) == 2 and (fp32["pipe"] == Pipe.FMA).all()
    assert (fp32["bound"] == Bound.COMPUTE).all() and (fp32["tensor_pipe_pct"] == 0).all()
    tf32 = gemm[gemm["dtype"] == "tf32"]
    assert len(tf32) == 2 and (tf32["pipe"] == Pipe.TENSOR).all()
    # a named pipe is busy at least the floor; below it, none
    named = rest[rest["pipe"] != Pipe.NONE]
    assert (named["pipe_pct"] >= 20).all()
    assert (rest.loc[rest["pipe"] == Pipe.NONE, "pipe_pct"] < 20).all()
    # the chain's kernels: memory-bound at a high DRAM share, no pipe busy
    chain = rest[rest["scenario"].eq("unfused_chain") & rest["variant"].eq("baseline")
                 & rest["bound"].eq(Bound.MEMORY)]  # fmt: skip
    assert len(chain) == 4 and (chain["dram_throughput_pct"] >= 60).all()
    assert (chain["pipe"] == Pipe.NONE).all()


def test_the_counts_before_and_after(dev1: Path, recollected) -> None:
    """The first run's table said 27 kernels ran on the tensor pipe (every bf16 elementwise
    kernel at 5% among them); read again, 20 do, all of them GEMMs or attention."""
    then = pd.read_csv(dev1 / "kernels.csv")
    k, _ = recollected
    assert then["pipe"].value_counts().to_dict() == {"fma": 43, "tensor": 27, "other": 14}
    assert k["pipe"].value_counts().to_dict() == {"none": 31, "alu": 21, "tensor": 20, "xu": 8,
                                                  "fma": 4}  # fmt: skip
    assert (k[k["pipe"] == Pipe.TENSOR]["family"] == Family.MATMUL).all()
    assert then["bound"].value_counts().to_dict() == k["bound"].value_counts().to_dict()


def test_dtype_and_family_from_real_kernel_names() -> None:
    names = pd.concat(
        [plan_export(export(n), top=30, min_share=0.0).kernels
         for n in ("h200_kernel_flood__baseline", "h200_forced_sync__baseline")]
    )  # fmt: skip
    demangled = names["demangled"].tolist()
    xmma = next(d for d in demangled if d.startswith("sm80_xmma_gemm_f32f32"))
    sgemm = next(d for d in demangled if "simt_sgemm" in d)
    assert K.dtype(xmma) == "fp32" and K.family(xmma) is Family.MATMUL
    assert K.dtype(sgemm) == "fp32" and K.is_matmul(sgemm)
    bf16 = next(d for d in demangled if "bfloat16_copy" in d)
    assert K.dtype(bf16) == "bf16" and K.family(bf16) is Family.ELEMENTWISE
    adam = next(d for d in demangled if "FusedAdamMathFunctor<float" in d)
    assert K.dtype(adam) == "fp32"  # its double scalars (the learning rate) are not its type
    assert K.dtype("cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64") == "bf16"
    assert K.dtype("sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16") == "tf32"
    assert K.dtype("void at::native::foo<c10::Half>") == "fp16"
    assert K.dtype("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT") == ""
    assert K.is_matmul("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT")
    assert not K.is_matmul("convert_to_fp16_kernel")  # conv(ert) is no convolution


# -- the step's limit, against what the first run wrote ----------------------------------------


def test_the_limit_is_the_first_runs_from_the_same_pages(dev1: Path, recollected) -> None:
    _, limits = recollected
    then = pd.read_csv(dev1 / "kernel_limits.csv").set_index(["scenario", "variant"])
    now = limits[limits["state"] == "ok"].set_index(["scenario", "variant"])
    assert len(now) == 16
    for col in ("roofline_ms_per_step", "at_bound_ms_per_step", "coverage_share",
                "compute_bound_share", "memory_bound_share", "latency_bound_share",
                "kernels_matched"):  # fmt: skip
        assert np.allclose(now[col], then.loc[now.index, col], rtol=1e-9, equal_nan=True), col


def test_step_limit_adds_profiled_at_bound_and_the_rest_as_measured(dev1, recollected) -> None:
    kernels, limits = recollected
    plan = _ncu_dev1.plans(dev1)[("unfused_chain", "baseline")]
    limit = limits.set_index(["scenario", "variant"]).loc[("unfused_chain", "baseline")]
    rows = kernels[(kernels["variant"] == "baseline") & (kernels["scenario"] == "unfused_chain")]
    planned = rows[rows["planned"].astype(bool)]
    assert len(rows) == 7 and len(planned) == 6  # one more configuration of a planned name
    expected = planned["kernel_ms_per_step"] * planned["sol_pct"] / 100
    assert np.allclose(planned["at_bound_ms_per_step"], expected)
    rest = plan.window_kernel_ms_per_step - planned["kernel_ms_per_step"].sum()
    assert limit["roofline_ms_per_step"] == pytest.approx(expected.sum() + rest)
    shares = [limit[f"{b}_bound_share"] for b in ("compute", "memory", "latency")]
    assert sum(shares) == pytest.approx(1.0)
    assert limit["roofline_share_of_busy"] == pytest.approx(
        limit["roofline_ms_per_step"] / limit["gpu_busy_ms_per_step"]
    )


# -- the choice ------------------------------------------------------------------------------


def test_a_choice_takes_whole_names_within_top_until_the_coverage() -> None:
    plan = plan_export(export("h200_kernel_flood__baseline"), top=64, min_share=0.01)
    wide = Chooser(KernelsConfig(top=64, coverage=1.0)).choice("s", "s/a", plan)
    tight = Chooser(KernelsConfig(top=3, coverage=1.0)).choice("s", "s/a", plan)
    assert tight.launches <= 3 < wide.launches
    # every steady configuration of a chosen name is taken (ncu profiles them all)
    steady = plan.kernels[plan.kernels["launches_per_step"] >= 1]
    for choice in (wide, tight):
        mine = steady[steady["mangled"].isin(choice.names)]
        assert len(choice.rows) == len(mine) == choice.launches
    early = Chooser(KernelsConfig(top=64, coverage=0.3)).choice("s", "s/a", plan)
    rows = early.rows
    before_last = rows[rows["mangled"] != early.names[-1]]["share"].sum()
    assert rows["share"].sum() >= 0.3 > before_last  # stops once the target is passed


def test_a_variant_reads_what_its_scenario_already_measures() -> None:
    plan = plan_export(export("h200_forced_sync__baseline"), top=64, min_share=0.01)
    cfg = KernelsConfig(top=4)
    made = choose([("s", "s/baseline", plan), ("s", "s/fix", plan), ("t", "t/other", plan)], cfg)
    base, fix, other = made["s/baseline"], made["s/fix"], made["t/other"]
    assert base.names and base.reused == 0
    assert fix.names == [] and fix.launches == 0  # the same kernels: no ncu run of its own
    assert set(fix.rows["measured_in"]) == {"s/baseline"} and fix.reused == len(base.rows)
    assert other.names == base.names  # another scenario measures its own
    no_reuse = choose([("s", "s/baseline", plan), ("s", "s/fix", plan)],
                      KernelsConfig(top=4, reuse=False))  # fmt: skip
    assert no_reuse["s/fix"].names == base.names
    chooser = Chooser(cfg)
    only = chooser.choice("s", "s/fix", plan, new=False)
    assert only.names == [] and only.rows.empty  # nothing measured yet, nothing of its own
    keys = {config_key(r.mangled, r.grid, r.block) for r in base.rows.itertuples()}
    assert {config_key(r.mangled, r.grid, r.block) for r in fix.rows.itertuples()} == keys


# -- time --------------------------------------------------------------------------------------


def test_the_time_model_reproduces_the_first_runs_wall(dev1: Path) -> None:
    """The first run: 16 ncu processes, 6 at once, 2 to 10 profiled launches each, 83 s. The
    model (a process's start, its launches taken in turn with the others', its tail) gives
    its wall within 10%, where the host-side one it replaces (launches side by side) gave 72 s."""
    outcomes = [json.loads(p.read_text()) for p in sorted((dev1 / "ncu").glob("*/*/outcome.json"))]
    record = json.loads((dev1 / "kernels_run.json").read_text())
    labels = [(o["argv"][o["argv"].index("--spec") + 1].split("/")[-4:-2]) for o in outcomes]
    start = pd.read_csv(dev1 / "kernel_limits.csv").query("state == 'ok'")
    pairs = zip(start["scenario"], start["variant"], strict=True)
    order = {(s, v): i for i, (s, v) in enumerate(pairs)}
    jobs = sorted(zip(labels, (o["kernels"] for o in outcomes), strict=True),
                  key=lambda lv: order[tuple(lv[0])])  # fmt: skip
    est = select.makespan([(select.PROCESS_S, n) for _, n in jobs], 6)
    assert est == pytest.approx(record["wall_s"], rel=0.10)
    assert select.makespan([(select.PROCESS_S, 0)] * 3, 2) == pytest.approx(
        2 * (select.PROCESS_S + select.TAIL_S)
    )


def test_makespan_takes_the_launches_in_turn() -> None:
    one = select.LAUNCH_S
    assert select.makespan([(10, 2)] * 4, 4) == pytest.approx(10 + 8 * one + select.TAIL_S)
    assert select.makespan([(10, 0)] * 4, 2) == pytest.approx(2 * (10 + select.TAIL_S))
    assert select.makespan([], 4) == 0.0


def test_budget_leaves_out_what_does_not_fit() -> None:
    cfg = kernels_config(None, budget_s=20.0, parallel=2)
    assert select.within_budget([(10, 5), (10, 5), (10, 5)], cfg) == [True, True, False]
    assert select.fits([(10, 5)], (10, 5), cfg) and not select.fits([(10, 5)] * 2, (10, 5), cfg)
    assert all(select.within_budget([(100, 100)] * 3, kernels_config(None, budget_s=0)))


def test_config_reads_a_mapping_and_rejects_unknown_keys() -> None:
    cfg = kernels_config({"top": 5, "sections": ["SpeedOfLight"]})
    assert cfg.top == 5 and cfg.sections == ["SpeedOfLight"] and cfg.variants == "witness"
    with pytest.raises(ValueError, match="unknown"):
        kernels_config({"tops": 5})
    for bad in ({"variants": "some"}, {"coverage": 0.0}, {"top": 0}):
        with pytest.raises(ValueError):
            kernels_config(bad)


def test_the_details_page_reads_as_the_raw_one() -> None:
    """The details page (hand-written here in ncu's long format) pivots to the same columns."""
    head = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
            '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
            '"Metric Value"')  # fmt: skip
    ident = '"0","1","python3","h","k","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0"'
    sol, mwa = "GPU Speed Of Light Throughput", "Memory Workload Analysis"
    lines = ["==PROF== Connected", head] + [
        f'{ident},"{sec}","{label}","{unit}","{value}"'
        for sec, label, unit, value in (
            (sol, "Duration", "usecond", "1,024.50"),
            (sol, "Compute (SM) Throughput", "%", "88.1"),
            (sol, "Memory Throughput", "%", "60.2"),
            (mwa, "Memory Throughput", "Gbyte/second", "96.5"),
            ("Command line profiler metrics",
             "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active", "%", "71.0"),
        )
    ]  # fmt: skip
    rows = kernel_metrics(read_raw("\n".join(lines)))
    r = rows.iloc[0]
    assert len(rows) == 1 and r["grid"] == "(64, 1, 1)"
    assert r["duration_us"] == pytest.approx(1024.5)
    assert (r["sm_throughput_pct"], r["memory_throughput_pct"]) == (88.1, 60.2)
    assert r["dram_gbps"] == pytest.approx(96.5) and r["fma_pipe_pct"] == 71.0
