"""Refuse a run whose layers cannot fit, before any process builds one.

A layer too large for memory would otherwise fail inside a stage with an allocation
traceback (or drive the host into swap). Its size is known from its shapes alone
(:meth:`SearchSpace.layer_tensors`: analytic sizes from the space's shape, tested equal to the layer
built on the ``meta`` device), so the launcher checks
every layer, in order and before the partition costs are computed from the same layers,
against the memory the stages will use: the host's available memory
(``MemAvailable``) for CPU stages, the device's free memory for CUDA ones.
"""

from __future__ import annotations

import os

import torch

from naspipe.config import OptimizerConfig
from naspipe.errors import UsageError
from naspipe.runplan import rules
from naspipe.runplan.job import Job
from naspipe.space import SearchSpace


def check_fits(space: SearchSpace, optimizer: OptimizerConfig, device: torch.device, all_stages_here: bool) -> None:
    """One line naming the layer, its size and the memory available if a layer cannot fit.

    ``all_stages_here``: every stage runs on this host (a local CPU run), so the whole supernet
    must fit as well as each layer.
    """
    available, source = available_memory(device)
    if available is None:
        return
    structure = space.structure
    sizes: list[int] = []
    for layer in range(structure.num_layers):  # in order, so the first layer too large is the one named
        sizes.append(training_bytes(space, optimizer, layer))
        if sizes[-1] > available:
            raise UsageError(f"space {space.name!r}: layer {layer} ({structure.op_name(layer)}) needs about "
                             f"{_fmt(sizes[-1])} to train (parameters, gradients, optimizer state), "
                             f"more than the {_fmt(available)} available ({source})")
    if all_stages_here and sum(sizes) > available:
        raise UsageError(f"space {space.name!r}: its {len(sizes)} layers need about {_fmt(sum(sizes))} to train, "
                         f"more than the {_fmt(available)} available ({source})")


def check_cache_budgets(job: Job) -> None:
    """Every stage's device cache budget, by the rule the stages apply (:func:`rules.cache_budgets`), from the
    layers' sizes as :meth:`SearchSpace.layer_tensors` gives them, less what the cache never moves (equal to
    the built layers' cache bytes, :func:`naspipe.runtime.context.layer_bytes`): a budget too small is one
    line here, before any stage starts, instead of a stage's traceback."""
    config = job.config
    if not rules.uses_cache(config.system, config.cache):
        return
    space = job.space
    sizes = {lid: max(1, training_bytes(space, config.optimizer, lid) - space.unmoved_bytes(lid))
             for lid in range(space.structure.num_layers)}
    rules.cache_budgets(job.plan, config.steps, sizes, config.cache, micro_batched=job.policy_options.micro_batched)


def training_bytes(space: SearchSpace, optimizer: OptimizerConfig, layer: int) -> int:
    """Per trainable parameter: its gradient and the optimizer's state slots, beside the layer's tensors."""
    params, tensor_bytes = space.layer_tensors(layer)
    trainable = space.structure.is_trainable(layer)
    extra = (1 + optimizer.state_slots) * params * 4 if trainable else 0
    return tensor_bytes + extra


def available_memory(device: torch.device) -> tuple[int | None, str]:
    """Bytes the stages may use and where the figure comes from (None: unknown, do not check)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free), f"free on {device}"
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "MemAvailable in /proc/meminfo"
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "free physical memory"
    except (ValueError, OSError):
        return None, "unknown"


def _fmt(size: float) -> str:
    units, i = ("B", "KiB", "MiB", "GiB", "TiB", "PiB"), 0
    while size >= 1024 and i < len(units) - 1:
        size, i = size / 1024, i + 1
    return f"{size:.1f} {units[i]}"
