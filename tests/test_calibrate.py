"""The calibration fit recovers known constants, and its spec is what the simulator then measures."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from naspipe.cli import main
from naspipe.sim import calibrate as cal
from naspipe.sim.hardware import load_hardware, parse_hardware
from naspipe.sim.paper import TABLE2, PaperRow

BASE = load_hardware("rtx2080ti-pcie3-40gbe")


def synthetic_simulator(tau: float, eff: float):
    """A stand-in testbed whose Exec is linear in the two keys with row-dependent features; paper rows
    regenerated from (tau, eff) so that the fit must find exactly those."""

    def features(row: PaperRow) -> tuple[float, float, float]:
        tasks = 2.0 if row.system != "pipedream" else 2.5
        swap = 0.05 if row.system == "vpipe" else 0.0  # blocking fetches: priced by bandwidth, not fitted
        return tasks, 1e-3 * row.batch * (2.0 if row.family == "cv" else 1.0), 1e-4 * row.batch + swap

    def simulate(row: PaperRow, hw) -> float:
        t, k, f = features(row)
        return hw.task_overhead_s * t + k / hw.compute_efficiency + f

    rows = [replace(r, exec_s=simulate(r, replace(BASE, task_overhead_s=tau, compute_efficiency=eff)))
            for r in TABLE2]
    return simulate, rows


@pytest.mark.parametrize(("tau", "eff"), [(0.2, 0.3), (0.0, 0.9), (1e-5, 0.05), (0.45, 0.6), (0.023, 1.0)])
def test_fit_recovers_known_constants_from_a_synthetic_table(tau, eff):
    simulate, rows = synthetic_simulator(tau, eff)
    features = [cal.probe(r, BASE, simulate) for r in rows]
    by_fit = cal.fits(features)
    for name, f in by_fit.items():
        assert f.task_overhead_s == pytest.approx(tau, rel=1e-9, abs=1e-12), name
        assert f.compute_efficiency == pytest.approx(eff, rel=1e-9), name
        assert f.max_rel_error < 1e-9
    rows_out = cal.table_rows(features, by_fit, lambda feat, f: feat.predict(f.task_overhead_s,
                                                                             f.compute_efficiency))
    assert len(rows_out) == 3 * len(TABLE2)
    assert all(abs(r["rel_error"]) < 1e-9 for r in rows_out)
    assert set(cal.held_out_max_error(rows_out)) == {"nlp", "cv"}  # 'all' holds nothing out


def test_fit_with_noise_stays_close_and_reports_its_error():
    simulate, rows = synthetic_simulator(0.2, 0.3)
    noisy = [replace(r, exec_s=r.exec_s * (1.03 if i % 2 else 0.97)) for i, r in enumerate(rows)]
    f = cal.fit([cal.probe(r, BASE, simulate) for r in noisy], "all")
    assert f.task_overhead_s == pytest.approx(0.2, rel=0.1)
    assert f.compute_efficiency == pytest.approx(0.3, rel=0.1)
    assert 0.02 < f.max_rel_error < 0.06


def test_fit_flags_values_that_are_not_physical():
    simulate, rows = synthetic_simulator(0.05, 2.0)
    f = cal.fit([cal.probe(r, BASE, simulate) for r in rows], "all")
    assert f.compute_efficiency == pytest.approx(2.0) and not f.physical and not f.overhead_physical
    simulate, rows = synthetic_simulator(2e-5, 0.4)
    f = cal.fit([cal.probe(r, BASE, simulate) for r in rows], "all")
    assert f.physical and f.overhead_physical


def test_fit_recovers_a_spec_through_the_real_simulator():
    """Paper rows replaced by what the simulator measures on a known spec: the fit gives that spec back."""
    truth = replace(BASE, task_overhead_s=0.05, compute_efficiency=0.25)
    simulate = cal.row_simulator(steps=4, reading="slot")
    picked = [r for r in TABLE2 if r.space == "cv.c3" and r.system in ("gpipe", "csp", "pipedream")]
    rows = [replace(r, exec_s=simulate(r, truth)) for r in picked]
    f = cal.fit([cal.probe(r, BASE, simulate) for r in rows], "all")
    assert f.task_overhead_s == pytest.approx(0.05, rel=1e-6)
    assert f.compute_efficiency == pytest.approx(0.25, rel=1e-6)


def test_exec_holds_the_blocking_swaps_of_vpipe_only():
    """VPipe's synchronous fetches are inside its measured Exec; NASPipe's prefetched copies are not."""
    metrics: dict[str, object] = {"exec_s": 8.0, "swap_wait_s": 3.2, "subnets": 16}
    assert cal.blocking_swap_s(metrics, "vpipe") == pytest.approx(0.2)
    assert cal.exec_of(metrics, 8, "slot", "vpipe") == pytest.approx(8.2 / 8)
    assert cal.exec_of(metrics, 8, "summed", "vpipe") == pytest.approx(8.2)
    for system in ("csp", "gpipe", "pipedream"):
        assert cal.blocking_swap_s(metrics, system) == 0.0
        assert cal.exec_of(metrics, 8, "slot", system) == pytest.approx(1.0)


def test_vpipe_exec_through_the_simulator_is_its_busy_time_plus_its_fetches_at_pcie_bandwidth():
    from naspipe.sim.scenario import Scenario, simulate_scenario

    m = simulate_scenario(Scenario("cv.c3", "vpipe", 4, 8, steps=4), BASE)
    fetch_s = float(m["swap_bytes"]) / BASE.host_device_bandwidth / m["subnets"]
    assert float(m["swap_bytes"]) > 0
    assert cal.blocking_swap_s(m, "vpipe") == pytest.approx(fetch_s, rel=0.05)
    assert cal.exec_of(m, 4, "summed", "vpipe") == pytest.approx(float(m["exec_s"]) + fetch_s, rel=0.01)


def test_the_report_names_the_held_out_rows_beyond_10_percent(capsys):
    from naspipe.commands.calibrate import report

    simulate, rows = synthetic_simulator(0.2, 0.3)
    features = [cal.probe(r, BASE, simulate) for r in rows]
    by_fit = cal.fits(features)
    off = {("cv.c3", "pipedream"): 1.15, ("nlp.c2", "csp"): 0.92}  # two held-out rows, one beyond 10%
    table = cal.table_rows(features, by_fit, lambda feat, f: feat.row.exec_s * off.get(
        (feat.row.space, feat.row.system), 1.0))
    report(by_fit, table)
    out = capsys.readouterr().out
    assert "held out under the nlp fit (12 rows): median |error| 0.0%, max 15.0%, within 10%: 11/12" in out
    assert "beyond 10%: cv.c3 pipedream +15.0%" in out
    assert "within 10%: 12/12" in out and out.count("beyond 10%") == 1


def test_the_shipped_spec_keeps_the_physical_constants_and_marks_the_fitted_ones():
    from naspipe.sim.hardware import HARDWARE_DIR

    path = HARDWARE_DIR / "rtx2080ti-paper-fit.yaml"
    text = path.read_text()
    spec = parse_hardware(yaml.safe_load(text), str(path))
    for key in ("flops", "device_memory", "memory_bandwidth", "host_device_bandwidth", "intra_host_bandwidth",
                "network_bandwidth", "network_latency", "host_memory"):
        assert getattr(spec, key) == getattr(BASE, key), key
    fitted = [line for line in text.splitlines() if "# FITTED" in line and not line.startswith("#")]
    assert [line.split(":")[0] for line in fitted] == ["compute_efficiency", "task_overhead_s"]
    assert "Cross-validation" in text and spec.compute_efficiency <= 1


@pytest.mark.parametrize(("args", "expect"), [
    (["--steps", "0"], "--steps 0"),
    (["--base", "no-such-spec"], "no-such-spec"),
    (["--systems", "csp,gpipe,tpu"], "--systems"),
    (["--reading", "summed", "--steps", "2"], "not a physical spec"),
])
def test_bad_calibration_input_is_one_line_and_writes_nothing(tmp_path, capsys, args, expect):
    out, table = tmp_path / "fit.yaml", tmp_path / "cal.csv"
    assert main(["calibrate", *args, "--spec-out", str(out), "--table", str(table)]) == 2
    err = capsys.readouterr().err.strip()
    assert expect in err and len(err.splitlines()) == 1
    assert not out.exists() and not table.exists()


@pytest.mark.slow  # 144 simulated runs: ~20 CPU s, over a minute on the shared machine
def test_the_shipped_spec_is_what_calibrate_writes(tmp_path, capsys):
    """config/hardware/rtx2080ti-paper-fit.yaml is generated; regenerating it gives the same file."""
    from naspipe.sim.hardware import HARDWARE_DIR

    out, table = tmp_path / "fit.yaml", tmp_path / "calibration.csv"
    assert main(["calibrate", "--spec-out", str(out), "--table", str(table)]) == 0
    assert out.read_text() == (HARDWARE_DIR / "rtx2080ti-paper-fit.yaml").read_text()
    import pandas as pd

    rows = pd.read_csv(table)
    assert list(rows.columns) == ["space_family", "space", "system", "batch", "paper_exec_s", "predicted_exec_s",
                                  "rel_error", "fitted_on"]
    assert len(rows) == 3 * len(TABLE2) and set(rows.fitted_on) == {"nlp", "cv", "all"}
    assert "held out under the nlp fit" in capsys.readouterr().out


def test_exec_line_recovers_a_known_intercept_and_slope():
    rows = [PaperRow("nlp.c1", "csp", b, 0.4 + 0.004 * b, 0.5) for b in (16, 32, 192)]
    a, c = cal.exec_line(rows)
    assert a == pytest.approx(0.4) and c == pytest.approx(0.004)


def test_exec_line_refuses_a_single_batch_size():
    from naspipe.errors import UsageError

    with pytest.raises(UsageError, match="two batch sizes"):
        cal.exec_line([PaperRow("cv.c1", "csp", 64, 0.87, 0.4), PaperRow("cv.c2", "csp", 64, 0.86, 0.5)])


def test_forward_macs_per_sample_is_the_mean_candidate_per_position_summed():
    """Checked against the space's layer costs, position by position (uniform sampling)."""
    from collections import defaultdict

    from naspipe.space import make_space

    space = make_space("nlp.tiny")
    s, b = space.structure, space.options["batch_size"]
    per: dict[int, list[float]] = defaultdict(list)
    for lid in range(s.num_layers):
        per[s.position_of(lid)].append((space.layer_cost(lid) - 1) / b)
    assert len(per) == len(s.blocks) + 2  # embedding, blocks, output
    assert cal.forward_macs_per_sample("nlp.tiny") == pytest.approx(sum(sum(v) / len(v) for v in per.values()))


def test_the_nlp_presets_compute_is_pinned_by_their_parameters():
    """Every NLP op is dense over the 64-token sentence: ~65 forward MACs per block parameter of a subnet, so a
    preset sized to the paper's Para. has its per-sentence compute fixed too (docs/calibration.md)."""
    from collections import defaultdict

    from naspipe.space import make_space

    space = make_space("nlp.c1")
    s, b = space.structure, space.options["batch_size"]
    macs: dict[int, list[float]] = defaultdict(list)
    params: dict[int, list[float]] = defaultdict(list)
    for lid in range(s.num_layers):
        if not s.is_shared(lid):
            macs[s.position_of(lid)].append((space.layer_cost(lid) - 1) / b)
            params[s.position_of(lid)].append(space.layer_tensors(lid)[0])
    per_param = sum(sum(v) / len(v) for v in macs.values()) / sum(sum(v) / len(v) for v in params.values())
    assert 64 <= per_param <= 66


def test_calibrate_prints_the_per_sample_work_ratio_of_testbed_and_presets(capsys):
    from naspipe.commands.calibrate import report_work

    w = cal.family_work_ratios(("csp", "pipedream", "gpipe", "vpipe"))
    assert w["testbed"] == pytest.approx(w["cv_slope_s"] / w["nlp_slope_s"])
    assert w["presets"] == pytest.approx(w["cv_macs"] / w["nlp_macs"])
    assert w["nlp_slope_s"] == pytest.approx(cal.exec_line(
        [r for r in TABLE2 if r.family == "nlp" and r.system != "vpipe"])[1])
    report_work(w)
    assert "per sample, cv over nlp: paper's testbed" in capsys.readouterr().out
