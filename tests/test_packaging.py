"""Packaging: the Dockerfile (checked without Docker), the wheel, and the SLURM launcher config.

No Docker engine runs on CI, so the Dockerfile is read, not built: its base tag is pinned, what it
copies exists and is not in .dockerignore, and its pip install runs here, as a dry run, on a copy
of exactly what it copies, with the same torch constraint (pip must keep the installed torch). The
wheel built from that copy must carry every config file (hydra/launcher/slurm.yaml included) and
every scenario module, and compose the suite once installed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest

import scenarios
from tests.conftest import REPO

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    from pip._vendor import tomli as tomllib

DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
SLURM_YAML = REPO / "conf" / "hydra" / "launcher" / "slurm.yaml"
SUBMITIT_MISSING = (
    "hydra-submitit-launcher is not installed (the slurm extra: pip install -e '.[slurm]'; "
    "scripts/setup.sh installs it)"
)


# --- reading the Dockerfile -------------------------------------------------------------------


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        instr, _, args = (buf + line).partition(" ")
        out.append((instr.upper(), " ".join(args.split())))
        buf = ""
    assert not buf, "Dockerfile ends inside a continued line"
    return out


INSTRUCTIONS = dockerfile_instructions(DOCKERFILE.read_text())


def base_image() -> str:
    """The FROM image, with ARG defaults declared before it substituted."""
    args: dict[str, str] = {}
    for instr, rest in INSTRUCTIONS:
        if instr == "ARG" and "=" in rest:
            key, _, value = rest.partition("=")
            args[key.strip()] = value.strip().strip('"')
        if instr == "FROM":
            image = rest.split()[0]
            return re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), image)
    raise AssertionError("Dockerfile has no FROM")


def workdir() -> str:
    dirs = [rest for instr, rest in INSTRUCTIONS if instr == "WORKDIR"]
    assert dirs, "Dockerfile sets no WORKDIR"
    return dirs[-1]


def copy_instructions() -> list[tuple[list[str], str]]:
    """(sources, destination) of every COPY/ADD from the build context."""
    out = []
    for instr, rest in INSTRUCTIONS:
        if instr not in ("COPY", "ADD"):
            continue
        tokens = shlex.split(rest)
        if any(t.startswith("--from") for t in tokens):
            continue
        tokens = [t for t in tokens if not t.startswith("--")]
        out.append((tokens[:-1], tokens[-1]))
    return out


def pip_install_step() -> tuple[list[str], list[str], str]:
    """The Dockerfile's pip install: (its command, the command that writes its constraint file,
    the constraint file's path)."""
    found = []
    for instr, rest in INSTRUCTIONS:
        if instr != "RUN" or "pip install" not in rest:
            continue
        segments = [shlex.split(seg) for seg in rest.split("&&")]
        for i, seg in enumerate(segments):
            if seg[:2] == ["pip", "install"] or seg[1:4] == ["-m", "pip", "install"]:
                found.append((seg, segments[:i]))
    assert len(found) == 1, f"expected one pip install in the Dockerfile, found {len(found)}"
    pip, before = found[0]
    constraint = next(
        (pip[i + 1] for i, t in enumerate(pip) if t in ("-c", "--constraint")),
        None,
    )
    assert constraint, "the pip install must carry a --constraint that pins the image's torch"
    writers = [seg for seg in before if ">" in seg and seg[-1] == constraint]
    assert writers, f"nothing before the pip install writes {constraint}"
    writer = writers[-1][: writers[-1].index(">")]
    return pip, writer, constraint


def requirement_specs(pip: list[str]) -> list[str]:
    """Positional arguments of a pip install command line (what it installs)."""
    with_value = {"-c", "--constraint", "-r", "--requirement", "-i", "--index-url", "-t"}
    start = pip.index("install") + 1
    specs, skip = [], False
    for tok in pip[start:]:
        if skip:
            skip = False
        elif tok in with_value:
            skip = True
        elif not tok.startswith("-"):
            specs.append(tok)
    return specs


# --- .dockerignore ---------------------------------------------------------------------------


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


DOCKERIGNORE_RULES = [
    (line.startswith("!"), _pattern_regex(line.lstrip("!").strip("/")))
    for line in (ln.strip() for ln in DOCKERIGNORE.read_text().splitlines())
    if line and not line.startswith("#")
]


def docker_ignored(rel: str) -> bool:
    """Whether Docker leaves ``rel`` (relative to the context) out: the last rule matching the
    path or one of its parent folders decides; '!' rules take paths back in."""
    parts = rel.strip("/").split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for negate, regex in DOCKERIGNORE_RULES:
        if any(regex.fullmatch(p) for p in prefixes):
            ignored = not negate
    return ignored


# --- the Dockerfile --------------------------------------------------------------------------


def test_base_image_is_an_nvidia_pytorch_release_pinned_by_tag():
    image = base_image()
    repo, _, tag = image.partition(":")
    assert repo == "nvcr.io/nvidia/pytorch", image
    assert re.fullmatch(r"\d{2}\.\d{2}-py3", tag), f"pin a release tag (yy.mm-py3), got {image!r}"
    assert "latest" not in image


def test_copy_sources_exist_and_are_in_the_build_context():
    copies = copy_instructions()
    assert copies, "the Dockerfile copies nothing"
    for sources, _ in copies:
        for src in sources:
            assert (REPO / src).exists(), f"COPY {src}: no such file in the repository"
            assert not docker_ignored(src), f"COPY {src}: excluded by .dockerignore"


def test_copies_cover_what_the_package_is_built_from():
    copied = {Path(src).parts[0] for sources, _ in copy_instructions() for src in sources}
    setuptools_cfg = PYPROJECT["tool"]["setuptools"]
    package_dir = setuptools_cfg.get("package-dir", {})
    for package in setuptools_cfg["packages"]:
        folder = package_dir.get(package, package.replace(".", "/"))
        assert Path(folder).parts[0] in copied, f"package {package} ({folder}/) is not copied"
    assert {"pyproject.toml", PYPROJECT["project"]["readme"]} <= copied


def test_dockerignore_keeps_runs_environments_and_profiles_out():
    for path in [
        "results/20261122T000000Z_h100/runs.csv",
        "results/reference/h100/manifest.json",
        ".venv/bin/python",
        ".gpu-stage/bin/env.sh",
        ".git/HEAD",
        ".pytest_cache/README.md",
        ".ruff_cache/CACHEDIR.TAG",
        "harness/__pycache__/config.cpython-312.pyc",
        "run.nsys-rep",
        "somewhere/deep/report.nsys-rep",
        "somewhere/report.sqlite",
        "tests/other/report.sqlite",
    ]:
        assert docker_ignored(path), f".dockerignore lets {path} into the build context"
    kept = [p.relative_to(REPO).as_posix() for p in (REPO / "tests" / "data").glob("*.sqlite*.xz")]
    assert kept, "no compressed exports under tests/data"
    for path in [
        *kept,
        "harness/core/config.py",
        "conf/hydra/launcher/slurm.yaml",
        "pyproject.toml",
    ]:
        assert not docker_ignored(path), f".dockerignore drops {path}"


def test_pip_install_keeps_the_image_torch():
    pip, writer, _ = pip_install_step()
    assert writer[:2] == ["python", "-c"] and "torch.__version__" in writer[2], writer
    assert not {"-U", "--upgrade", "--force-reinstall", "--no-deps", "--pre"} & set(pip), pip
    specs = requirement_specs(pip)
    assert len(specs) == 1, specs
    path, _, extras = specs[0].partition("[")
    assert path == ".", "install the project copied into the WORKDIR"
    extras = set(extras.rstrip("]").split(",")) if extras else set()
    assert "dali" in extras and extras <= set(PYPROJECT["project"]["optional-dependencies"])


def test_install_checks_run_here():
    """The checks the image runs after its install (every ``python ...`` of the pip install's
    RUN, but the one writing the torch constraint) pass on this checkout: a check naming a
    module that moved would fail the image build."""
    pip_run = next(rest for instr, rest in INSTRUCTIONS if instr == "RUN" and "pip install" in rest)
    checks = [
        shlex.split(seg)
        for seg in pip_run.split("&&")
        if seg.split()[0] == "python" and ">" not in seg
    ]
    assert len(checks) >= 2, pip_run
    for argv in checks:
        if "nsys" in " ".join(argv) and shutil.which("nsys") is None:
            continue  # no nsys on this machine (scripts/setup.sh installs it where it can)
        proc = subprocess.run(
            [sys.executable, *argv[1:]], cwd=REPO, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, (argv, proc.stderr[-2000:])


def test_cmd_runs_the_whole_suite_into_results():
    cmds = [rest for instr, rest in INSTRUCTIONS if instr == "CMD"]
    assert cmds, "no CMD"
    cmd = json.loads(cmds[-1])  # exec form
    assert cmd[:4] == ["python", "-m", "harness", "run"], cmd
    overrides = cmd[4:]
    assert "+scenario=all" in overrides
    from harness.core.config import compose

    _, suite = compose(overrides)
    assert sorted(suite.scenario) == scenarios.shipped_names()
    assert suite.harness.results_dir == "/results"
    run = " ".join(rest for instr, rest in INSTRUCTIONS if instr == "RUN")
    assert "/results" in run and "1777" in run, "/results must be writable by any --user"


@pytest.fixture(scope="module")
def build_context(tmp_path_factory) -> Path:
    """The image's WORKDIR after its COPY lines: a copy of what they copy, .dockerignore applied."""
    ctx = tmp_path_factory.mktemp("docker") / workdir().lstrip("/")
    ctx.mkdir(parents=True)

    def ignore(folder: str, names: list[str]) -> list[str]:
        rel = Path(folder).relative_to(REPO)
        return [n for n in names if docker_ignored((rel / n).as_posix())]

    for sources, dest in copy_instructions():
        target = ctx / dest
        for src in sources:
            if (REPO / src).is_dir():
                shutil.copytree(REPO / src, target, ignore=ignore, dirs_exist_ok=True)
            elif dest.endswith("/") or len(sources) > 1:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / src, target / Path(src).name)
            else:
                shutil.copy2(REPO / src, target)
    return ctx


def _pip(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


@pytest.mark.slow
def test_docker_pip_install_dry_run_keeps_installed_torch(build_context, tmp_path):
    """The Dockerfile's own pip install line, on this machine's torch: nothing replaces torch."""
    pip, writer, constraint = pip_install_step()
    pinned = subprocess.run(
        [sys.executable, *writer[1:]], capture_output=True, text=True, check=True
    ).stdout.strip()
    import torch

    assert pinned == f"torch=={torch.__version__}"
    local_constraint = tmp_path / "image-torch.txt"
    local_constraint.write_text(pinned + "\n")
    args = [str(local_constraint) if t == constraint else t for t in pip[pip.index("install") :]]
    report = tmp_path / "report.json"
    _pip([*args, "--dry-run", "--quiet", "--report", str(report)], cwd=build_context)
    installs = {i["metadata"]["name"].lower() for i in json.loads(report.read_text())["install"]}
    assert "bottleneck-suite" in installs
    assert "torch" not in installs, f"pip would replace the image's torch: {sorted(installs)}"


@pytest.fixture(scope="module")
def wheel(build_context, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _pip(["wheel", "--no-deps", "--quiet", "--wheel-dir", str(out), "."], cwd=build_context)
    (found,) = out.glob("bottleneck_suite-*.whl")
    return found


def _source_files(root: Path, folder: str, suffix: str) -> list[str]:
    return sorted(
        p.relative_to(root / folder).as_posix()
        for p in (root / folder).rglob(f"*{suffix}")
        if "__pycache__" not in p.parts
    )


@pytest.mark.slow
def test_wheel_carries_every_config_and_scenario_module(wheel, build_context):
    """Everything the image copies that the package needs is in the wheel built from it."""
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "harness/conf/hydra/launcher/slurm.yaml" in names
    expected = [f"harness/conf/{c}" for c in _source_files(build_context, "conf", ".yaml")]
    for package in ("bottlenecks", "harness", "scenarios", "analysis"):
        expected += [f"{package}/{m}" for m in _source_files(build_context, package, ".py")]
    expected += [f"analysis/{s}" for s in _source_files(build_context, "analysis", ".sql")]
    expected += [f"harness/{t}" for t in _source_files(build_context, "harness", ".j2")]
    expected += [f"harness/{t}" for t in _source_files(build_context, "harness", ".css")]
    missing = [m for m in expected if m not in names]
    assert not missing, f"the wheel lacks {missing} (pyproject: packages / package-data)"
    for name in scenarios.shipped_names():
        assert f"scenarios/{name}.py" in names or f"scenarios/{name}/__init__.py" in names, name
    (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    text = zipfile.ZipFile(wheel).read(metadata).decode()
    for extra in ("dali", "dev", "slurm"):
        assert f"Provides-Extra: {extra}" in text
    assert re.search(r"Requires-Dist: hydra-submitit-launcher.*extra == \"slurm\"", text)


@pytest.mark.slow
def test_installed_wheel_composes_the_suite(wheel, tmp_path):
    """Installed (no checkout on sys.path), the package finds its configs as harness.conf and
    the report's templates."""
    target = tmp_path / "site"
    _pip(["install", "--no-deps", "--quiet", "--target", str(target), str(wheel)], cwd=tmp_path)
    code = (
        "import harness, json\n"
        "from harness.core.config import compose, config_dir, discover_scenarios as d\n"
        "_, suite = compose(['+scenario=all'])\n"
        "from harness.report.page import environment\n"
        "page = environment().get_template('report.html.j2').filename\n"
        "print(json.dumps({'harness': harness.__file__, 'conf': str(config_dir()),\n"
        "    'slurm': (config_dir() / 'hydra/launcher/slurm.yaml').is_file(), 'page': page,\n"
        "    'scenarios': sorted(suite.scenario),\n"
        "    'workloads': [s.builder().__module__ for s in d().values()]}))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(target))
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(seen["harness"]).is_relative_to(target), seen
    assert Path(seen["conf"]) == target / "harness" / "conf"
    assert seen["slurm"] and seen["scenarios"] == scenarios.shipped_names()
    assert seen["workloads"] == [f"scenarios.{n}.workload" for n in scenarios.shipped_names()]
    assert Path(seen["page"]) == target / "harness" / "report" / "templates" / "report.html.j2"


# --- SLURM -----------------------------------------------------------------------------------


def documented_slurm_command() -> list[str]:
    """The command in conf/hydra/launcher/slurm.yaml's header (docs/slurm.md)."""
    lines, inside = [], False
    for raw in SLURM_YAML.read_text().splitlines():
        line = raw.lstrip("#").strip()
        if line.startswith("python -m harness run -m"):
            inside = True
        if inside:
            lines.append(line.rstrip("\\").strip())
            if not line.endswith("\\"):
                break
    assert lines, "slurm.yaml's header shows no `python -m harness run -m ...` command"
    return shlex.split(" ".join(lines))


def test_documented_command_sweeps_one_job_per_scenario():
    cmd = documented_slurm_command()
    assert cmd[:5] == ["python", "-m", "harness", "run", "-m"]
    assert "hydra/launcher=slurm" in cmd
    (sweep,) = [a for a in cmd if a.startswith("+scenario=")]
    names = sweep.partition("=")[2].split(",")
    assert len(names) > 1 and "all" not in names, "a sweep needs the names, not 'all'"
    assert set(names) <= set(scenarios.shipped_names()), names
    # one results folder per job: the lock in harness.results_dir admits one harness at a time
    assert "harness.results_dir=${hydra:sweep.dir}/${hydra:job.num}" in cmd


def test_slurm_launcher_config_composes():
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason=SUBMITIT_MISSING)
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from harness.core.config import config_dir, discover_scenarios, register_configs

    register_configs(discover_scenarios())
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=["+scenario=all", "hydra/launcher=slurm", "harness.results_dir=/r"],
            return_hydra_config=True,
        )
    launcher = cfg.hydra.launcher
    assert launcher._target_ == (
        "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    )
    assert launcher.tasks_per_node == 1  # the harness starts its own workers
    assert launcher.nodes == 1
    assert launcher.gpus_per_node >= 1
    assert launcher.cpus_per_task >= 8 and launcher.mem_gb >= 32
    assert launcher.timeout_min >= 60
    assert "partition" in launcher and OmegaConf.is_list(launcher.setup)
    assert launcher.submitit_folder.startswith(str(cfg.hydra.sweep.dir))
    assert str(cfg.hydra.sweep.dir).startswith("/r/")  # under harness.results_dir


def _fake_slurm(bin_dir: Path) -> None:
    """srun that exists (submitit looks for it) and sbatch that keeps the script and fails."""
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "sbatch").write_text(
        '#!/bin/sh\ncp "$1" "$FAKE_SBATCH_COPY"\necho "sbatch: fake, nothing submitted" >&2\n'
        "exit 1\n"
    )
    for f in bin_dir.iterdir():
        f.chmod(0o755)


def test_documented_command_submits_one_array_task_per_scenario(cli, tmp_path):
    """The documented command, through the real CLI and plugin, up to sbatch (a fake)."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason=SUBMITIT_MISSING)
    from submitit.core.utils import DelayedSubmission

    _fake_slurm(tmp_path / "bin")
    cmd = [
        a.replace("partition=NAME", "partition=testpart").replace(
            "hydra.sweep.dir=results/", f"hydra.sweep.dir={tmp_path}/results/"
        )
        for a in documented_slurm_command()
    ]
    (sweep,) = [a for a in cmd if a.startswith("+scenario=")]
    names = sweep.partition("=")[2].split(",")
    script = tmp_path / "sbatch.sh"
    env = {
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "FAKE_SBATCH_COPY": str(script),
    }
    proc = cli(cmd[3:], env=env, timeout=300)
    assert "sbatch: fake, nothing submitted" in proc.stderr, proc.stderr[-3000:]
    text = script.read_text()
    for flag in [
        f"--array=0-{len(names) - 1}",
        "--partition=testpart",
        "--gpus-per-node=1",
        "--ntasks-per-node=1",
        "--nodes=1",
        "--cpus-per-task=16",
        "--job-name=bottleneck-suite",
    ]:
        assert f"#SBATCH {flag}" in text, f"{flag} not in\n{text}"
    (sweep_dir,) = (tmp_path / "results" / "slurm").iterdir()
    assert f"--output={sweep_dir}/.submitit/" in text
    jobs = [DelayedSubmission.load(p) for p in (sweep_dir / ".submitit").glob("*.pkl")]
    per_job = sorted(
        [o for o in job.args[0] if o.startswith("+scenario=")] for job in jobs
    )  # args[0]: the job's sweep overrides
    assert per_job == sorted([f"+scenario={n}"] for n in names)


def _local_sweep(cli, sweep_dir: Path, env: dict[str, str], *overrides: str):
    """The documented SLURM sweep pattern, run through submitit's local executor."""
    return cli(
        [
            "run",
            "-m",
            "hydra/launcher=submitit_local",
            *overrides,
            "size=smoke",
            "harness.repeats=1",
            "nsys.enabled=false",
            "harness.progress=false",
            "harness.report=false",  # the sweep tests read no report
            f"hydra.sweep.dir={sweep_dir}",
            "harness.results_dir=${hydra:sweep.dir}/${hydra:job.num}",
        ],
        env=env,
        timeout=600,
    )


@pytest.mark.slow
def test_sweep_runs_each_scenario_in_its_own_job_and_folder(cli, tmp_path):
    """Executed for real through submitit's local executor (the SLURM one minus sbatch): the
    documented sweep and per-job results folder, over two copies of ADDING_SCENARIOS.md's example."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason=SUBMITIT_MISSING)
    from tests.test_contract import write_example

    name = write_example(tmp_path)
    other = f"{name}_copy"
    shutil.copytree(tmp_path / name, tmp_path / other)
    init = tmp_path / other / "__init__.py"
    init.write_text(init.read_text().replace(f'name="{name}"', f'name="{other}"'))
    env = {
        "BOTTLENECK_SCENARIO_MODULES": f"{name},{other}",
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p
        ),
    }
    sweep_dir = tmp_path / "sweep"
    # the example builds no optimizer: its fork servers skip the torch._dynamo preload
    proc = _local_sweep(cli, sweep_dir, env, f"+scenario={name},{other}", "harness.fork_preload=[]")
    assert proc.returncode == 0, proc.stderr[-3000:]
    ran = {}
    for job in ("0", "1"):
        (run_dir,) = [p for p in (sweep_dir / job).iterdir() if p.is_dir()]
        runs = pd.read_csv(run_dir / "runs.csv")
        assert runs["scenario"].nunique() == 1
        assert (runs["status"] == "ok").all(), runs["error"].to_dict()
        ran[job] = runs["scenario"].iloc[0]
    assert sorted(ran.values()) == sorted([name, other])


@pytest.mark.slow
def test_failed_job_under_submitit_makes_the_sweep_fail(cli, tmp_path):
    """A job whose variant crashes must not read as a success: submitit only sees whether the
    task raised, so the harness raises in jobs of a remote launcher when their run failed."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason=SUBMITIT_MISSING)
    from tests.conftest import FAULTY_ENV

    sweep_dir = tmp_path / "sweep"
    proc = _local_sweep(
        cli, sweep_dir, FAULTY_ENV, "+scenario=faulty", "scenario.faulty.variants=[baseline,crash]",
        "harness.fork_preload=[]",  # faulty builds no optimizer (tests/conftest.py: NO_DYNAMO)
    )  # fmt: skip
    assert proc.returncode != 0
    (run_dir,) = [p for p in (sweep_dir / "0").iterdir() if p.is_dir()]
    runs = pd.read_csv(run_dir / "runs.csv").set_index("variant")
    assert runs.loc["crash", "status"] == "failed"
    assert runs.loc["baseline", "status"] == "ok"  # the finished variant's results are kept
