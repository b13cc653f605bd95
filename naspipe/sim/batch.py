"""``naspipe simulate --batch best``: the batch, recomputation and cache with the highest simulated throughput.

``--batch max`` runs the largest batch that fits, which is not the fastest run: recomputing every
forward (what fits the big batch, and what the context manager needs) can cost more than the
batch gains (nlp.c1 on h100-nvlink-ib, csp with 16 micro-batches at 8 stages: 1060 samples/s with
the cache at the max batch, 1459 without cache or recomputation at its max batch of 176). The
search weighs each *setting* the system may choose:

- recomputation off and on, unless the system forces it (:func:`naspipe.runplan.rules.effective_recompute`);
- the device cache off and, when the config enables it, on: the cache only where it pays. The cache is
  weighed with recomputation only, as the config requires (without it every in-flight subnet's layers
  stay pinned by its saved activations, which the memory model does not price).

For each setting the memory model (:func:`naspipe.sim.run.memory_fit`, over the whole run's subnets)
gives its largest batch; a setting fits when that batch holds at least one sample per micro-batch and
the host holds its store. The first :data:`SAMPLE` subnets are simulated at that batch and at up to
:data:`HALVINGS` halvings below it (halving stops when it stops paying: a smaller batch is mostly
slower, and the cache's samples are the search's cost); the run is simulated in full at the fastest
candidate (the first of equals, in the order the candidates are tried: settings without recomputation, then without
the cache; larger batches first). Everything is the deterministic simulator, so the choice is too.
The setting is applied as the config keys ``recompute`` and ``cache.enabled`` and the setup rebuilt, so
the chosen run is exactly ``naspipe simulate --set recompute=R --set cache.enabled=C --batch B``
(with ``--partition-by costs`` the partition balances the chosen setting's compute). When no setting
fits, the config's own setting runs as ``--batch max`` would run it (one sample, one per part with
micro-batches; ``fits`` false).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from naspipe import systems
from naspipe.config import Config, config_from_dict
from naspipe.runplan import rules
from naspipe.sim.hardware import Hardware
from naspipe.sim.run import SimSetup, max_mode_batch, memory_fit, simulate_run
from naspipe.sim.setup import build_setup

SAMPLE = 64  # subnets simulated per candidate (as naspipe.plan.cost.SAMPLE prices a job's time)
HALVINGS = 2  # candidates per setting: its largest batch and this many halvings below it

__all__ = ["HALVINGS", "SAMPLE", "BatchChoice", "Setting", "candidate_batches", "choose_batch", "settings"]


@dataclass(frozen=True)
class Setting:
    """The config keys the search may change: ``recompute`` (as configured) and ``cache.enabled``."""

    recompute: bool
    cache: bool


@dataclass(frozen=True)
class BatchChoice:
    """The chosen run (its full setup at the chosen batch) and what metrics.json records of the search."""

    setup: SimSetup
    record: dict[str, Any]


def settings(config: Config) -> list[Setting]:
    """The settings ``config``'s system may run, in the order ties go: no recompute first, then no cache.
    A system that forces recomputation keeps the configured value (the force wins either way)."""
    forced = systems.get(config.system).recompute is not None
    recomputes = [config.recompute] if forced else [False, True]
    out = [Setting(r, False) for r in recomputes]
    if rules.uses_cache(config.system, config.cache) and any(recomputes):
        out.append(Setting(True, True))  # the cache needs recompute (config validation)
    return out


def setting_config(config: Config, setting: Setting) -> Config:
    """``config`` with the setting's keys, validated as ``--set`` would validate them."""
    data = config.to_dict()
    data["recompute"] = setting.recompute
    data["cache"] = {**data["cache"], "enabled": setting.cache}
    return config_from_dict(data)


def candidate_batches(fit: int, least: int) -> list[int]:
    """The batches tried for a setting whose largest batch is ``fit``: it and :data:`HALVINGS` halvings, none
    below ``least`` (one sample per micro-batch), largest first."""
    out: list[int] = []
    for halving in range(HALVINGS + 1):
        batch = fit >> halving
        if batch >= least and batch not in out:
            out.append(batch)
    return out


def choose_batch(config: Config, hardware: Hardware, costs_spec: str, partition_by: str) -> BatchChoice:
    """The fastest (batch, setting) that fits, by the simulated throughput of :data:`SAMPLE` subnets."""
    tried: list[dict[str, Any]] = []
    weighed: list[dict[str, Any]] = []
    best: tuple[float, SimSetup, dict[str, Any]] | None = None
    for setting in settings(config):
        setup = build_setup(setting_config(config, setting), hardware, costs_spec, partition_by)
        about, batches = _weigh(setup, setting, hardware)
        weighed.append(about)
        for batch, speed in _sample_setting(setup, batches):
            tried.append({"batch": batch, "recompute": about["recompute"], "cache": setting.cache,
                          "throughput_samples_s": speed})
            if best is None or speed > best[0]:
                best = (speed, replace(setup, batch=batch), tried[-1])
    if best is None:
        return _fallback(config, hardware, costs_spec, partition_by, weighed)
    _, setup, chosen = best
    return BatchChoice(setup, _record({k: chosen[k] for k in ("batch", "recompute", "cache")}, True, setup.subnets,
                                      weighed, tried))


def _fallback(config: Config, hardware: Hardware, costs_spec: str, partition_by: str,
              weighed: list[dict[str, Any]]) -> BatchChoice:
    """No setting fits: the config's own setting as ``--batch max`` runs it (one sample, or one per part), so the
    run still says how far it is from fitting (``device_bytes``, ``fits`` false) rather than failing."""
    setup = build_setup(config, hardware, costs_spec, partition_by)
    batch = max_mode_batch(memory_fit(setup).max_batch, setup.options)
    choice = {"batch": batch, "recompute": rules.effective_recompute(config.system, config.recompute),
              "cache": rules.uses_cache(config.system, config.cache)}
    return BatchChoice(replace(setup, batch=batch), _record(choice, False, setup.subnets, weighed, []))


def _weigh(setup: SimSetup, setting: Setting, hardware: Hardware) -> tuple[dict[str, Any], list[int]]:
    """What the memory model says of one setting, and its candidate batches (none when it does not fit)."""
    memory = memory_fit(setup)
    least = setup.options.micro_batches
    fits = memory.max_batch >= least and memory.host_bytes <= hardware.host_memory
    about = {"recompute": rules.effective_recompute(setup.system, setting.recompute), "cache": setting.cache,
             "max_batch": memory.max_batch, "host_bytes": memory.host_bytes, "fits": fits}
    return about, candidate_batches(memory.max_batch, least) if fits else []


def _sample_setting(setup: SimSetup, batches: list[int]) -> list[tuple[int, float]]:
    """Each batch's sample throughput, largest batch first, stopping at the first halving that is slower than
    the batch before it (a smaller batch mostly only adds per-task overhead; this keeps the search to about two
    samples per setting)."""
    out: list[tuple[int, float]] = []
    for batch in batches:
        out.append((batch, _sample_throughput(setup, batch)))
        if len(out) > 1 and out[-1][1] < out[-2][1]:
            break
    return out


def _sample_throughput(setup: SimSetup, batch: int) -> float:
    """Samples/s of the first :data:`SAMPLE` subnets at ``batch`` (untraced)."""
    sample = replace(setup, subnets=min(setup.subnets, SAMPLE), batch=batch, trace_max_events=0)
    metrics, _ = simulate_run(sample)
    return float(metrics["throughput_samples_s"])


def _record(choice: dict[str, Any], fits: bool, subnets: int, weighed: list[dict[str, Any]],
            tried: list[dict[str, Any]]) -> dict[str, Any]:
    """metrics.json's ``batch_search``: the choice, each setting's fit, and every candidate's sample speed."""
    return {**choice, "fits": fits, "sample_subnets": min(subnets, SAMPLE), "settings": weighed, "candidates": tried}
