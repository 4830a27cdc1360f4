"""``harness score`` on the wild corpus: the detectors on 30 whole-process captures of ordinary
training scripts (corpus/wild/: 23 on an H100, the DDP one on 2 x H200, the three two-rank gloo
pipelines on a 2-core CPU box), scored against labels measured on the same machines
(corpus/wild/measured.csv). The table is exact: a detector change
that moves any report shows here. hs_item_checks, hs_nonzero_mask and hs_cpu_metrics are
labelled data_stall since their competing change was measured (prebuilt device batches beat
removing the syncs), with host_sync as a measured second cause (``also``); hs_step_logging and
hs_hard_mining were the host_sync ones (removing the syncs beat removing either part of the host
work they expose), with data_stall as a measured second cause (prebuilt: 1.24x and 1.25x);
hs_step_logging, hs_plateau_scheduler, hs_hard_mining and hs_grad_hooks are now fp32_math's
(bf16 autocast beat both), with their earlier classes as measured second causes, and fp32_math
is a measured second cause of the three data_stall ones (corpus/wild/README.md)."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pandas as pd
import pytest

from analysis.detect import TraceView, diagnose, load_thresholds
from analysis.detect import view as C
from analysis.packed_export import SUFFIX
from analysis.trace import open_trace
from harness.judge import score as S
from harness.judge.export import sqlite_of
from tests.conftest import REPO, assert_fits

CORPUS = REPO / "corpus" / "wild"

#: report -> (truth, primary, fired classes). The truth is labels.csv's (measured); primary
#: and fired are a regression pin: as the detectors give them today, not derived here.
EXPECTED = {
    "ds_cpu_augment": ("data_stall", "data_stall", "data_stall"),
    "ds_few_workers": ("data_stall", "data_stall", "data_stall"),
    "ds_slow_storage": ("data_stall", "data_stall", "data_stall"),
    "pg_cuda_ram": ("pageable_copy", "pageable_copy", "pageable_copy"),
    "pg_nonblocking_unpinned": ("pageable_copy", "pageable_copy", "pageable_copy;fp32_math"),
    "lb_tiny_layers": ("launch_bound", "launch_bound", "launch_bound"),
    "lb_batch1_infer": ("launch_bound", "launch_bound", "launch_bound"),
    "lb_python_timesteps": ("launch_bound", "launch_bound", "launch_bound"),
    "hs_item_checks": ("data_stall", "data_stall", "data_stall;host_sync;fp32_math"),
    "hs_nonzero_mask": ("data_stall", "data_stall", "data_stall;host_sync;fp32_math"),
    "hs_cpu_metrics": ("data_stall", "data_stall", "data_stall;host_sync;fp32_math"),
    # fp32_math labels (amp timed under a wrapper or in rounds amp-1/2, corpus/wild/README.md);
    # fp32_math also fires on pg_nonblocking_unpinned, whose amp measured 1.07x
    "hs_step_logging": ("fp32_math", "fp32_math", "fp32_math;host_sync;data_stall"),
    "hs_hard_mining": ("fp32_math", "fp32_math", "fp32_math;host_sync;data_stall"),
    "host_bound_with_syncs": ("launch_bound", "launch_bound", "launch_bound"),
    "clean_rare_item": ("fp32_math", "fp32_math", "fp32_math"),
    "clean_compile": ("fp32_math", "fp32_math", "fp32_math"),
    # TF32 convolutions: fp32_math fires at the bf16/TF32 rate; amp measured 1.12x and 1.19x
    "clean_cudnn_benchmark": ("none", "fp32_math", "fp32_math"),
    "clean_loader_keeps_up": ("none", "fp32_math", "fp32_math"),
    "clean_pinned_side_stream": ("fp32_math", "fp32_math", "fp32_math"),
    "ddp_exposed_comm": ("exposed_comm", "exposed_comm", "exposed_comm"),
    "clean_compile_short": ("none", "none", ""),
    # traced, its 1,029-launch step looks host-bound (nsys: ~20 us a call); calibrated to its
    # untraced step, removing the launches saves under launch_bound's bar: cleared
    "clean_cudnn_short": ("none", "none", ""),
    "gil_metrics_thread": ("gil_contention", "gil_contention", "gil_contention"),
    "gil_shard_prep": ("gil_contention", "gil_contention", "gil_contention"),
    "gil_log_shipper": ("none", "none", ""),
    "pp_param_split": ("stage_imbalance", "stage_imbalance", "stage_imbalance"),
    "pp_heavy_head": ("stage_imbalance", "stage_imbalance", "stage_imbalance"),
    "pp_balanced": ("none", "none", ""),
    "hs_grad_hooks": ("fp32_math", "fp32_math", "fp32_math;host_sync"),
    # 2 x H200, 2026-11-28: rank 0 also scores a held-out batch every step
    "dp_straggler": ("stage_imbalance", "stage_imbalance", "stage_imbalance"),
    # one H200, 2026-11-29 (corpus/wild/README.md: fourteen entries)
    "ds_text_tokenize": ("data_stall", "data_stall", "data_stall"),
    "ds_json_records": ("data_stall", "data_stall", "data_stall"),
    "pg_feature_bank": ("pageable_copy", "pageable_copy", "pageable_copy"),
    "clean_prefetch_loader": ("none", "none", ""),
    "hs_plateau_scheduler": ("fp32_math", "fp32_math", "fp32_math;host_sync"),
    "clean_item_gpu_bound": ("none", "none", ""),
    # the GIL waits before each batch copy are not input work (tests/test_data_stall_gil.py)
    "gil_decode_thread": ("gil_contention", "gil_contention", "gil_contention"),
    "gil_param_monitor": ("gil_contention", "gil_contention", "gil_contention"),
    "pg_dict_batch": ("pageable_copy", "pageable_copy", "pageable_copy"),
    "clean_waiting_thread": ("none", "none", ""),
    "lb_gnn_scatter": ("launch_bound", "launch_bound", "launch_bound"),
    "lb_manual_sgd": ("launch_bound", "launch_bound", "launch_bound"),
    "lb_handwritten_norm": ("launch_bound", "launch_bound", "launch_bound"),
    "clean_deep_large_batch": ("fp32_math", "fp32_math", "fp32_math"),
    "fm_mlp_fp32": ("fp32_math", "fp32_math", "fp32_math"),
    "fm_vit_tf32_off": ("fp32_math", "fp32_math", "fp32_math"),
    "fm_convnet_fp32": ("fp32_math", "fp32_math", "fp32_math"),
    # its loop's threads read over the whole window, not its first fifth (the backward alone)
    "ue_layernorm_gelu": ("unfused_elementwise", "unfused_elementwise", "unfused_elementwise"),
    # the warm-up's one-off stall left out of its window (tests/test_steady_whole_process.py)
    "ue_swiglu": ("unfused_elementwise", "unfused_elementwise", "unfused_elementwise"),
    "ue_softmax_attention": ("unfused_elementwise", "unfused_elementwise", "unfused_elementwise"),
    "lt_unet_decoder": ("layout_transpose", "layout_transpose", "layout_transpose"),
    "lt_depthwise": ("layout_transpose", "layout_transpose", "layout_transpose"),
    # the host-side entries (2026-12-02); a synchronous cudaFree waits for the queued work in
    # the replay, so an instant host no longer hides empty_cache's frees (launch_bound second)
    "ac_empty_cache_varlen": (
        "allocator_churn",
        "allocator_churn",
        "allocator_churn;launch_bound",
    ),
    "ac_del_infer": ("allocator_churn", "allocator_churn", "allocator_churn"),
    "bio_torch_save": ("blocking_io", "blocking_io", "blocking_io"),
    "bio_csv_log": ("blocking_io", "blocking_io", "blocking_io"),
    "bio_np_save_acts": ("blocking_io", "blocking_io", "blocking_io"),
    "ds_bucketed_text": ("data_stall", "data_stall", "data_stall;launch_bound"),
    "lb_bucketed_graphs": ("launch_bound", "launch_bound", "launch_bound"),
}


#: The command whose figures README.md and corpus/wild/README.md quote. A detector or
#: prediction change moves them: run it, and copy its figures into both READMEs
#: (test_the_readmes_figures_are_the_tools says which differ).
SCORE_COMMAND = "harness score corpus/wild"


@pytest.fixture(scope="module")
def scored() -> pd.DataFrame:
    """The corpus scored as SCORE_COMMAND scores it: with nsys's expert rules where nsys is
    installed (about 9 s more)."""
    items = S.corpus_items(CORPUS)
    rules = shutil.which("nsys") is not None
    return S.score_reports(items, expert_rules=rules).set_index("report")


@pytest.fixture(scope="module")
def reports(scored: pd.DataFrame) -> pd.DataFrame:
    """The detectors' columns alone."""
    return scored.drop(columns=["nsys_rules"], errors="ignore")


def test_every_labelled_export_is_scored(reports: pd.DataFrame) -> None:
    with (CORPUS / "labels.csv").open() as fh:
        scripts = {r["script"] for r in csv.DictReader(fh)}
    # scripts labelled before their first capture have no export yet
    exported = {s for s in scripts if list((CORPUS / "exports").glob(f"{s}.sqlite*"))}
    assert set(reports.index) == exported == set(EXPECTED)


def test_the_exact_table(reports: pd.DataFrame) -> None:
    got = {
        name: (r.truth, r.primary, r.fired if isinstance(r.fired, str) else "")
        for name, r in reports.iterrows()
    }
    assert got == EXPECTED


def test_class_scores(reports: pd.DataFrame) -> None:
    scores = S.class_scores(reports.reset_index()).set_index("class")
    assert (scores["tool"] == "detectors").all()  # no other tool was asked
    counts = {k: (int(r.tp), int(r.fp), int(r.fn)) for k, r in scores.iterrows()}
    # host_sync also fires on the three data_stall hs_* scripts and data_stall on the host_sync
    # and fp32_math ones where it is a measured second cause (``also``): neither right nor wrong
    assert counts == {
        "data_stall": (9, 0, 0),
        "pageable_copy": (4, 0, 0),
        # ac_empty_cache_varlen (second to the allocator: graphs, removing both, measured
        # 1.71x) and ds_bucketed_text (its tokenizing host holds the launches: untimed graphs
        # switch)
        "launch_bound": (8, 2, 0),
        # no host_sync label left (the four are fp32_math's, host_sync their ``also``)
        "host_sync": (0, 0, 0),
        "exposed_comm": (1, 0, 0),
        "gil_contention": (4, 0, 0),
        "stage_imbalance": (3, 0, 0),
        # false positives where amp measured below 1.2x: pg_nonblocking_unpinned (FMA pipe),
        # clean_cudnn_benchmark and clean_loader_keeps_up (TF32 convolutions)
        "fp32_math": (11, 3, 0),
        "unfused_elementwise": (3, 0, 0),
        "layout_transpose": (2, 0, 0),
        "allocator_churn": (2, 0, 0),
        "blocking_io": (3, 0, 0),
    }
    wrong = set(reports.index[reports["primary"] != reports["truth"]])
    assert wrong == {
        "clean_cudnn_benchmark", "clean_loader_keeps_up",  # TF32: amp 1.12x, 1.19x
    }  # fmt: skip
    clean = reports[reports["truth"] == "none"]
    tf32 = clean.index.isin(["clean_cudnn_benchmark", "clean_loader_keeps_up"])
    assert (clean.loc[~tf32, "primary"] == "none").all()
    assert clean.loc[~tf32, "fired"].fillna("").eq("").all()


def test_a_measured_second_cause_is_not_a_false_positive() -> None:
    """``also`` takes a fired class out of the false positives, and only that class."""
    rows = pd.DataFrame(
        {"report": ["a", "b"], "truth": ["data_stall"] * 2, "also": ["host_sync", ""],
         "fired": ["data_stall;host_sync", "data_stall;host_sync"]}
    )  # fmt: skip
    counts = S.class_scores(rows).set_index("class")
    assert (int(counts.loc["host_sync", "fp"]), int(counts.loc["data_stall", "tp"])) == (1, 2)


def test_labels_stand_on_their_measurements() -> None:
    """Every label of a scored script (one with a committed export) is the largest measured
    single change, >= 1.2x (clean: no change > 1.1x), from the timed processes in
    corpus/wild/timing.csv; every timed label stands but two clean ones, whose amp measured
    1.12x and 1.19x: above the clean bar, below the 1.2x a label needs (corpus/wild/README.md)."""
    measured = pd.read_csv(CORPUS / "measured.csv")
    stands = measured["label_stands"].astype(bool).groupby(measured["script"]).all()
    scored = {p.name.removesuffix(SUFFIX) for p in (CORPUS / "exports").glob(f"*{SUFFIX}")}
    assert set(stands[~stands].index) == {"clean_cudnn_benchmark", "clean_loader_keeps_up"}
    measured = measured[measured["script"].isin(scored)]
    own = measured[measured["fix"] == measured["label_fix"]].set_index("script")
    # where the label's realistic fix was not timed (the host-side entries: their removal
    # alone), the label's best timed switch
    best = measured[measured["class"] == measured["label"]].groupby("script")["speedup"].max()
    labelled = own[own["label"] != "none"]
    assert (labelled["speedup"].fillna(best.reindex(labelled.index)) >= 1.2).all()
    assert (own.loc[own["label"] == "none", "speedup"] <= 1.1).all()


def _mini_corpus(root: Path, names: tuple[str, ...] = ("pg_cuda_ram", "clean_rare_item")) -> Path:
    """A corpus of a few of corpus/wild's exports, with their labels and measurements."""
    corpus = root / "mini"
    (corpus / "exports").mkdir(parents=True)
    for name in names:
        src = CORPUS / "exports" / f"{name}{SUFFIX}"
        (corpus / "exports" / src.name).write_bytes(src.read_bytes())
    with (CORPUS / "labels.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["script"] in names]
    with (corpus / "labels.csv").open("w", newline="") as fh:
        out = csv.DictWriter(fh, fieldnames=list(rows[0]))
        out.writeheader()
        out.writerows(rows)
    measured = pd.read_csv(CORPUS / "measured.csv")
    measured[measured["script"].isin(names)].to_csv(corpus / "measured.csv", index=False)
    return corpus


def test_cli_scores_a_folder(tmp_path: Path, cli) -> None:
    """The CLI on a small corpus of two exports: exit 0, both reports, the predictions against
    the measurements, the CSVs written, every line within 100 columns."""
    corpus = _mini_corpus(tmp_path)
    proc = cli(["score", str(corpus), "--no-expert-rules", "--out", str(tmp_path / "out")])
    assert proc.returncode == 0, proc.stderr
    assert "primary right on 2 of 2 reports" in proc.stdout
    assert "predicted [95% CI] against measured" in proc.stdout
    assert_fits(proc.stdout)
    table = pd.read_csv(tmp_path / "out" / "score_reports.csv")
    assert list(table["primary"]) == ["pageable_copy", "fp32_math"]  # clean_rare_item: amp 5.1x


def test_set_and_its_former_name_diagnosis_are_one_flag(tmp_path: Path, cli) -> None:
    """score's threshold overrides are --set, as in diagnose; -d/--diagnosis still read the
    same; an unknown key exits 2 naming it."""
    parse = S.parser().parse_args
    key = "fp32_math.min_saving_share=0.99"
    assert parse(["x", "--set", key]).set == parse(["x", "-d", key]).set
    assert parse(["x", "--diagnosis", key]).set == [key]
    corpus = _mini_corpus(tmp_path, ("hs_grad_hooks",))
    new, old = (cli(["score", str(corpus), "--no-expert-rules", flag, key])
                for flag in ("--set", "--diagnosis"))  # fmt: skip
    assert new.returncode == old.returncode == 0, new.stderr + old.stderr
    assert new.stdout == old.stdout
    assert "primary right on 0 of 1 reports" in new.stdout  # the bar was raised out of reach
    bad = cli(["score", str(corpus), "--set", "host_sync.no_such_key=1"])
    assert bad.returncode == 2 and "no_such_key" in bad.stderr


def test_cli_refuses_a_folder_without_labels(tmp_path: Path, cli) -> None:
    proc = cli(["score", str(tmp_path), "--no-expert-rules"])
    assert proc.returncode == 2 and "neither a corpus" in proc.stderr


def test_process_main_thread_from_a_global_thread_id() -> None:
    """nsys's global thread id holds pid in bits 24-47 and tid in 0-23 (values from an H100
    capture: the autograd thread 1891 of process 1836)."""
    autograd, main = 281505779681123, 281505779681068
    assert (autograd & 0xFFFFFF, (autograd >> 24) & 0xFFFFFF) == (1891, 1836)
    assert C.process_main_thread(autograd) == main
    assert C.process_main_thread(main) == main


@pytest.mark.parametrize("name", ["host_bound_with_syncs", "lb_python_timesteps"])
def test_the_loop_thread_is_the_process_main_thread(tmp_path: Path, name: str) -> None:
    """In these captures PyTorch's autograd thread launches more kernels than the loop's own
    thread; the host view still reads the process's main thread (its syncs, its stretches)."""
    with sqlite_of(CORPUS / "exports" / f"{name}{SUFFIX}", tmp_path) as db:
        with open_trace(db) as trace:
            view = TraceView(trace, load_thresholds()).host()
            st = C.steady(trace, load_thresholds().window)
            launchers = C.launcher_tids(trace, st.lo, st.hi)
            counts = {
                int(t): int(n)
                for t, n in trace.query(
                    f"SELECT globalTid, COUNT(*) FROM {C.RUNTIME} AS t WHERE {C.WINDOW} "
                    f"AND t.nameId IN ({C.id_list(C.category_ids(trace, 'launch'))}) "
                    "GROUP BY globalTid",
                    {"lo": st.lo, "hi": st.hi},
                )[1]
            }
    assert view is not None and view.tid in launchers
    assert view.tid == C.process_main_thread(view.tid)
    assert max(counts, key=counts.get) != view.tid  # the thread launching most is another


def test_sync_rate_per_second_passes_without_the_suites_steps(tmp_path: Path) -> None:
    """Iterations found in the GPU work may be one layer, not one step, so the per-step sync
    rate may read low: without the suite's steps, >= min_syncs_per_s also passes."""
    strict = load_thresholds({"host_sync": {"min_syncs_per_step": 100.0}})
    path = CORPUS / "exports" / f"hs_step_logging{SUFFIX}"
    with sqlite_of(path, tmp_path) as db, open_trace(db) as trace:
        found = {f.klass: f for f in diagnose(trace, strict)}
    sync = found["host_sync"]
    assert sync.metrics["syncs_per_step"] < 100 and sync.fired, sync.reason
    off = load_thresholds({"host_sync": {"min_syncs_per_step": 100.0, "min_syncs_per_s": 1e6}})
    with sqlite_of(path, tmp_path) as db, open_trace(db) as trace:
        assert not {f.klass: f for f in diagnose(trace, off)}["host_sync"].fired


def test_input_work_gets_the_idle_it_covers_when_the_gpu_is_the_slower_side(tmp_path: Path) -> None:
    """hs_hard_mining's capture: the host's work (outside syncs) is less than the GPU's, yet
    dropping its input work, syncs kept, was measured at 1.25x. The data blocks get the idle
    they cover (not the host's own pace, which is nothing here), and data_stall fires second."""
    cfg = load_thresholds()
    path = CORPUS / "exports" / f"hs_hard_mining{SUFFIX}"
    with sqlite_of(path, tmp_path) as db, open_trace(db) as trace:
        view = TraceView(trace, cfg).host()
        found = {f.klass: f for f in diagnose(trace, cfg)}
    assert view is not None
    assert view.span_ns - view.blocked_ns < view.gpu_busy_ns  # H < G
    assert view.saving_by["data"] == view.idle_by["data"] > 0.15 * view.span_ns
    assert found["data_stall"].fired and found["data_stall"].impact < found["host_sync"].impact


def test_predictions_against_the_full_removals(reports: pd.DataFrame) -> None:
    """Every labelled cause with a measured full-removal switch (corpus/wild/measured.csv),
    checked at 20%: the pairs and their verdicts as the detectors give them today, calibrated to
    each script's untraced step from timing.csv where the loop allows it, and as the trace alone
    predicts them (those outside, and why, in corpus/wild/README.md). A model change that moves
    a pair shows here; issue 23's bar (median <= 20%, none over 40%) holds calibrated."""
    items = S.corpus_items(CORPUS)
    checks = S.prediction_table(items, reports.reset_index(), 0.2)
    done = checks[checks["prediction"].astype(str) != "not_checked"]
    got = {(r.report, r["class"]): str(r.prediction) for _, r in done.iterrows()}
    outside = {k for k, v in got.items() if v == "outside"}
    # ds_slow_storage: its untraced step moves with the storage, 40-57 ms between sessions;
    # calibrated to its capture's session (56.4 ms) against a removal timed in another (43.4).
    # ds_text_tokenize: its removal measured 9.4 and 14.0 ms in its two rounds (5.26x and
    # 3.54x); against the first alone the prediction (5.52x) is within 5%
    # hs_step_logging's amp,
    # timed under a wrapper (one pair, corpus/wild/README.md): 3.15x against a none of 21.8 ms
    # (18-19 ms in its own rounds), on another machine than its export. hs_cpu_metrics' amp
    # (rounds amp-1/2, on the H200; its export and own rounds the H100's): 1.44x predicted
    # against 1.82x, -21%. amp is no removal on clean_compile, clean_pinned_side_stream and
    # hs_plateau_scheduler (TF32 measured more): their `bf16` is, not timed yet
    assert outside == {
        ("hs_cpu_metrics", "fp32_math"), ("hs_step_logging", "fp32_math"),
        ("ds_slow_storage", "data_stall"), ("ds_text_tokenize", "data_stall"),
        # its loop's two threads replayed (the whole window's), fusing its chains leaves the
        # GPU's floor, 1.64x: +20% against compile's 1.36x, +10% against fusing by hand (1.49x)
        ("ue_swiglu", "unfused_elementwise"),
    }  # fmt: skip
    unchecked = checks[checks["prediction"].astype(str) == "not_checked"]
    # lb_tiny_layers' removal is `replay` (its `graphs` runs twice the kernels), timed on the
    # H200 only, where its capture is not committed
    assert {(r.report, r["class"]) for _, r in unchecked.iterrows()} >= {
        *((n, "fp32_math") for n in ("clean_compile", "clean_pinned_side_stream", "hs_plateau_scheduler")),
        ("lb_tiny_layers", "launch_bound"),
    }  # fmt: skip
    # 36 with the H200 entries of 2026-11-29, 49 with the GPU-side classes', 56 the host-side,
    # 62 with the six amp removals of rounds amp-1/2, 59 with amp no removal on three, 58
    # with lb_tiny_layers' replay
    assert len(got) == 58 and sum(v == "within" for v in got.values()) == 53
    errors = done.set_index(["report", "class"])["prediction_error"].astype(float)
    assert errors[("dp_straggler", "stage_imbalance")] == pytest.approx(-0.0412, abs=5e-4)
    assert errors.abs().median() == pytest.approx(0.0875, abs=5e-4)
    assert errors.abs().max() == pytest.approx(0.5082, abs=5e-4)  # hs_step_logging
    assert errors[("lb_batch1_infer", "launch_bound")] == pytest.approx(0.0241, abs=5e-4)
    assert errors[("gil_shard_prep", "gil_contention")] == pytest.approx(-0.0366, abs=5e-4)
    assert errors[("gil_decode_thread", "gil_contention")] == pytest.approx(0.0912, abs=5e-4)
    # its iterations hold ~3 steps each (an anchor every few steps): calibrated to 3 measured
    assert errors[("lb_bucketed_graphs", "launch_bound")] == pytest.approx(0.0994, abs=5e-4)
    # cuDNN's side streams run in the loop stream's queue, its fp32 conversions go
    assert errors[("fm_convnet_fp32", "fp32_math")] == pytest.approx(0.0028, abs=5e-4)
    alone = done.set_index(["report", "class"])["trace_only_error"].astype(float)
    assert set(alone[alone.abs() > 0.4].index) == {
        ("lb_batch1_infer", "launch_bound"),  # nsys cost this loop 20 us a call, not 7
        ("gil_param_monitor", "gil_contention"),  # the traced step ran 1.8x the untraced one
        ("hs_step_logging", "fp32_math"),
    }
    assert int((alone.abs() <= 0.2).sum()) == 46
    assert alone.abs().median() == pytest.approx(0.1175, abs=5e-4)


_WORDS = ("none", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def _count(n: int) -> str:
    return _WORDS[n] if n < len(_WORDS) else str(n)


def _pct(share: float) -> str:
    return f"{100 * share:.0f}%"


def _flat(path: Path) -> str:
    return " ".join(path.read_text().split())


def test_the_readmes_figures_are_the_tools(scored: pd.DataFrame) -> None:
    """README.md's and corpus/wild/README.md's figures on the corpus are SCORE_COMMAND's
    today: the reports scored and the primary right, each class's row (right, F1 of the
    detectors and of nsys's rules), the rules' precision range, and the prediction check.
    Each figure is recomputed here from the scored table, not copied from the READMEs."""
    reports = scored.drop(columns=["nsys_rules"], errors="ignore")
    n, right = len(reports), int((reports["primary"] == reports["truth"]).sum())
    checks = S.prediction_table(S.corpus_items(CORPUS), reports.reset_index(), 0.2)
    done = checks[checks["prediction"].astype(str) != "not_checked"]
    err = done["prediction_error"].astype(float).abs()
    alone = done["trace_only_error"].astype(float).abs()
    within, alone_within = int((err <= 0.2).sum()), int((alone <= 0.2).sum())
    want = {
        "README.md": [
            f"holds {n} scored",
            f"Primary right on {right} of {n}:",
            f"{len(done)} pairs checked, {within} within 20%, median error {_pct(err.median())}, "
            f"largest {_pct(err.max())} (from the trace alone, without the untraced step: "
            f"{alone_within} within 20%, {_count(int((alone > 0.4).sum()))} over 40%)",
        ],
        "corpus/wild/README.md": [
            f"primary right on {right} of {n} reports; {len(done)} predictions checked against "
            f"full removals, {within} within 20%, median |error| {_pct(err.median())}, largest "
            f"{_pct(err.max())}",
        ],
    }
    scores = S.class_scores(scored.reset_index()).set_index(["tool", "class"])
    rows = {ln.split("|")[1].strip(): ln for ln in (REPO / "README.md").read_text().splitlines()
            if ln.startswith("| ") and ln.count("|") == 5}  # fmt: skip
    for klass, r in scores.loc["detectors"].iterrows():
        if int(r.tp + r.fn + r.fp) == 0:  # no corpus script of the class yet: no README row
            assert klass not in rows, (klass, "a README row for a class the corpus lacks")
            continue
        cells = [c.strip() for c in rows[klass].split("|")[1:-1]]
        assert cells[2] == f"{int(r.tp)} of {int(r.tp + r.fn)} / {r.f1:.2f}", (klass, SCORE_COMMAND)
        if ("nsys_rules", klass) in scores.index:
            rule = scores.loc[("nsys_rules", klass)]
            said = "n/a (no rule)" if pd.isna(rule.f1) else f"{rule.f1:.2f}"
            assert cells[3] == said, (klass, SCORE_COMMAND)
    clean = reports[reports["truth"] == "none"]
    ok = int((clean["primary"] == "none").sum())
    said = rows["none"].split("|")[3].strip()
    assert said.startswith(f"{ok} of {len(clean)}"), (said, SCORE_COMMAND)
    assert (ok == len(clean)) == said.endswith(", nothing fires")
    if "nsys_rules" in scores.index.get_level_values(0):
        precision = scores.loc["nsys_rules"]["precision"].dropna()
        want["README.md"].append(f"precision {precision.min():.2f}-{precision.max():.2f} where")
    for name, figures in want.items():
        text = _flat(REPO / name)
        for figure in figures:
            assert figure in text, f"{name} should say {figure!r}: see {SCORE_COMMAND}"
