"""Range checks of a built config: every value in its range before anything runs.

Types are checked while loading (:mod:`naspipe.config.loading`); what is checked here needs
the whole config (a cache needs recompute and a cache-capable system, per-subnet partitions
need a mirroring system) or a value's range, so a bad one is one line naming the key, not a
stage traceback.
"""

from __future__ import annotations

import math
from typing import Any

from naspipe import systems
from naspipe.config.schema import Config
from naspipe.errors import UsageError
from naspipe.scheduling.policies import supports_micro_batches


def cache_budget_ok(budget: str) -> bool:
    text = budget.strip().lower()
    try:
        value = float(text[:-1]) if text.endswith("x") else int(text)
    except ValueError:
        return False
    return math.isfinite(value) and value > 0


# per-subnet partitions: the systems that mirror layers; the context manager (host store + device cache):
# the systems that may use it. Both are the policies' capabilities (naspipe.systems, which new code asks);
# the two names stay importable from here for one release.
MIRROR_SYSTEMS = systems.with_capability("mirroring")
CACHE_SYSTEMS = systems.with_capability("uses_cache")
MICRO_SYSTEMS = tuple(name for name in systems.names() if supports_micro_batches(name))
REPLICA_SYSTEMS = ("csp",)  # the micro-batched CSP policy gates its update on the replicas' sum (MicroCSP.reduced)


# timeout_s bounds every wait of a stage on its peers: the process group's rendezvous and connections (rank 0
# prepares the run directory, a checkpoint's copy included, while the others wait there), each message, each
# barrier (a peer writing its checkpoint shard) and a stage's wait with nothing runnable. Below 10 s a busy
# machine fails healthy runs in torch's own tracebacks (0.001 s: gloo's connect timed out, once a segfault);
# above a week torch's timers overflow (1e10 s: a recv "timed out waiting 10000000000000ms"; 1e11 s hung).
TIMEOUT_RANGE = (10, 7 * 24 * 3600)


def _baseline_inflight(config: Config) -> int:
    """Subnets a baseline holds between a forward and its update: its bulk (gpipe, vpipe), ``D`` (pipedream).
    Under windowed shared layers the window must cover them, or a subnet would need a window not yet applied."""
    if config.system not in systems.names():
        return 1  # an unknown system is reported by its own check
    system = systems.get(config.system)
    if system.bulk_synchronous:
        return config.bulk_size or config.stages
    return config.stages if system.stash_weights else 1


def _check_ranges(config: Config) -> None:
    """Every value in its range before anything runs, so a bad one is one line, not a stage traceback."""
    o = config.optimizer
    checks = [
        ("stages", config.stages >= 1, "must be >= 1"),
        ("steps", config.steps >= 1, "must be >= 1"),
        ("max_inflight", config.max_inflight >= 0, "must be >= 0"),
        ("shared_window", config.shared_window >= 1, "must be >= 1"),
        ("bulk_size", config.bulk_size >= 0, "must be >= 0"),
        ("micro_batches", config.micro_batches >= 1, "must be >= 1"),
        ("micro_batches", config.micro_batches == 1 or config.system in MICRO_SYSTEMS,
         f"> 1 needs system {' or '.join(MICRO_SYSTEMS)}"),
        ("replicas", config.replicas >= 1, "must be >= 1"),
        ("replicas", config.replicas == 1 or config.system in REPLICA_SYSTEMS,
         f"> 1 needs system {' or '.join(REPLICA_SYSTEMS)} (its update waits for the replicas' ordered sum)"),
        ("replicas", config.micro_batches % max(config.replicas, 1) == 0,
         f"must divide micro_batches ({config.micro_batches}): each replica runs the same number of parts"),
        ("split_backward", not config.split_backward or config.system in MICRO_SYSTEMS,
         f"needs system {' or '.join(MICRO_SYSTEMS)}"),
        ("checkpoint_every", config.checkpoint_every >= 0, "must be >= 0"),
        ("keep_checkpoints", config.keep_checkpoints >= 1, "must be >= 1"),
        ("trace_max_events", config.trace_max_events >= 0, "must be >= 0"),
        ("threads", config.threads >= 1, "must be >= 1"),
        ("timeout_s", TIMEOUT_RANGE[0] <= config.timeout_s <= TIMEOUT_RANGE[1],
         f"must be between {TIMEOUT_RANGE[0]} and {TIMEOUT_RANGE[1]} seconds (a week)"),
        ("optimizer.lr", _finite(o.lr) and o.lr > 0, "must be a finite number > 0"),
        ("optimizer.momentum", _finite(o.momentum) and 0 <= o.momentum <= 1, "must be in [0, 1]"),
        ("optimizer.weight_decay", _finite(o.weight_decay) and o.weight_decay >= 0, "must be a finite number >= 0"),
        ("optimizer.betas", all(_finite(b) and 0 <= b < 1 for b in o.betas), "must be two numbers in [0, 1)"),
        ("optimizer.eps", _finite(o.eps) and o.eps > 0, "must be a finite number > 0"),
        ("space.name", isinstance(config.space.get("name"), str), "must name a space"),
        ("cache.budget", cache_budget_ok(config.cache.budget), "must be a byte count > 0 or a multiple like 3x"),
        ("cache.horizon", config.cache.horizon >= 0, "must be >= 0"),
        ("shared_window", config.shared_policy != "windowed" or config.shared_window >= _baseline_inflight(config),
         f"must be >= the subnets {config.system} has in flight ({_baseline_inflight(config)}) under windowed"),
        ("partition_mode", config.partition_mode == "static" or config.system in MIRROR_SYSTEMS,
         f"per-subnet needs system {' or '.join(MIRROR_SYSTEMS)}"),
        ("cache.enabled", not config.cache.enabled or config.recompute,
         "needs recompute=true (without it every in-flight subnet's layers stay pinned by its saved activations)"),
        ("cache.enabled", not config.cache.enabled or config.system in CACHE_SYSTEMS,
         f"needs system {' or '.join(CACHE_SYSTEMS)}"),
    ]
    for key, ok, why in checks:
        if not ok:
            value = config.space.get("name") if key == "space.name" else _get(config, key)
            raise UsageError(f"config key {key!r}: {value!r} {why}")


def check_parts(micro_batches: int, batch_size: object, what: str = "space.batch_size") -> None:
    """Every micro-batch part must hold at least one sample: one line (exit 2) before any stage starts or any
    simulated task is priced. Here, torch-free, because the runtime (``space.batch_size``), the simulator and
    ``plan`` (the batch they simulate, which ``--batch`` may set) all ask it."""
    if isinstance(batch_size, int) and not isinstance(batch_size, bool) and micro_batches > batch_size:
        raise UsageError(f"micro_batches {micro_batches} exceeds {what} {batch_size}: a batch of {batch_size} "
                         f"cannot be split into {micro_batches} parts of at least one sample each")


def _finite(value: float) -> bool:
    return math.isfinite(value)


def _get(config: Config, key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        node = getattr(node, part)
    return node
