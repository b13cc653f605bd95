"""Where the paper's speedup over GPipe comes from: the simulator with the artifact's factors applied one at a time.

Each step changes one thing and keeps the earlier ones, and both systems are simulated
side by side after it, so each row's ratio is NASPipe's throughput over GPipe's with every
factor up to that row applied:

- order -1, ``base-testbed``: the project's spec of the paper's testbed (before calibration),
  Table 2's batches, 8 stages, full CSP, samples/s;
- order 0, ``paper-fit``: the testbed calibrated on Table 2's Exec column
  (:mod:`naspipe.sim.calibrate`: its fixed cost per task is what makes GPipe's small batches
  expensive), otherwise the same;
- ``accounting``: the artifact's figure script, tokens/s with each system's sentences and
  dictionary (:mod:`naspipe.sim.accounting`);
- ``relaxed-check``: NASPipe with the artifact's dependency check
  (:mod:`naspipe.scheduling.policies.csp_artifact`);
- ``stages``: 4 stages, as the artifact's Figure 5 script runs (the paper's Table 2 is 8).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from naspipe.sim.accounting import Accounting, preset, throughputs
from naspipe.sim.hardware import Hardware
from naspipe.sim.scenario import Scenario, simulate_scenario


@dataclass(frozen=True)
class Setting:
    """Everything the factors change."""

    hardware: Hardware
    accounting: Accounting
    csp_system: str = "csp"
    stages: int = 8
    unit: str = "samples/s"


@dataclass(frozen=True)
class Factor:
    name: str
    description: str
    apply: Callable[[Setting], Setting]


def factors(fitted: Hardware) -> list[Factor]:
    """The steps after order -1, in order (order 0 is the calibrated testbed)."""
    return [
        Factor("paper-fit", "testbed calibrated on Table 2 Exec (fixed cost per task), Table 2 batches, 8 stages, "
               "full CSP, samples/s", lambda s: replace(s, hardware=fitted)),
        Factor("accounting", "the artifact's accounting: tokens/s, NLP sentences of 64 tokens for NASPipe and 8 for "
               "GPipe, and each build's dictionary (33,712 tokens for NASPipe, 10,004 for GPipe)",
               lambda s: replace(s, accounting=preset("artifact"), unit="tokens/s")),
        Factor("relaxed-check", "NASPipe with the artifact's dependency check (fixed block ranges per stage)",
               lambda s: replace(s, csp_system="csp-artifact")),
        Factor("stages", "4 stages, as the artifact's Figure 5 script runs", lambda s: replace(s, stages=4)),
    ]


def measure(space: str, setting: Setting, steps: int) -> tuple[float, float]:
    """(NASPipe, GPipe) throughput in ``setting.unit``, simulated side by side."""
    out = []
    for system in (setting.csp_system, "gpipe"):
        acc = setting.accounting
        s = Scenario(space, system, setting.stages, acc.batch(space, system), steps=steps,
                     space_options=acc.space_options(space, system))
        t = throughputs(simulate_scenario(s, setting.hardware), acc)
        out.append(t["tokens_s"] if setting.unit == "tokens/s" else t["samples_s"])
    return out[0], out[1]


def attribution_rows(space: str, base: Hardware, fitted: Hardware, steps: int) -> list[dict[str, object]]:
    """attribution.csv's rows for ``space``: order -1 (base testbed), 0 (calibrated), then one per factor."""
    setting = Setting(base, preset("paper"))
    steps_list = [Factor("base-testbed", f"the uncalibrated spec {base.name}, Table 2 batches, 8 stages, full CSP, "
                         "samples/s", lambda s: s), *factors(fitted)]
    rows: list[dict[str, object]] = []
    for order, factor in enumerate(steps_list, start=-1):
        setting = factor.apply(setting)
        csp, gpipe = measure(space, setting, steps)
        rows.append({"space": space, "order": order, "factor": factor.name, "description": factor.description,
                     "csp_throughput": csp, "gpipe_throughput": gpipe, "ratio": csp / gpipe, "unit": setting.unit})
    return rows
