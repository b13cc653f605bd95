"""Deterministic torch: the one place that sets the kernel and threading switches (DESIGN.md section 2).

Training and profiling both call :func:`make_deterministic`, so a profile times exactly the
kernels that a training run executes (no cuDNN autotuning, no TF32, deterministic
algorithms) with the same intra-op thread count.
"""

from __future__ import annotations

import os
import sys

import torch

from naspipe.errors import UsageError

# More intra-op threads than any node has cores: beyond this torch overflows (a C int) or tries
# to start an absurd thread pool, so the value is refused before anything is created.
MAX_THREADS = 1024


def check_threads(threads: int) -> None:
    """UsageError naming config key ``threads`` unless torch can use that many intra-op threads."""
    if not 1 <= threads <= MAX_THREADS:
        raise UsageError(f"config key 'threads': {threads} is out of range (1 to {MAX_THREADS} intra-op threads "
                         "per stage)")


def make_deterministic(threads: int, device: torch.device) -> None:
    """Fixed intra-op threads, deterministic kernels; on CUDA also TF32 off.

    ``CUBLAS_WORKSPACE_CONFIG`` must be set before the first cuBLAS call for deterministic
    matrix products; a value the user already exported is kept.
    """
    check_threads(threads)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.set_num_threads(threads)
    deterministic_algorithms()
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False


def deterministic_algorithms() -> None:
    """``torch.use_deterministic_algorithms(True)`` without its import of ``torch._inductor``, which loads
    ``torch._dynamo`` and sympy: about 1.2 s of CPU in every training and stage process (docs/startup.md).

    The eager kernels read one switch, set here as torch sets it; inductor's own flag only steers
    ``torch.compile``, which this project never calls, and is set too when inductor is loaded anyway.
    """
    inductor = sys.modules.get("torch._inductor.config")
    if inductor is not None:
        inductor.deterministic = True  # type: ignore[attr-defined]
    torch._C._set_deterministic_algorithms(True, warn_only=False)
