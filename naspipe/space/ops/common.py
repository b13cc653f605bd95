"""Building blocks every space uses: seeded dropout with a per-site salt, batch norm that
updates its running statistics exactly once per subnet step (once per part with micro-batches),
label-smoothed cross-entropy.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from naspipe.space.base import LayerContext, seeded_dropout


def dropout(x: torch.Tensor, p: float, ctx: LayerContext, site: str | None = None) -> torch.Tensor:
    """Inverted dropout with a mask that is a pure function of (seed, subnet, layer, site, shape), and of
    the micro-batch for parts after the first (:meth:`LayerContext.dropout_seed`).

    A layer with several dropout sites passes a distinct ``site`` for each, so two tensors of
    the same shape in one layer never share a mask. ``site=None`` is exactly
    :func:`seeded_dropout`. The recompute forward sees the same context, so the same masks.
    """
    if p <= 0.0:
        return x
    if site is None:
        return seeded_dropout(x, p, ctx)
    gen = torch.Generator(device=x.device)
    gen.manual_seed(ctx.dropout_seed(site))
    keep = torch.rand(x.shape, generator=gen, device=x.device) >= p
    return x * keep.to(x.dtype) / (1.0 - p)


class BatchNorm(nn.Module):
    """Batch norm over dim 1 whose running statistics move exactly once per subnet step.

    Training output always uses batch statistics through the same kernel call
    (``F.batch_norm`` without running buffers), so the first forward and the recompute
    forward give bitwise equal outputs. Only the non-recompute forward (``ctx.recompute`` is
    False) updates ``running_mean``/``running_var``/``num_batches_tracked``, with a
    separate, gradient-free ``F.batch_norm`` call: the buffers end up exactly as after one
    ``nn.BatchNorm`` training step on the same input. Eval mode uses the running statistics.

    With micro-batches (``micro_batches`` = m > 1) each part is normalised with its own batch
    statistics and the running statistics move once per part, in part order, by its first
    forward (as GPipe's micro-batches do): m momentum steps per subnet. The runtime runs a
    subnet's forwards on a stage in part order, so the result is the same at any stage count.
    """

    # buffers registered in __init__, declared for the type checker
    running_mean: torch.Tensor
    running_var: torch.Tensor
    num_batches_tracked: torch.Tensor

    def __init__(self, channels: int, momentum: float = 0.1, eps: float = 1e-5) -> None:
        super().__init__()
        self.momentum = float(momentum)
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))
        self.register_buffer("num_batches_tracked", torch.zeros((), dtype=torch.long))
        # (a replica of a replicated stage) parts' inputs whose running-statistics steps wait for the statistics
        # of the parts before them, which another replica computes: (subnet, input), in part order
        self.deferred: list[tuple[int, torch.Tensor]] | None = None

    def forward(self, x: torch.Tensor, ctx: LayerContext) -> torch.Tensor:
        if not self.training:
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps)
        if not ctx.recompute:
            if self.deferred is not None:
                self.deferred.append((ctx.subnet, x.detach()))
            else:
                self._step(x.detach(), self.running_mean, self.running_var, self.num_batches_tracked)
        return F.batch_norm(x, None, None, self.weight, self.bias, True, 0.0, self.eps)

    def _step(self, x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, tracked: torch.Tensor) -> None:
        """One part's running-statistics step, on the given statistics (the module's own, or a replica's copy)."""
        with torch.no_grad():
            F.batch_norm(x, mean, var, None, None, True, self.momentum, self.eps)
            tracked.add_(1)

    def replay(self, subnet: int, statistics: list[torch.Tensor]) -> None:
        """The deferred steps of ``subnet``'s parts, in part order, on ``statistics`` (running mean, running var,
        batches tracked: the state after the parts before them), which they update in place; they are dropped."""
        if self.deferred is None:
            raise RuntimeError("replay without deferred running statistics")
        mean, var, tracked = statistics
        for y, x in self.deferred:
            if y == subnet:
                self._step(x, mean, var, tracked)
        self.deferred = [(y, x) for y, x in self.deferred if y != subnet]

    def statistics(self) -> list[torch.Tensor]:
        """The running statistics, in the order :meth:`replay` takes them."""
        return [self.running_mean, self.running_var, self.num_batches_tracked]


def running_statistics(module: nn.Module) -> list[BatchNorm]:
    """The batch norms inside ``module`` (in module order): what a forward changes besides the output."""
    return [m for m in module.modules() if isinstance(m, BatchNorm)]


def label_smoothed_cross_entropy(
    logits: torch.Tensor, target: torch.Tensor, smoothing: float = 0.0, ignore_index: int | None = None
) -> torch.Tensor:
    """Mean over non-ignored targets of ``(1 - eps) * nll + eps * mean_v(-log p_v)``.

    Written with ``log_softmax`` + ``gather`` instead of ``F.cross_entropy``: CUDA's
    ``nll_loss`` has no deterministic implementation, ``gather``'s backward does.
    """
    logp = F.log_softmax(logits.float(), dim=-1)
    safe = target.clamp(0, logits.shape[-1] - 1)
    nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    per_token = nll if smoothing <= 0.0 else (1.0 - smoothing) * nll - smoothing * logp.mean(dim=-1)
    if ignore_index is None:
        return per_token.mean()
    keep = (target != ignore_index).to(per_token.dtype)
    return (per_token * keep).sum() / keep.sum().clamp(min=1.0)
