"""The kernel-level row: Nsight Compute on the top kernels of every profiled variant.

Nsight Systems says where a step's time goes; it cannot say whether a kernel that keeps the GPU
busy does so well. This package takes each profiled variant's heaviest kernels from its nsys
export, profiles one launch of each under ``ncu`` inside the variant's own worker, and says per
kernel whether it is bound by compute, by memory or by latency, which pipe a matrix kernel ran
on, and what the step would take with every profiled kernel at its bound (the step's roofline
limit). One analyzer per module, each returning a tidy frame with units in its column names:

- :mod:`.config`: the ``kernels`` config section (:class:`KernelsConfig`);
- :mod:`.command`: finding ``ncu`` and its command line (stdlib only: the GPU probe runs it);
- :mod:`.plan`: the kernels to profile, from an export;
- :mod:`.select`: which variants, in what order, within the time budget;
- :mod:`.launch`: the ncu processes, in parallel, each with its timeout;
- :mod:`.parse`: ncu's raw CSV page to a frame;
- :mod:`.classify`: bound, pipe, dtype and matrix family per kernel;
- :mod:`.limits`: the step's roofline limit beside its measured GPU time;
- :mod:`.step`: the step a run calls (:func:`harness.kernels.step.run_kernels`);
- :mod:`.cli`: ``harness kernels RUN``.

Nothing here imports torch or touches CUDA: the parent only starts processes and reads files.
"""
