"""Deterministic torch: the one place that sets the kernel and threading switches (DESIGN.md section 2).

Training and profiling both call :func:`make_deterministic`, so a profile times exactly the
kernels that a training run executes (no cuDNN autotuning, no TF32, deterministic
algorithms) with the same intra-op thread count.
"""

from __future__ import annotations

import os

import torch


def make_deterministic(threads: int, device: torch.device) -> None:
    """Fixed intra-op threads, deterministic kernels; on CUDA also TF32 off.

    ``CUBLAS_WORKSPACE_CONFIG`` must be set before the first cuBLAS call for deterministic
    matrix products; a value the user already exported is kept.
    """
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
