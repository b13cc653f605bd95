"""A testbed fitted to the paper's own measurements: Table 2's Exec column as a function of the batch.

Table 2's "Exec." (seconds per subnet, bubble eliminated) is almost exactly ``a + c * batch``
within each family: a fixed cost per subnet plus a per-sample cost. The simulator's busy time
per subnet is linear in two hardware keys, the fixed cost of every forward and backward task
(``task_overhead_s``) and the inverse of the achieved fraction of peak FLOP/s
(``compute_efficiency``); the bandwidths, memory sizes and peak FLOP/s are physical constants
of the testbed and stay as its spec gives them. So three probe runs per row (the base spec
with those two keys moved) give the row's features exactly, and a least-squares fit on
relative error gives the two keys.

Reading of "Exec.": ``slot`` (default) is the time a subnet occupies one stage with the
bubbles removed, ``sum(busy) / (subnets x stages)``: the pipeline then completes one subnet
every Exec / (1 - bubble) seconds. ``summed`` is the simulator's own ``exec_s``
(``sum(busy) / subnets``, all stages added). Only the first gives a physical compute
efficiency on these spaces (see docs/calibration.md), which is why it is the default.

A system that fetches its layers synchronously right before each task (VPipe,
``swap_parameters``) has its copies inside its measured Exec: the paper's VPipe rows are
0.07-0.15 s above NASPipe's at the same batch. The simulator counts that wait as idle
(``swap_wait_s``, bytes over the spec's host-device bandwidth, summed over stages), so the
reading adds it back for those systems: no fitted constant, only the spec's PCIe bandwidth.

Cross-validation: fit on the NLP rows, predict the CV rows, and the reverse (plus a fit on all
rows, which is what the written spec uses).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from naspipe.errors import UsageError
from naspipe.sim.hardware import Hardware
from naspipe.sim.paper import TABLE2_STAGES, PaperRow

READINGS = ("slot", "summed")
FITS = ("nlp", "cv", "all")  # the rows each fit sees: one family, or every row
PROBE_OVERHEAD_S = 1e-3  # the task overhead of the second probe (exactly linear: any value works)
LAUNCH_BOUND_S = 1e-3  # a per-task cost above this is no kernel launch or copy setup a GPU pays


@dataclass(frozen=True)
class ExecFeatures:
    """A row's simulated Exec as ``task_overhead_s * tasks + kernel_s / compute_efficiency + fixed_s``."""

    row: PaperRow
    tasks: float  # tasks per subnet that pay the task overhead (per stage slot or summed)
    kernel_s: float  # kernel seconds at compute_efficiency 1
    fixed_s: float  # updates, stashes, update overheads, blocking swaps: priced by bandwidths, not fitted

    def predict(self, task_overhead_s: float, compute_efficiency: float) -> float:
        return task_overhead_s * self.tasks + self.kernel_s / compute_efficiency + self.fixed_s


@dataclass(frozen=True)
class Fit:
    """Fitted keys, the rows they were fitted on, and the relative errors on those rows."""

    fitted_on: str
    task_overhead_s: float
    compute_efficiency: float
    rows: int
    max_rel_error: float

    @property
    def physical(self) -> bool:
        """A compute efficiency above 1 is faster than the GPU's peak FLOP/s: not a property of the hardware."""
        return 0.0 < self.compute_efficiency <= 1.0

    @property
    def overhead_physical(self) -> bool:
        """A per-task cost of milliseconds or more is software (the paper's runtime), not the GPU."""
        return self.task_overhead_s <= LAUNCH_BOUND_S


Simulate = Callable[[PaperRow, Hardware], float]  # a row's simulated Exec on a spec (in the chosen reading)


def probe(row: PaperRow, base: Hardware, simulate: Simulate) -> ExecFeatures:
    """A row's features from three runs of the simulator (the model is linear in the two keys)."""
    zero = replace(base, task_overhead_s=0.0, compute_efficiency=1.0)
    e0 = simulate(row, zero)
    e_task = simulate(row, replace(zero, task_overhead_s=PROBE_OVERHEAD_S))
    e_half = simulate(row, replace(zero, compute_efficiency=0.5))
    kernel = e_half - e0
    return ExecFeatures(row, (e_task - e0) / PROBE_OVERHEAD_S, kernel, e0 - kernel)


def fit(features: Sequence[ExecFeatures], fitted_on: str) -> Fit:
    """Least squares on relative error over (task_overhead_s >= 0, 1 / compute_efficiency > 0)."""
    if not features:
        raise UsageError(f"calibration: no Table 2 rows to fit on for {fitted_on!r}")
    y = np.array([f.row.exec_s for f in features])
    a = np.array([[f.tasks, f.kernel_s] for f in features]) / y[:, None]
    b = (y - np.array([f.fixed_s for f in features])) / y
    (tau, inv_eff), *_ = np.linalg.lstsq(a, b, rcond=None)
    if tau < 0:  # no fixed cost at all fits better than a negative one
        tau, inv_eff = 0.0, float(a[:, 1] @ b / (a[:, 1] @ a[:, 1]))
    if inv_eff <= 0:
        raise UsageError(f"calibration on {fitted_on!r}: the Exec column falls with the batch; no positive "
                         "per-sample cost fits it")
    eff = 1.0 / float(inv_eff)
    errors = [abs(f.predict(float(tau), eff) - f.row.exec_s) / f.row.exec_s for f in features]
    return Fit(fitted_on, float(tau), eff, len(features), max(errors))


def fits(features: Sequence[ExecFeatures]) -> dict[str, Fit]:
    """The NLP-only, CV-only and all-row fits."""
    return {name: fit([f for f in features if name in ("all", f.row.family)], name) for name in FITS}


def fitted_hardware(base: Hardware, f: Fit, name: str) -> Hardware:
    """``base`` with the two fitted keys replaced (every physical constant as ``base`` gives it)."""
    return replace(base, name=name, task_overhead_s=f.task_overhead_s, compute_efficiency=f.compute_efficiency)


def table_rows(features: Sequence[ExecFeatures], by_fit: dict[str, Fit],
               simulated: Callable[[ExecFeatures, Fit], float]) -> list[dict[str, object]]:
    """calibration.csv: every row under every fit (held out where the fit saw neither its family nor all)."""
    out: list[dict[str, object]] = []
    for name, f in by_fit.items():
        for feat in features:
            r = feat.row
            predicted = simulated(feat, f)
            out.append({"space_family": r.family, "space": r.space, "system": r.system, "batch": r.batch,
                        "paper_exec_s": r.exec_s, "predicted_exec_s": predicted,
                        "rel_error": (predicted - r.exec_s) / r.exec_s, "fitted_on": name})
    return out


def held_out_max_error(rows: Sequence[dict[str, object]]) -> dict[str, float]:
    """Per fit, the largest |relative error| on the rows it was not fitted on."""
    worst: dict[str, float] = {}
    for r in rows:
        fitted_on, family = str(r["fitted_on"]), str(r["space_family"])
        if fitted_on not in ("all", family):
            err = abs(float(r["rel_error"]))  # type: ignore[arg-type]
            worst[fitted_on] = max(worst.get(fitted_on, 0.0), err)
    return worst


def blocking_swap_s(metrics: dict[str, object], system: str) -> float:
    """Seconds per subnet (all stages added) that ``system`` waits on synchronous parameter fetches.

    Zero for a system whose copies overlap its compute (NASPipe's prefetching context manager
    waits only on a miss, and the paper's Exec removes waiting); VPipe's fetch blocks its task.
    """
    from naspipe.scheduling.policies import POLICIES

    if not POLICIES[system].swap_parameters:
        return 0.0
    return float(metrics["swap_wait_s"]) / float(metrics["subnets"])  # type: ignore[arg-type]


def exec_of(metrics: dict[str, object], stages: int, reading: str, system: str) -> float:
    """A simulated run's Exec in ``reading`` (see the module docstring), blocking swaps included."""
    summed = float(metrics["exec_s"]) + blocking_swap_s(metrics, system)  # type: ignore[arg-type]
    return summed / stages if reading == "slot" else summed


def row_simulator(steps: int, reading: str) -> Simulate:
    """Simulate a Table 2 row as the paper ran it (8 stages, its batch) and read its Exec."""
    from naspipe.sim.scenario import Scenario, simulate_scenario

    if reading not in READINGS:
        raise UsageError(f"--reading {reading!r}: choose one of {', '.join(READINGS)}")

    def simulate(row: PaperRow, hardware: Hardware) -> float:
        s = Scenario(row.space, row.system, TABLE2_STAGES, row.batch, steps=steps)
        return exec_of(simulate_scenario(s, hardware), TABLE2_STAGES, reading, row.system)

    return simulate


# -- why one efficiency cannot fit both families: per-sample work, measured vs computed ---------------

FAMILY_PRESETS = {"nlp": ("nlp.c1", "nlp.c2", "nlp.c3"), "cv": ("cv.c1", "cv.c2", "cv.c3")}


def exec_line(rows: Sequence[PaperRow]) -> tuple[float, float]:
    """``(a, c)`` of the least-squares line ``Exec = a + c * batch`` through ``rows``.

    ``c`` is what a sample costs the paper's testbed per stage slot; the ratio of the two
    families' ``c`` is the per-sample work ratio any single compute efficiency must reproduce.
    """
    if len({r.batch for r in rows}) < 2:
        raise UsageError("calibration: an Exec line needs rows with at least two batch sizes")
    slope, intercept = np.polyfit([float(r.batch) for r in rows], [r.exec_s for r in rows], 1)
    return float(intercept), float(slope)


def forward_macs_per_sample(space_name: str) -> float:
    """Forward multiply-accumulates of one sample through an average subnet of a preset.

    Each position contributes the mean over its candidates (uniform sampling), from the
    space's own analytic ``layer_cost`` (``1 + batch * MACs``), so no layer is built.
    """
    from collections import defaultdict

    from naspipe.space import make_shape

    space = make_shape(space_name)
    s, batch = space.structure, space.options["batch_size"]
    by_position: dict[int, list[float]] = defaultdict(list)
    for layer in range(s.num_layers):
        by_position[s.position_of(layer)].append((space.layer_cost(layer) - 1.0) / batch)
    return sum(sum(costs) / len(costs) for costs in by_position.values())


def family_work_ratios(systems: Sequence[str]) -> dict[str, float]:
    """CV over NLP per sample: on the paper's testbed (Exec slopes) and in the presets (forward MACs).

    A system that fetches its layers synchronously (VPipe) has copies in its Exec, so its rows
    are left out of the slopes: they would measure PCIe traffic, not compute.
    """
    from naspipe.scheduling.policies import POLICIES
    from naspipe.sim.paper import TABLE2

    compute_only = [s for s in systems if not POLICIES[s].swap_parameters]
    slope = {fam: exec_line([r for r in TABLE2 if r.family == fam and r.system in compute_only])[1]
             for fam in FAMILY_PRESETS}
    macs = {fam: float(np.mean([forward_macs_per_sample(p) for p in presets]))
            for fam, presets in FAMILY_PRESETS.items()}
    return {"testbed": slope["cv"] / slope["nlp"], "presets": macs["cv"] / macs["nlp"],
            "nlp_slope_s": slope["nlp"], "cv_slope_s": slope["cv"],
            "nlp_macs": macs["nlp"], "cv_macs": macs["cv"]}
