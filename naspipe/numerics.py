"""CPU numerics: ``native`` (the machine's own kernels) or ``portable`` (one set of bits on every x86-64 CPU with AVX2).

Why: torch's CPU kernels are picked at run time by instruction set, and MKL's also by CPU vendor, and
kernels of different vector widths add in different orders, so the same code trains other bits on an
AVX-512 machine than on an AVX2 one. ``portable`` pins the three libraries that choose, one variable each,
each necessary (on an AVX-512 machine each changes some operation's bits: ``benchmarks/numerics_probe.py``):

- ``ATEN_CPU_CAPABILITY=avx2``: ATen's own vectorised kernels (softmax, norms, element-wise ops);
- ``MKL_CBWR=COMPATIBLE``: MKL's matrix products on its one code path that MKL promises to run the same on
  Intel and non-Intel CPUs (its AVX2 branch is Intel-only: on another vendor MKL falls back to its automatic
  branch, which gave other bits on AMD than the AVX2 branch on Intel; docs/numerics.md);
- ``ONEDNN_MAX_CPU_ISA=AVX2``: oneDNN's convolutions.

The libraries read these variables once, when they first run, so they must be in the environment before
torch loads: :func:`apply` sets them (or, for ``native``, removes them) and refuses once torch is loaded
with other values; :func:`check_loaded` confirms in a stage process what torch actually picked. This module
does not import torch.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

from naspipe.errors import UsageError

MODES = ("native", "portable")
PORTABLE_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "AVX2"}
# what torch reports (torch.backends.cpu.get_cpu_capability) once ATEN_CPU_CAPABILITY=avx2 took effect
PORTABLE_CAPABILITY = "AVX2"


def environment(mode: str) -> dict[str, str | None]:
    """The pins of ``mode``: variable -> value, or None for a variable that must be unset (``native``)."""
    check_mode(mode)
    return {name: (value if mode == "portable" else None) for name, value in PORTABLE_ENV.items()}


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise UsageError(f"config key 'numerics': {mode!r} is not one of {', '.join(MODES)}")


def in_effect(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment holds exactly ``portable``'s pins (None: this process's)."""
    env = os.environ if environ is None else environ
    return all(env.get(name) == value for name, value in PORTABLE_ENV.items())


def mode_of(environ: Mapping[str, str] | None = None) -> str:
    """``portable`` when every pin is set, ``native`` when none is; a partial set is neither (UsageError)."""
    env = os.environ if environ is None else environ
    if in_effect(env):
        return "portable"
    if not any(name in env for name in PORTABLE_ENV):
        return "native"
    found = ", ".join(f"{n}={env[n]}" for n in PORTABLE_ENV if n in env)
    raise UsageError(f"the environment sets {found}: neither numerics mode (portable sets "
                     f"{shell_assignments('portable')}, native none of them); unset them or set them all")


def apply(mode: str, environ: MutableMapping[str, str] | None = None) -> None:
    """Set ``mode``'s pins in this process's environment (inherited by every process it starts: the
    forkserver, the stages), before torch loads. Once torch is loaded the kernels are chosen: then the
    environment must already be ``mode``'s, or this refuses in one line."""
    env = os.environ if environ is None else environ
    wanted = environment(mode)
    if "torch" in sys.modules and any(env.get(name) != value for name, value in wanted.items()):
        raise UsageError(f"config key 'numerics': {mode} must be set before torch loads, and this process "
                         f"loaded it with other kernels; run it as a new process, or start it with "
                         f"{shell_assignments(mode) or 'none of ' + ', '.join(PORTABLE_ENV)} in the environment")
    for name, value in wanted.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value


def shell_assignments(mode: str) -> str:
    """``NAME=value ...`` of ``mode`` (empty for ``native``), for messages and docs."""
    return " ".join(f"{n}={v}" for n, v in environment(mode).items() if v is not None)


def shell_prefix(mode: str) -> str:
    """A shell line that puts ``mode``'s pins in a job's environment: every workflow job, whatever it runs."""
    if mode == "portable":
        return f"export {shell_assignments(mode)}; "
    return f"unset {' '.join(PORTABLE_ENV)}; "


def check_loaded(mode: str) -> None:
    """In a process that has loaded torch: the kernels it picked are ``mode``'s (the environment was set in
    time). A CPU without AVX2 cannot run ``portable``'s kernels: torch falls back and says so here."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    if mode == "portable" and (not in_effect() or capability != PORTABLE_CAPABILITY):
        raise UsageError(f"config key 'numerics': portable needs an x86-64 CPU with AVX2 and its pins set before "
                         f"torch loads ({shell_assignments('portable')}); this process runs {capability} kernels "
                         f"on {platform.machine()} with {_pins_now()}")
    if mode == "native" and any(name in os.environ for name in PORTABLE_ENV):
        raise UsageError(f"config key 'numerics': native, but this process was started with {_pins_now()}")


def _pins_now() -> str:
    found = [f"{n}={os.environ[n]}" for n in PORTABLE_ENV if n in os.environ]
    return ", ".join(found) or "no pins"


def cpu_field(name: str) -> str | None:
    """The first ``name`` line of ``/proc/cpuinfo`` (``model name``, ``vendor_id``), None where there is none."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith(name):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def describe(mode: str) -> dict[str, Any]:
    """What a run records (metrics.json ``numerics``): the mode and the kernels it ran on."""
    import torch

    return {"mode": mode, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "vendor": cpu_field("vendor_id") or platform.machine(), "torch": torch.__version__,
            "pins": {n: os.environ[n] for n in PORTABLE_ENV if n in os.environ}}
