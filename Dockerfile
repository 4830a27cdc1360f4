# The whole suite in a container, results in a mounted folder:
#
#   docker build -t bottleneck-suite .
#   docker run --rm --gpus all --ipc=host --user "$(id -u):$(id -g)" \
#       -v "$PWD/results:/results" bottleneck-suite
#
# Base: NVIDIA's PyTorch container, which brings CUDA, cuDNN, NCCL, its CUDA build of torch,
# Nsight Systems and DALI. The tag is pinned, never `latest`: torch, CUDA and nsys are part of every
# measurement (manifest.json records them), and a rebuild must not change them unnoticed. 25.06 is
# CUDA 12.9 (driver 575+, older data-centre drivers through the image's forward-compatibility
# libraries) and its DALI is nvidia-dali-cuda120, the wheel the `dali` extra names; releases on
# CUDA 13 need their DALI checked against the extra first. Another release:
#   docker build --build-arg BASE_IMAGE=nvcr.io/nvidia/pytorch:<yy.mm>-py3 .
ARG BASE_IMAGE=nvcr.io/nvidia/pytorch:25.06-py3
FROM ${BASE_IMAGE}

# Nsight Systems' importer (QdstrmImporter) needs libdw.so.1; without it `nsys profile` leaves only
# a .qdstrm. Ubuntu 24.04 calls the package libdw1t64, older releases libdw1. tini: see ENTRYPOINT.
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini \
    && (apt-get install -y --no-install-recommends libdw1t64 \
        || apt-get install -y --no-install-recommends libdw1) \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /workspace/bottleneck-suite
COPY pyproject.toml README.md ./
COPY conf conf
COPY bottlenecks bottlenecks
COPY harness harness
COPY scenarios scenarios
COPY analysis analysis

# The project and its dali extra go in beside the image's torch. The constraint pins torch to the
# version the image ships, so pip keeps it (and fails rather than fetch another torch if anything
# asked for one). Then the install is checked: every scenario and its workloads import, and nsys
# is found.
RUN python -c "import torch; print('torch==' + torch.__version__)" > /tmp/image-torch.txt \
    && pip install --no-cache-dir --constraint /tmp/image-torch.txt ".[dali]" \
    && python -m harness list \
    && python -c "from harness.core.config import discover_scenarios as d; [s.builder() for s in d().values()]" \
    && python -c "from harness.core.nsys import find; n = find(); assert n, 'no nsys'; print(n.path, n.version)"

# Results go to /results (mount a host folder there); generated data sets and compiler caches go
# to /cache. Both are world-writable, so the container runs as any user (docker run --user ...).
RUN mkdir -p /results /cache && chmod 1777 /results /cache
ENV HOME=/cache \
    XDG_CACHE_HOME=/cache \
    TORCHINDUCTOR_CACHE_DIR=/cache/torchinductor
VOLUME ["/results"]

# tini is PID 1: it reaps orphans and forwards `docker stop`'s SIGTERM (and Ctrl-C's SIGINT) to the
# harness, which then stops its workers, writes state `interrupted` and exits 143 (130) before
# Docker's kill; as PID 1 itself the harness would get no default signal actions. The image's own
# entrypoint still runs after tini (driver checks, compatibility libraries); this is its command.
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/nvidia/nvidia_entrypoint.sh"]
# Arguments after the image name replace it, e.g.
#   docker run ... bottleneck-suite python -m harness run +scenario=sync_loading harness.results_dir=/results
CMD ["python", "-m", "harness", "run", "+scenario=all", "harness.results_dir=/results"]
