"""``naspipe calibrate``: fit a testbed spec to the paper's Exec column and cross-validate it.

Writes the fitted spec (a YAML hardware spec: every physical constant copied from ``--base``,
the two fitted keys marked with what they were fitted on and whether they are physical) and
``calibration.csv`` (every Table 2 row predicted under the NLP-only, CV-only and all-row
fits; the predictions are the simulator's own Exec on the fitted spec, not the linear model).
Both are written atomically, after everything has been checked and computed.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from naspipe.fsutil import atomic_write_text, check_creatable

if TYPE_CHECKING:
    from naspipe.sim.calibrate import Fit
    from naspipe.sim.hardware import Hardware

FITTED_NAME = "rtx2080ti-paper-fit"
DEFAULT_SPEC = Path("config/hardware") / f"{FITTED_NAME}.yaml"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "calibrate",
        description="Fit a hardware spec's per-task overhead and compute efficiency to the paper's Table 2 Exec "
        "column (NLP and CV rows, cross-validated), keeping its physical constants; write the spec and a table.",
    )
    p.add_argument("--base", default="rtx2080ti-pcie3-40gbe", help="spec whose physical constants are kept")
    p.add_argument("--reading", default="slot", choices=["slot", "summed"],
                   help="what Exec is: a subnet's time on one stage ('slot', default) or over all stages")
    p.add_argument("--steps", type=int, default=32, help="subnets per probe run (default 32)")
    p.add_argument("--systems", default="csp,pipedream,gpipe,vpipe",
                   help="Table 2 systems whose rows are fitted and predicted (default all four)")
    p.add_argument("--spec-out", type=Path, required=True,
                   help=f"fitted spec YAML to write (the shipped one: {DEFAULT_SPEC})")
    p.add_argument("--table", type=Path, default=None, help="calibration.csv to write (default: none)")
    return p


def run(args: argparse.Namespace) -> int:
    from naspipe.errors import UsageError
    from naspipe.sim import calibrate as cal
    from naspipe.sim.hardware import load_hardware
    from naspipe.sim.paper import SYSTEMS, TABLE2

    if args.steps < 1:
        raise UsageError(f"--steps {args.steps}: must be >= 1")
    systems = [s for s in args.systems.split(",") if s]
    if not systems or set(systems) - set(SYSTEMS):
        raise UsageError(f"--systems {args.systems!r}: each must be one of {', '.join(SYSTEMS)}")
    base = load_hardware(args.base)
    for path, flag in ((args.spec_out, "--spec-out"), (args.table, "--table")):
        if path is not None:
            check_creatable(path, flag)
    simulate = cal.row_simulator(args.steps, args.reading)
    features = [cal.probe(row, base, simulate) for row in TABLE2 if row.system in systems]
    by_fit = cal.fits(features)
    rows = cal.table_rows(features, by_fit,
                          lambda feat, f: simulate(feat.row, cal.fitted_hardware(base, f, FITTED_NAME)))
    report(by_fit, rows)
    report_work(cal.family_work_ratios(systems))
    if not by_fit["all"].physical:
        raise UsageError(f"calibrate --reading {args.reading}: fitted compute_efficiency "
                         f"{by_fit['all'].compute_efficiency:.3g} is above 1 (faster than the GPU's peak FLOP/s), "
                         "not a physical spec; nothing written")
    spec = render_spec(base, by_fit, cal.held_out_max_error(rows), args.reading, args.base, ",".join(systems))
    if args.table is not None:
        write_csv(args.table, rows)
    atomic_write_text(args.spec_out, spec)
    return 0


def report(by_fit: dict[str, Fit], rows: list[dict[str, object]]) -> None:
    """One line per fit, then the held-out errors of the cross-validation."""
    import pandas as pd

    for name, f in by_fit.items():
        print(f"fit {name}: task_overhead_s={f.task_overhead_s:.4g} compute_efficiency={f.compute_efficiency:.4g} "
              f"(max error on its {f.rows} rows {f.max_rel_error:.1%}{'' if f.physical else ', NOT physical'})")
    table = pd.DataFrame(rows)
    held = table[(table.fitted_on != "all") & (table.fitted_on != table.space_family)]
    for name, group in held.groupby("fitted_on"):
        err = group.rel_error.abs()
        print(f"held out under the {name} fit ({len(err)} rows): median |error| {err.median():.1%}, "
              f"max {err.max():.1%}, within 10%: {int((err <= 0.10).sum())}/{len(err)}")
        misses = group[err > 0.10].sort_values("rel_error", key=abs, ascending=False)
        if not misses.empty:
            print("  beyond 10%: " + ", ".join(f"{r.space} {r.system} {r.rel_error:+.1%}"
                                                for r in misses.itertuples()))


def report_work(w: dict[str, float]) -> None:
    """The number the cross-validation hinges on: CV's per-sample cost over NLP's, testbed vs presets."""
    print(f"per sample, cv over nlp: paper's testbed {w['testbed']:.2f}x (Exec slopes {w['cv_slope_s'] * 1e3:.2f} vs "
          f"{w['nlp_slope_s'] * 1e3:.2f} ms per slot), presets {w['presets']:.2f}x (forward "
          f"{w['cv_macs'] / 1e9:.1f} vs {w['nlp_macs'] / 1e9:.1f} GMAC per sample)")


def write_csv(path: Path, rows: list[dict[str, object]]) -> None:
    import pandas as pd

    atomic_write_text(path, pd.DataFrame(rows).to_csv(index=False, float_format="%.6g"))


def render_spec(base: Hardware, by_fit: dict[str, Fit], held_out: dict[str, float], reading: str,
                base_name: str, systems: str) -> str:
    """The fitted spec: ``base``'s keys in order; the two fitted ones carry where they came from."""
    f = by_fit["all"]
    cross = ", ".join(f"fit on {k} -> max held-out error {v:.1%}" for k, v in held_out.items())
    lines = [
        f"# The paper's testbed fitted to its own measurements: `naspipe calibrate --base {base_name} "
        f"--reading {reading} --systems {systems}`.",
        f"# Physical constants (FLOP/s, bandwidths, latencies, memory) are {base_name}'s; two keys are FITTED",
        f"# by least squares on relative error to the {f.rows} rows of Table 2's Exec column (NLP and",
        f"# CV, 8 stages, reading '{reading}'; max error {f.max_rel_error:.1%}). Cross-validation: {cross}.",
        "# See docs/calibration.md. Generated: do not edit by hand.",
    ]
    for key, value in base.spec().items():
        note = ""
        if key == "name":
            value = FITTED_NAME
        elif key == "task_overhead_s":
            value = f.task_overhead_s
            note = "  # FITTED (Table 2 Exec, the fixed cost of each task): " + (
                "physical (a launch and bookkeeping cost)" if f.overhead_physical else
                "NOT physical for a GPU (launches cost ~1e-5 s): the paper's runtime's own per-task cost")
        elif key == "compute_efficiency":
            value = f.compute_efficiency
            note = ("  # FITTED (Table 2 Exec, per-sample cost): " + (
                "physical (a fraction of peak FLOP/s)" if f.physical else "NOT physical (above peak FLOP/s)"))
        lines.append(f"{key}: {_yaml_value(value)}{note}")
    return "\n".join(lines) + "\n"


def _yaml_value(value: object) -> str:
    """One scalar as YAML reads it back (``1e-05`` alone would be a string to YAML 1.1)."""
    import yaml

    return str(yaml.safe_dump(value, default_flow_style=True)).removesuffix("\n...\n").strip()
