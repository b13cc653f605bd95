"""Hardware specs for the simulator: ``config/hardware/NAME.yaml`` or any YAML file.

A spec names what prices a run that the scheduling core does not: compute speed, memory
sizes and the bandwidth and latency of every link a pipeline uses (host-device copies,
GPU to GPU inside a host, the network between hosts). Stage ``k`` runs on GPU ``k`` and
host ``k // gpus_per_host``, the placement the paper's testbed used. Every key is required and
checked on load, so a typo is one line naming the file and key, never a silent default.

Some keys describe the runtime on that machine rather than its silicon, because on a CPU
host they are as large as the kernels (``benchmarks/bench_sim.py --fit`` measures them):

- ``task_overhead_s``: per forward or backward task, inside its span (busy): the worker's
  Python around the profiled kernels (per-layer autograd units, the batch on stage 0, the
  loss on the last).
- ``update_overhead_s``: the same for an optimizer step, which has none of that (measured on
  cpu-local: 0.2 ms against 0.4-0.6 ms).
- ``task_gap_s``: per task, outside any span (idle): policy, drain, bookkeeping.
- ``run_overhead_s``: once per run, inside the measured makespan: start-up before the first
  task and the final log sync and goodbye after the last.
- ``copy_overhead_s``: per host-device copy call, on top of bytes / bandwidth.
- ``stash_overhead_s``: per layer of a weight-stashing system's forward, for running it on
  parameter clones (beyond the clone's bytes; :mod:`naspipe.sim.costs`).
- ``blocking_send``: a send holds its sender (gloo on CPU) for ``send_overhead_s`` plus
  bytes / bandwidth, plus, when the receiving process is computing, up to
  ``receiver_busy_s`` more (its receive thread may wait for the interpreter lock, which a busy
  process yields at the latest after Python's switch interval; on cpu-local, measured with
  ``bench_sim.py --fit``, such sends take no longer, so it is ~0); the message reaches the receiver's
  policy ``*_latency`` after the send began (or when the send ends, if later), the latency running
  only while the receiver neither computes nor sends (taking a message in needs the receiving
  process, :meth:`naspipe.sim.engine._Engine._blocking_send`). Without it,
  sends overlap compute on a communication stream and the link serialises them.

``flops`` is the peak of each precision the runtime offers (config key ``precision``,
:mod:`naspipe.precision`): a number is fp32's alone (TF32 off), a mapping names each precision the
hardware runs, fp32 first (``{fp32: 67.0e+12, tf32: 494.0e+12, bf16: 989.0e+12}`` on an H100). A
simulated run prices its compute at its own precision's rate (:meth:`Hardware.at_precision`); analytic
costs at a precision the spec does not list are refused, naming the spec and what it lists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from naspipe import precision as precisions
from naspipe.errors import UsageError
from naspipe.yamlio import read_yaml

HARDWARE_DIR = Path(__file__).resolve().parents[2] / "config" / "hardware"


@dataclass(frozen=True)
class Hardware:
    """One machine type; byte counts in bytes, speeds in FLOP/s and bytes/s, latencies in seconds."""

    name: str
    gpus_per_host: int
    hosts: int
    flops: float
    compute_efficiency: float
    device_memory: float
    device_reserved: float
    memory_bandwidth: float
    host_memory: float
    host_device_bandwidth: float
    intra_host_bandwidth: float
    intra_host_latency: float
    network_bandwidth: float
    network_latency: float
    task_overhead_s: float  # per forward or backward inside its span, beyond the profiled kernels
    update_overhead_s: float  # per optimizer step inside its span, beyond the profiled kernels
    task_gap_s: float  # per task outside any span (idle): the worker's scheduling and bookkeeping
    run_overhead_s: float  # once per run inside the makespan: start-up and shutdown
    copy_overhead_s: float  # per host-device copy call, beyond bytes / bandwidth
    stash_overhead_s: float  # per layer of a weight-stashing forward (functional_call on clones)
    blocking_send: bool  # a send holds the sender (gloo on CPU); else it overlaps compute
    send_overhead_s: float  # blocking sends: the hold when the receiver is idle, beyond bytes / bandwidth
    receiver_busy_s: float  # blocking sends: the most a computing receiver adds to the hold
    other_flops: tuple[tuple[str, float], ...] = ()  # peaks of the other precisions (``flops`` as a mapping)
    precision: str = "fp32"  # the precision priced (:meth:`at_precision`; not a spec key)

    @property
    def peak_flops(self) -> float:
        """Peak FLOP/s at the priced precision; a UsageError if the spec lists none for it."""
        if self.precision == "fp32":
            return self.flops
        rates = dict(self.other_flops)
        if self.precision not in rates:
            raise UsageError(f"hardware {self.name}: no FLOP/s for precision {self.precision!r} (its key 'flops' "
                             f"lists {', '.join(['fp32', *rates])})")
        return rates[self.precision]

    @property
    def effective_flops(self) -> float:
        return self.peak_flops * self.compute_efficiency

    def at_precision(self, name: str) -> Hardware:
        """This machine pricing compute at precision ``name`` (checked when a rate is read)."""
        precisions.get(name)
        return self if name == self.precision else replace(self, precision=name)

    def spec(self) -> dict[str, Any]:
        """The spec's keys and values as its YAML writes them (``flops`` a mapping when it lists several)."""
        values: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _DERIVED}
        if self.other_flops:
            values["flops"] = {"fp32": self.flops, **dict(self.other_flops)}
        return values

    @property
    def usable_device_memory(self) -> float:
        return self.device_memory - self.device_reserved

    def host_of(self, stage: int) -> int:
        return stage // self.gpus_per_host

    def transfer_s(self, src: int, dst: int, nbytes: float) -> float:
        """Seconds to send ``nbytes`` from stage ``src``'s GPU to stage ``dst``'s."""
        if self.host_of(src) == self.host_of(dst):
            return self.intra_host_latency + nbytes / self.intra_host_bandwidth
        return self.network_latency + nbytes / self.network_bandwidth

    def copy_s(self, nbytes: float) -> float:
        """Seconds to copy ``nbytes`` between host and device memory (one copy call)."""
        return self.copy_overhead_s + nbytes / self.host_device_bandwidth

    def send_hold_s(self, src: int, dst: int, nbytes: float, receiver_busy_for: float) -> float:
        """How long a blocking send holds stage ``src``; ``receiver_busy_for``: how much longer
        ``dst`` computes (0 when idle or itself sending, which releases the interpreter lock)."""
        bandwidth = self.intra_host_bandwidth if self.host_of(src) == self.host_of(dst) else self.network_bandwidth
        return self.send_overhead_s + nbytes / bandwidth + min(self.receiver_busy_s, max(receiver_busy_for, 0.0))


_DERIVED = {"other_flops", "precision"}  # fields that are no spec key
_INTS = {"gpus_per_host", "hosts"}
_FRACTIONS = {"compute_efficiency"}
_NON_NEGATIVE = {"device_reserved", "intra_host_latency", "network_latency", "task_overhead_s", "update_overhead_s",
                 "task_gap_s",
                 "run_overhead_s", "copy_overhead_s", "stash_overhead_s", "send_overhead_s", "receiver_busy_s"}


def hardware_names() -> list[str]:
    return sorted(p.stem for p in HARDWARE_DIR.glob("*.yaml"))


def load_hardware(spec: str) -> Hardware:
    """A shipped spec by name, or a YAML file by path; UsageError naming the file and key."""
    path = Path(spec)
    if not path.suffix:
        path = HARDWARE_DIR / f"{spec}.yaml"
        if not path.is_file():
            raise UsageError(f"--hardware {spec!r}: no such spec; choose one of {', '.join(hardware_names())} "
                             "or give a YAML file")
    data = read_yaml(path, f"hardware spec {path}")  # binary, invalid or duplicate keys: one line
    return parse_hardware(data, str(path))


def parse_hardware(data: Any, where: str) -> Hardware:
    if not isinstance(data, dict):
        raise UsageError(f"{where}: a hardware spec must be a mapping of keys")
    names = [f.name for f in fields(Hardware) if f.name not in _DERIVED]
    for key in data:
        if key not in names:
            raise UsageError(f"{where}: unknown key {key!r}; keys are {', '.join(names)}")
    values: dict[str, Any] = {}
    for key in names:
        if key not in data:
            raise UsageError(f"{where}: missing key {key!r}")
        if key == "flops" and isinstance(data[key], dict):
            values["flops"], values["other_flops"] = _precision_flops(where, data[key])
            continue
        values[key] = _check(where, key, data[key])
    if values["device_reserved"] >= values["device_memory"]:
        raise UsageError(f"{where}: key 'device_reserved' ({values['device_reserved']!r}) must be below "
                         f"'device_memory' ({values['device_memory']!r}): no memory would be left to use")
    return Hardware(**values)


def _precision_flops(where: str, rates: dict[Any, Any]) -> tuple[float, tuple[tuple[str, float], ...]]:
    """``flops`` as a mapping: fp32's peak and the others', each a number > 0 under a known precision."""
    for name in rates:
        if name not in precisions.NAMES:
            raise UsageError(f"{where}: key 'flops': unknown precision {name!r}; precisions are "
                             f"{', '.join(precisions.NAMES)}")
    if "fp32" not in rates:
        raise UsageError(f"{where}: key 'flops' must give fp32's peak (every run can be asked for fp32)")
    checked = {name: _check(where, f"flops.{name}", rate) for name, rate in rates.items()}
    return checked.pop("fp32"), tuple((name, checked[name]) for name in precisions.NAMES if name in checked)


def _check(where: str, key: str, value: Any) -> Any:
    if key == "blocking_send":
        if not isinstance(value, bool):
            raise UsageError(f"{where}: key 'blocking_send' must be true or false, got {value!r}")
        return value
    if key == "name":
        if not isinstance(value, str) or not value:
            raise UsageError(f"{where}: key 'name' must be a non-empty string, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UsageError(f"{where}: key {key!r} must be a number, got {value!r}")
    if key in _INTS:
        if not isinstance(value, int) or value < 1:
            raise UsageError(f"{where}: key {key!r} must be a positive integer, got {value!r}")
        return value
    if key in _FRACTIONS and not 0 < value <= 1:
        raise UsageError(f"{where}: key {key!r} must be in (0, 1], got {value!r}")
    if key in _NON_NEGATIVE:
        if value < 0:
            raise UsageError(f"{where}: key {key!r} must be >= 0, got {value!r}")
    elif value <= 0:
        raise UsageError(f"{where}: key {key!r} must be > 0, got {value!r}")
    return float(value)
