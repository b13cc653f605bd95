"""Deterministic torch: the one place that sets the kernel and threading switches (DESIGN.md section 2).

Training and profiling both call :func:`make_deterministic`, so a profile times exactly the
kernels that a training run executes (no cuDNN autotuning, TF32 as the run's precision says,
deterministic algorithms) with the same intra-op thread count, and both run each layer under
:func:`layer_precision` (bf16 autocast, or nothing).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager

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


def make_deterministic(threads: int, device: torch.device, precision: str = "fp32") -> None:
    """Fixed intra-op threads, deterministic kernels; on CUDA TF32 on only for ``precision`` tf32.

    ``CUBLAS_WORKSPACE_CONFIG`` must be set before the first cuBLAS call for deterministic
    matrix products; a value the user already exported is kept. The TF32 switches are set
    either way, so a process never inherits another setting's.
    """
    check_threads(threads)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.set_num_threads(threads)
    deterministic_algorithms()
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    if device.type == "cuda":
        tf32 = precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32


def layer_precision(precision: str, device: torch.device) -> Callable[[], AbstractContextManager[object]]:
    """What each layer's forward, recompute and the loss run under: bf16 autocast, or nothing.

    Autocast per layer (not per stage) makes a layer's arithmetic independent of where the stage
    boundaries fall: its cast cache lives and dies with the layer's call, and no weight is shared
    between layers, so one stage or sixteen compute the same bits (the executor's argument).
    """
    if precision == "bf16":
        return lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext


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
