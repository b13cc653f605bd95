"""The run's arithmetic precision: what each setting computes in, and what it moves (no torch here).

Three settings (config key ``precision``), each a different reference (DESIGN.md section 2): csp at
any stage count equals ``sequential`` at the same precision, bit for bit; two precisions differ.

- ``fp32``: every kernel in float32, TF32 off on CUDA (the paper's system, the default).
- ``tf32``: float32 tensors, CUDA's matrix products and convolutions on TF32 tensor cores (10-bit
  mantissa inputs, float32 accumulation). The CPU has no TF32 kernels: there it computes as ``fp32``.
- ``bf16``: ``torch.autocast`` to bfloat16 around each layer's forward (and its recompute, and the
  loss), so matrix products and convolutions run in bf16 while parameters, gradients and optimizer
  state stay float32. Tensors crossing stages go as the exact bytes of whatever dtype they have.

The simulator reads the sizes below; the rates come from the hardware spec (``flops`` per precision,
:mod:`naspipe.sim.hardware`), since they are the silicon's.
"""

from __future__ import annotations

from dataclasses import dataclass

from naspipe.errors import UsageError


@dataclass(frozen=True)
class Precision:
    """What a setting stores and computes in, as the simulator prices it (bytes per element)."""

    name: str
    compute_bytes: int  # activations the backward keeps and the matrix products read
    param_bytes: int  # parameters, gradients, optimizer state (float32 master weights in every setting)


PRECISIONS: dict[str, Precision] = {
    "fp32": Precision("fp32", 4, 4),
    "tf32": Precision("tf32", 4, 4),
    "bf16": Precision("bf16", 2, 4),
}
NAMES = tuple(PRECISIONS)
DEFAULT = "fp32"


def get(name: str) -> Precision:
    """The setting ``name``; a UsageError naming the choices otherwise."""
    if name not in PRECISIONS:
        raise UsageError(f"unknown precision {name!r}; choose one of {', '.join(NAMES)}")
    return PRECISIONS[name]


def activation_scale(name: str) -> float:
    """Kept activations relative to float32 (the spaces' shapes count float32 bytes)."""
    return get(name).compute_bytes / 4.0
