"""The run configuration's schema: typed dataclasses whose defaults and per-key help are the one
source of truth (loading, validation and ``--help`` all read them; see :mod:`naspipe.config`).

Each field carries its help text in its metadata (:func:`_doc`), so a key cannot be added
without saying what it does, and ``naspipe train --help`` lists it with its default.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from naspipe import systems


def _doc(text: str, **kwargs: Any) -> Any:
    return field(metadata={"help": text}, **kwargs)


@dataclass(frozen=True)
class OptimizerConfig:
    name: Literal["sgd", "adam"] = _doc("per-layer optimizer: sgd (with momentum) or adam", default="sgd")
    lr: float = _doc("learning rate", default=0.05)
    momentum: float = _doc("sgd momentum", default=0.9)
    weight_decay: float = _doc("L2 weight decay (applied only when a layer is updated)", default=0.0)
    betas: tuple[float, float] = _doc("adam betas", default=(0.9, 0.999))
    eps: float = _doc("adam epsilon", default=1e-8)

    @property
    def state_slots(self) -> int:
        """Tensors of optimizer state torch keeps per trainable parameter: Adam's two moments, SGD's
        momentum buffer, none for SGD without momentum (the one rule for the runtime's memory check,
        its cache's layer sizes and the simulator's memory model)."""
        if self.name == "adam":
            return 2
        return 1 if self.momentum > 0 else 0


@dataclass(frozen=True)
class CacheConfig:
    enabled: bool = _doc(
        "context manager: the stage's layers live in host memory and a byte-bounded device cache holds the "
        f"ones in use, fetched ahead by the predictor (systems {', '.join(systems.with_capability('uses_cache'))}; "
        "sequential's is a reference too large for one device)",
        default=False,
    )
    budget: str = _doc(
        "device cache size per stage: bytes (e.g. 1048576), or 'Kx' for K times the largest share of the "
        "stage among the run's subnets (the layers it runs there, with gradients and optimizer state)",
        default="3x",
    )
    horizon: int = _doc("tasks the predictor looks ahead for prefetching; 0: fetch on demand", default=8)

    def budget_bytes(self, subnet_share: int) -> int:
        """The budget in bytes, given one subnet's share of the stage in bytes."""
        text = self.budget.strip().lower()
        if text.endswith("x"):
            return max(1, int(float(text[:-1]) * subnet_share))
        return int(text)



@dataclass(frozen=True)
class Config:
    seed: int = _doc("seeds parameters, batches, dropout and the subnet stream", default=0)
    system: str = _doc("scheduling policy: sequential, csp, ... (see --system)", default="csp")
    stages: int = _doc("pipeline stages D (one process per stage, or per replica with replicas R)", default=1)
    steps: int = _doc("subnets to train (one batch each)", default=32)
    space: dict[str, Any] = _doc(
        "search space: space.name plus that space's options, e.g. space.blocks=8",
        default_factory=lambda: {"name": "toy"},
    )
    shared_policy: Literal["frozen", "causal", "windowed"] = _doc(
        "shared (non-choice) layers: frozen at init, causal (trained by every subnet), or windowed "
        "(updated once per shared_window subnets; see docs/shared-layers.md)", default="frozen"
    )
    shared_window: int = _doc("subnets per shared-layer update under shared_policy=windowed (W)", default=8)
    optimizer: OptimizerConfig = _doc("optimizer settings", default_factory=OptimizerConfig)
    cache: CacheConfig = _doc("device cache of layers (the context manager)", default_factory=CacheConfig)
    recompute: bool = _doc("activation recomputation (checkpointing) in the backward", default=True)
    max_inflight: int = _doc("subnets in the pipeline at once; 0 means 2 x stages", default=0)
    bulk_size: int = _doc("subnets per BSP bulk (gpipe, vpipe); 0 means stages", default=0)
    micro_batches: int = _doc(
        "parts each subnet's batch is split into (csp, sequential): the parts flow through the stages as GPipe's "
        "chunks do and their gradients are summed in part order before the subnet's one update; part of the "
        "reference (sequential with the same value); 1: the paper's schedule", default=1
    )
    replicas: int = _doc(
        "processes per pipeline stage R (csp): the m parts of a subnet are shared out over a stage's replicas in "
        "contiguous ranges and their gradients summed in part order across them, so a run uses stages x replicas "
        "processes and equals sequential with the same micro_batches for any layout; must divide micro_batches",
        default=1
    )
    split_backward: bool = _doc(
        "split each part's backward into an input-gradient task (sent upstream at once) and a weight-gradient "
        "task (csp, sequential; zero-bubble style); part of the reference", default=False
    )
    priority: Literal["critical", "fifo"] = _doc(
        "how a micro-batched stage orders its ready tasks: critical (an update a later subnet waits for, then "
        "backwards, forwards, weight tasks and the other updates) or fifo (update, weight, backward, forward)",
        default="critical"
    )
    partition_costs: str = _doc(
        "per-position costs for the static partition: 'params' (parameter counts), 'uniform', "
        "or a profile CSV written by 'naspipe profile'",
        default="params",
    )
    partition_file: str = _doc(
        "a partition JSON written by 'naspipe partition' whose bounds the run uses instead of computing its own "
        "(empty: compute them from partition_costs)",
        default="",
    )
    partition_mode: Literal["static", "per-subnet"] = _doc(
        "static: one partition for every subnet; per-subnet: each subnet gets its own balanced split (from "
        "partition_costs per layer; 'params' gives each candidate its own cost) and a layer's newest state "
        f"follows it between stages (mirroring; systems {', '.join(systems.with_capability('mirroring'))})",
        default="static",
    )
    subnet: list[int] = _doc(
        "train one fixed architecture every step (one choice per block, e.g. a search's best.json via "
        "'naspipe train --subnet FILE'); empty: sample subnets uniformly (SPOS supernet training)",
        default_factory=list,
    )
    checkpoint_every: int = _doc("write a checkpoint every K subnets (0: never)", default=0)
    keep_checkpoints: int = _doc("checkpoints kept on disk (oldest removed first)", default=2)
    final_checkpoint: bool = _doc(
        "end the run with a checkpoint of the whole supernet (every layer and its optimizer state), so that "
        "--resume RUN --steps M extends a finished run; counts toward keep_checkpoints",
        default=True,
    )
    trace_max_events: int = _doc(
        "trace.json events kept per stage (the first N; later ones are counted in metrics.json stage_extra "
        "trace_dropped, not written); caps the trace of very long runs; 0: no trace",
        default=1_000_000,
    )
    threads: int = _doc("intra-op threads per stage process (fixed for reproducibility)", default=1)
    numerics: Literal["native", "portable"] = _doc(
        "CPU kernels: native (the machine's own: fastest, bits differ between CPU families) or portable (kernels "
        "pinned before torch loads: the same bits on every x86-64 CPU with AVX2; docs/numerics.md)",
        default="native",
    )
    device: Literal["auto", "cpu", "cuda"] = _doc("device of the stage workers", default="auto")
    precision: Literal["fp32", "tf32", "bf16"] = _doc(
        "arithmetic: fp32 (TF32 off), tf32 (CUDA matrix products on TF32 tensor cores; fp32 on the CPU) or bf16 "
        "(autocast around each layer, fp32 parameters and optimizer state); part of the reference: csp equals "
        "sequential at the same precision (naspipe/precision.py)", default="fp32"
    )
    timeout_s: float = _doc("seconds a stage waits on a peer before failing the run (10 s to a week)", default=300.0)
    progress: Literal["auto", "on", "off"] = _doc(
        "progress bar on stderr (train: subnets done on the last stage; simulate: subnets admitted; "
        "auto: when a terminal)", default="auto"
    )

    @property
    def space_name(self) -> str:
        return str(self.space["name"])

    @property
    def space_options(self) -> dict[str, Any]:
        return {k: v for k, v in self.space.items() if k != "name"}

    @property
    def inflight_limit(self) -> int:
        return self.max_inflight or 2 * self.stages

    @property
    def bulk(self) -> int:
        return self.bulk_size or self.stages

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
