"""The tools on the GPU-side classes (issue 49: fp32_math, unfused_elementwise, layout_transpose)
and the host-side ones (allocator_churn, blocking_io): the kernel-name reading they share
(analysis/kernel_names.py, on names as cuBLAS, cuDNN, CUTLASS, nvjet, Triton and PyTorch emit
them), the ``tb-plugin`` adapter, nsys-ai's ``tensor_core_usage`` and HTA's kernel breakdown on
real exports and traces, the keyword adapter's words, and each rule's thresholds as config."""

from __future__ import annotations

import json
import lzma
import re
import sqlite3
from pathlib import Path

import pytest

from analysis import kernel_names as KN
from bottlenecks import CLASSES
from harness.core.tools_config import (
    HtaRules,
    NsysAiRules,
    TbPluginRules,
    parse_tool_overrides,
    tools_config,
)
from harness.tools.base import Context, Flag, Traces, adapters
from tests._fixtures import DATA, sqlite_fixture
from tests.conftest import REPO

CORPUS = REPO / "corpus" / "wild" / "exports"
GPU_SIDE = ("fp32_math", "unfused_elementwise", "layout_transpose")
CTX = Context()

#: Kernel names as the libraries emit them (from real exports of the suite and its corpus, and
#: the libraries' naming): family, and for a GEMM the pipe its name says.
NAMES = [
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_"
     "alignc4_execute_kernel__5x_cublas", "matmul", "fma"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nt_align1>(T1::Params)", "matmul",
     "fma"),
    ("void sgemm_largek_lds64<(bool)1, (bool)0, (int)5, (int)5, (int)4, (int)4, (int)4, (int)34>"
     "(float *, const float *, const float *, int, int, int)", "matmul", "fma"),
    ("void precomputed_convolve_sgemm<__nv_bfloat16, (int)128, (int)6, (int)7, (int)3, (int)3, "
     "(int)5, (int)1, (bool)0>(int, int, int, const T1 *, int, T1 *)", "matmul", "fma"),
    ("void wgrad_alg0_engine<float, (int)128, (int)5, (int)5, (int)3, (int)3, (int)3, (bool)0, "
     "(int)512>(int, int, int, const T1 *, int, T1 *)", "matmul", "fma"),
    ("void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, (int)128>", "matmul",
     "fma"),
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_nt_n_tilesize128x256x32_warpgroupsize2x1x1_execute_"
     "segment_k_off_kernel__5x_cublas", "matmul", "tensor"),
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_"
     "stage4_warpsize2x2x1_g1_tensor16x8x8_execute_kernel__5x_cudnn", "matmul", "tensor"),
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_"
     "warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn", "matmul", "tensor"),
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "matmul", "tensor"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_nn_align2>"
     "(T1::Params)", "matmul", "tensor"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1"
     "_kernel0_0", "matmul", "tensor"),
    ("ampere_h16816gemm_256x128_ldg8_stages_32x3_nn", "matmul", "tensor"),
    ("volta_h884gemm_128x128_ldg8_nn", "matmul", "tensor"),
    ("ampere_sgemm_128x64_nn", "matmul", "fma"),
    ("triton_tem_fused_addmm_relu_0", "matmul", "unknown"),
    ("triton_poi_fused_add_mul_tanh_3", "elementwise", ""),
    ("triton_per_fused_mean_pow_rsqrt_1", "elementwise", ""),
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>>",
     "elementwise", ""),
    ("void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float>>",
     "elementwise", ""),
    ("void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, "
     "(bool)0, (bool)1, (cudnnKernelDataType_t)0>", "layout", ""),
    ("void cudnn::engines_precompiled::nhwcToNchwKernel<float, float, float, (bool)1, (bool)0>",
     "layout", ""),
    ("void at::native::conv_depthwise2d_forward_kernel<(int)3, c10::BFloat16, int>", "matmul",
     "fma"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096UL>)", "other", ""),
]  # fmt: skip


@pytest.mark.parametrize(("name", "family", "pipe"), NAMES, ids=lambda x: str(x)[:40])
def test_kernel_names_say_family_and_a_gemms_pipe(name, family, pipe):
    assert KN.family_of(name) == family
    if family == "matmul":
        assert KN.gemm_pipe(name) == pipe


def test_the_ncu_rows_family_is_the_shared_reading():
    from harness.kernels.classify import family

    for name, fam, _ in NAMES:
        assert family(name).value == fam == KN.family_of(name)


def _corpus(name: str) -> Path:
    return sqlite_fixture(name, data_dir=CORPUS)


def _calls(tool: str, ctx: Context = CTX, **traces: object) -> dict:
    calls = adapters()[tool].judge(Traces("t", **traces), ctx)  # type: ignore[arg-type]
    assert sorted(calls) == sorted(CLASSES)
    return calls


def _share(db: Path, where: str) -> float:
    """Kernel time matching ``where`` (SQL on the demangled name ``n``) over all kernel time,
    counted here in SQL, apart from the adapters' code."""
    q = f"""SELECT SUM(CASE WHEN {where} THEN k."end" - k.start ELSE 0 END) * 1.0
                   / SUM(k."end" - k.start)
            FROM CUPTI_ACTIVITY_KIND_KERNEL k
            JOIN (SELECT id, lower(value) AS n FROM StringIds) s ON s.id = k.demangledName"""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return float(conn.execute(q).fetchone()[0])


FMA_SQL = "(n LIKE '%ffma%' OR n LIKE '%simt_sgemm%' OR n LIKE '%convolve_sgemm%')"


def _pcts(text: str) -> list[int]:
    return [int(p) for p in re.findall(r"(\d+)%", text)]


def test_tb_plugin_flags_an_fp32_mlp_and_not_tensor_core_gemms():
    """A real H200 export whose GEMMs are cuBLAS's fp32 ``*_ffma_*`` kernels (a corpus MLP in
    fp32) is flagged, with the share counted here in SQL; a bf16 program (its GEMMs nvjet and
    xmma bf16) is clear. Only fp32_math is judged."""
    fp32 = _corpus("hs_nonzero_mask")
    calls = _calls("tb-plugin", sqlite=fp32)
    assert calls["fp32_math"].flag is Flag.FLAGGED
    off = _pcts(calls["fp32_math"].evidence)[-1]
    assert off == round(100 * _share(fp32, FMA_SQL)) and off >= 50
    assert {calls[k].flag for k in CLASSES if k != "fp32_math"} == {Flag.NA}
    bf16 = sqlite_fixture("gpu_nsys2025_sync_loading")
    assert _share(bf16, FMA_SQL) < 0.01
    assert _calls("tb-plugin", sqlite=bf16)["fp32_math"].flag is Flag.CLEAR


def test_tb_plugin_bar_is_config():
    fp32 = _corpus("hs_nonzero_mask")
    high = Context(tools=tools_config({"tb_plugin": {"fp32_min_gemm_share": 0.99}}))
    assert _calls("tb-plugin", high, sqlite=fp32)["fp32_math"].flag is Flag.CLEAR
    cpu = _calls("tb-plugin", sqlite=sqlite_fixture("cpu_nsys2022_gil_contention_baseline"))
    assert {c.flag for c in cpu.values()} == {Flag.NA}  # no kernels: nothing to judge


def _nsys_ai_patterns() -> list[re.Pattern]:
    from nsys_ai import parquet_cache as pc

    return [re.compile(p.strip("'")) for p in (pc._TC_ELIGIBLE_PATTERN, pc._TC_ACTIVE_PATTERN)]


needs_nsys_ai = pytest.mark.skipif(
    adapters()["nsys-ai"].missing() is not None, reason="nsys-ai not installed"
)


@needs_nsys_ai
def test_nsys_ai_tensor_core_usage_runs_on_its_own_patterns():
    """tensor_core_usage through the adapter's view gives, per kernel, the time nsys-ai's own
    patterns call eligible and active, recounted here from the export; on a bf16 NCHW conv
    net it flags fp32_math (cuDNN's SIMT ``precomputed_convolve_sgemm`` fallback)."""
    from harness.tools.nsys_ai import tensor_core_rows

    db = sqlite_fixture("h100/h100_pageable_copies__baseline")
    eligible, active = _nsys_ai_patterns()
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        q = """SELECT COALESCE(d.value, s.value), SUM(k."end" - k.start)
               FROM CUPTI_ACTIVITY_KIND_KERNEL k LEFT JOIN StringIds s ON k.shortName = s.id
               LEFT JOIN StringIds d ON k.demangledName = d.id GROUP BY 1"""
        mine = {n: ns for n, ns in conn.execute(q)
                if eligible.search(n.lower()) or active.search(n.lower())}  # fmt: skip
    rows = tensor_core_rows(db)
    assert {r["kernel_name"] for r in rows} == set(mine)
    for r in rows:
        assert r["total_gpu_ms"] == pytest.approx(mine[r["kernel_name"]] / 1e6)
        on = bool(active.search(r["kernel_name"].lower()))
        assert r["tc_active_ms"] == pytest.approx(r["total_gpu_ms"] if on else 0.0)
    call = _calls("nsys-ai", sqlite=db)["fp32_math"]
    assert call.flag is Flag.FLAGGED and "TC achieved 18.0%" in call.evidence


@needs_nsys_ai
def test_nsys_ai_counts_cublas_fp32_xmma_gemms_as_tensor_core_work():
    """nsys-ai 0.3.0's active pattern matches ``xmma``, so cuBLAS's fp32 ``*_ffma_*`` xmma GEMMs
    count as tensor-core work: on the fp32 corpus MLP it reports ~100% achieved and stays
    clear where the plugin-style rule (the suite's name reading) flags the same export."""
    db = _corpus("hs_nonzero_mask")
    call = _calls("nsys-ai", sqlite=db)["fp32_math"]
    assert call.flag is Flag.CLEAR
    assert float(re.search(r"TC achieved ([\d.]+)%", call.evidence)[1]) > 99  # type: ignore[index]
    assert _calls("tb-plugin", sqlite=db)["fp32_math"].flag is Flag.FLAGGED
    low = Context(tools=tools_config({"nsys_ai": {"tc_max_achieved_pct": 100.0,
                                                  "tc_min_inactive_ms": 0.0}}))  # fmt: skip
    strict = _calls("nsys-ai", low, sqlite=sqlite_fixture("gpu_nsys2025_sync_loading"))
    assert strict["fp32_math"].flag is Flag.CLEAR  # 100% achieved is not below 100


needs_hta = pytest.mark.skipif(adapters()["hta"].missing() is not None, reason="HTA missing")


def _kineto(name: str, tmp: Path) -> tuple[Path, dict]:
    data = lzma.decompress((DATA / "kineto_gpu" / f"h200_{name}.pt.trace.json.xz").read_bytes())
    path = tmp / f"h200_{name}.pt.trace.json"
    path.write_bytes(data)
    return path, json.loads(data)


@needs_hta
def test_hta_kernel_breakdown_is_the_traces_own(tmp_path):
    """On real H200 traces HTA's kernel breakdown gives the kernel time by kind as the trace
    holds it: the shares of GEMM-on-tensor-core, elementwise and layout time recounted here
    from the trace's kernel events (HTA keeps the steps before the last: within 3 points)."""
    from harness.tools.hta import ALL, ELEMENTWISE, GEMM_PIPES, LAYOUT, hta_numbers

    for name in ("pageable_copies__baseline", "forced_sync__baseline"):
        path, trace = _kineto(name, tmp_path)
        n = hta_numbers((path,))
        kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"
                   and not e["name"].startswith("nccl")]  # fmt: skip
        total = sum(e["dur"] for e in kernels)

        def share(pick, kernels=kernels, total=total) -> float:
            return sum(e["dur"] for e in kernels if pick(e["name"])) / total

        mine = {
            GEMM_PIPES[KN.TENSOR]: share(lambda s: KN.is_matmul(s) and KN.gemm_pipe(s) == "tensor"),
            ELEMENTWISE: share(lambda s: KN.family_of(s) == "elementwise"),
            LAYOUT: share(lambda s: KN.family_of(s) == "layout"),
        }
        for kind, want in mine.items():
            assert abs(n.kernel_us[kind] / n.kernel_us[ALL] - want) < 0.03, (name, kind)
        assert n.compute_pct[0] > 0 and n.kernel_launches["gemm"] > 0


@needs_hta
def test_hta_judges_the_gpu_side_classes_only_on_a_gpu_busy_computing(tmp_path):
    """The pageable-copy baseline's GPU is busy (idle ~3%) but mostly copying: computing ~36%
    of the trace, so the GPU-side classes are clear whatever its kernels' mix."""
    path, _ = _kineto("pageable_copies__baseline", tmp_path)
    calls = _calls("hta", kineto=(path,))
    for k in GPU_SIDE:
        assert calls[k].flag is Flag.CLEAR and "GPU computing" in calls[k].evidence
    assert calls["allocator_churn"].flag is Flag.NA and calls["blocking_io"].flag is Flag.NA


def _numbers(**kw: object):
    from harness.tools.hta import HtaNumbers

    base = dict(ranks=1, rank_ids=[0], gpu_kernels=100, idle_pct={0: 5.0}, compute_pct={0: 90.0},
                host_wait_share=0.5, launches=100, short_launch_share=0.1, queue_p75=9.0,
                kernel_us={"all": 100.0, "gemm_tensor": 60.0, "gemm_fma": 0.0,
                           "gemm_unknown": 0.0, "elementwise": 30.0, "layout": 0.0},
                kernel_launches={"gemm": 10, "elementwise": 30})  # fmt: skip
    return HtaNumbers(**{**base, **kw})  # type: ignore[arg-type]


def test_hta_gpu_side_rules_fire_at_their_thresholds_and_not_below():
    from harness.tools.hta import hta_calls

    r = HtaRules()
    k = {"all": 100.0, "gemm_tensor": 0.0, "gemm_unknown": 0.0}
    fp32 = {**k, "gemm_fma": 100 * r.fp32_min_gemm_share, "elementwise": 0.0, "layout": 0.0}
    assert hta_calls(_numbers(kernel_us=fp32), r)["fp32_math"].flag is Flag.FLAGGED
    below = {**fp32, "gemm_fma": 100 * r.fp32_min_gemm_share - 0.1}
    assert hta_calls(_numbers(kernel_us=below), r)["fp32_math"].flag is Flag.CLEAR
    idle = _numbers(kernel_us=fp32, compute_pct={0: r.busy_min_compute_pct - 0.1})
    assert hta_calls(idle, r)["fp32_math"].flag is Flag.CLEAR  # the GPU is not busy computing
    ew = {**k, "gemm_fma": 0.0, "elementwise": 100 * r.elementwise_min_share, "layout": 0.0}
    chain = {"gemm": 10, "elementwise": int(10 * r.elementwise_min_per_gemm)}
    assert hta_calls(_numbers(kernel_us=ew, kernel_launches=chain), r)[
        "unfused_elementwise"].flag is Flag.FLAGGED  # fmt: skip
    short = {"gemm": 10, "elementwise": int(10 * r.elementwise_min_per_gemm) - 1}
    assert hta_calls(_numbers(kernel_us=ew, kernel_launches=short), r)[
        "unfused_elementwise"].flag is Flag.CLEAR  # fmt: skip
    lay = {**k, "gemm_fma": 0.0, "elementwise": 0.0, "layout": 100 * r.layout_min_share}
    assert hta_calls(_numbers(kernel_us=lay), r)["layout_transpose"].flag is Flag.FLAGGED
    old = hta_calls(_numbers(kernel_us={}, kernel_launches={}), r)  # cached before the breakdown
    assert {old[c].flag for c in GPU_SIDE} == {Flag.NA}


def test_rules_sections_are_config_with_validated_overrides():
    cfg = tools_config(parse_tool_overrides(["tb_plugin.fp32_min_gemm_share=0.2",
                                             "tools.nsys_ai.tc_min_inactive_ms=3",
                                             "hta.layout_min_share=0.05"]))  # fmt: skip
    assert cfg.tb_plugin.fp32_min_gemm_share == 0.2 and cfg.nsys_ai.tc_min_inactive_ms == 3.0
    assert cfg.hta.layout_min_share == 0.05 and cfg.hta.min_idle_pct == HtaRules().min_idle_pct
    with pytest.raises(ValueError, match=r"tb_plugin\.nope"):
        tools_config({"tb_plugin": {"nope": 1}})
    with pytest.raises(ValueError, match="fp32_min_gemm_share"):
        TbPluginRules(fp32_min_gemm_share=1.5)
    with pytest.raises(ValueError, match="tc_max_achieved_pct"):
        NsysAiRules(tc_max_achieved_pct=120)
    assert "tb-plugin" in tools_config().run


def _flagged(text: str) -> set[str]:
    from harness.judge.score import words_found

    return {k for k, words in words_found(text).items() if words}


def test_tool_words_name_the_new_classes_from_tools_text():
    """What tools print when they name the cause flags the class; kernel names every PyTorch
    program has (elementwise kernels, a cuDNN convolution's layout, the start-up allocations
    of an API summary) flag none of the new classes."""
    said = {
        "fp32_math": ["Kernels eligible for Tensor Cores but not using them: enable AMP",
                      "Tensor Core Utilization: TC Achieved 0.0%"],
        "unfused_elementwise": ["long chain of elementwise kernels: consider kernel fusion"],
        "layout_transpose": ["cudnn::engines_precompiled::nchwToNhwcKernel 31%",
                             "convert the model to channels_last"],
        "allocator_churn": ["Frequent or long cudaFree calls usually indicate a bottleneck",
                            "torch.cuda.empty_cache() every step"],
        "blocking_io": ["torch.save checkpoint on the training thread"],
    }  # fmt: skip
    for klass, texts in said.items():
        for text in texts:
            assert klass in _flagged(text), (klass, text)
    everyday = "\n".join([
        "void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<c10::BFloat16>>",
        "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64",
        "cudaMalloc  12  4.1 ms", "cudaFree  3  0.2 ms",
    ])  # fmt: skip
    assert _flagged(everyday) & {*GPU_SIDE, "allocator_churn"} == set()


def test_score_cli_has_a_column_for_the_new_tool_on_every_class(tmp_path: Path, capsys):
    """``harness score CORPUS --tool tb-plugin``: its column in the tools table, judged on
    fp32_math (a real fp32 MLP labelled data_stall: flagged, so a false positive, and a bf16
    program: clear) and n/a on the classes it cannot see."""
    import shutil

    import pandas as pd

    from harness.tools.cli import main

    corpus = tmp_path / "corpus"
    (corpus / "exports").mkdir(parents=True)
    shutil.copy(CORPUS / "hs_nonzero_mask.sqlite.cols.xz", corpus / "exports")
    shutil.copy(DATA / "gpu_nsys2025_sync_loading.sqlite.cols.xz", corpus / "exports")
    pd.DataFrame({"script": ["hs_nonzero_mask", "gpu_nsys2025_sync_loading"],
                  "label": ["data_stall", "data_stall"]}).to_csv(corpus / "labels.csv", index=False)  # fmt: skip
    out = tmp_path / "o"
    assert main([str(corpus), "--no-expert-rules", "--tool", "tb-plugin", "--out", str(out)]) == 0
    assert "tb-plugin" in capsys.readouterr().out
    scores = pd.read_csv(out / "tools_scores.csv")
    mine = scores[scores["tool"] == "tb-plugin"].set_index("class")
    assert list(mine.index) == list(CLASSES)
    fp32 = mine.loc["fp32_math"]
    assert (fp32.tp, fp32.fp, fp32.fn, fp32.judged_reports) == (0, 1, 0, 2)
    assert mine.drop(index="fp32_math")["judged_reports"].sum() == 0
