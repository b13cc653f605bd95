"""The simulator at a precision: each spec's rate per precision, activations in the precision's bytes."""

from __future__ import annotations

import json

import pytest
import yaml

from naspipe.cli import main
from naspipe.commands.calibrate import render_spec
from naspipe.errors import UsageError
from naspipe.plan.checks import ConfigError
from naspipe.plan.workflow import check_simulate
from naspipe.sim.calibrate import Fit
from naspipe.sim.hardware import HARDWARE_DIR, load_hardware, parse_hardware
from naspipe.sim.layers import layer_infos
from naspipe.space.registry import make_shape


def spec(**changes: object) -> dict[str, object]:
    data = yaml.safe_load((HARDWARE_DIR / "h100-nvlink-ib.yaml").read_text())
    return {**data, **changes}


def test_flops_per_precision_and_a_number_as_fp32_alone():
    h100 = parse_hardware(spec(), "h100")
    assert [h100.at_precision(p).peak_flops for p in ("fp32", "tf32", "bf16")] == [67e12, 494e12, 989e12]
    assert h100.at_precision("bf16").effective_flops == 989e12 * h100.compute_efficiency
    turing = load_hardware("rtx2080ti-pcie3-40gbe")
    assert turing.at_precision("fp32").peak_flops == turing.flops
    with pytest.raises(UsageError, match=r"no FLOP/s for precision 'bf16' \(its key 'flops' lists fp32\)$"):
        _ = turing.at_precision("bf16").peak_flops


@pytest.mark.parametrize(("flops", "message"), [
    ({"tf32": 1e12}, "must give fp32's peak"),
    ({"fp32": 1e12, "fp16": 2e12}, "unknown precision 'fp16'"),
    ({"fp32": 1e12, "bf16": -1}, "key 'flops.bf16' must be > 0"),
])
def test_a_bad_flops_mapping_is_one_line_naming_the_key(flops, message):
    with pytest.raises(UsageError, match=message):
        parse_hardware(spec(flops=flops), "spec.yaml")


def test_calibrate_writes_a_mapping_back_as_it_reads_it():
    h100 = load_hardware("h100-nvlink-ib")
    fit = Fit("all", task_overhead_s=1e-5, compute_efficiency=0.5, rows=1, max_rel_error=0.0)
    text = render_spec(h100, {"all": fit}, {}, "slot", "h100-nvlink-ib", "csp")
    again = parse_hardware(yaml.safe_load(text), "fitted")
    assert again.other_flops == h100.other_flops and again.flops == h100.flops


def test_bf16_halves_kept_activations_and_what_crosses_where_the_runtime_sends_bf16():
    nlp, cv = make_shape("nlp.c3"), make_shape("cv.c3")
    for shape in (nlp, cv):
        fp32, bf16 = layer_infos(shape), layer_infos(shape, "bf16")
        assert [i.params for i in fp32] == [i.params for i in bf16]
        assert all(b.act_bytes == a.act_bytes / 2 for a, b in zip(fp32, bf16, strict=True))
    fp32, bf16 = layer_infos(nlp), layer_infos(nlp, "bf16")
    assert bf16[1].out_bytes == fp32[1].out_bytes  # a block's state: the float32 residual stream
    assert bf16[-1].out_bytes == fp32[-1].out_bytes / 2  # the logits
    assert all(b.out_bytes == a.out_bytes / 2 for a, b in zip(layer_infos(cv), layer_infos(cv, "bf16"), strict=True))


def simulate(tmp_path, precision: str, hardware: str = "h100-nvlink-ib") -> dict[str, float]:
    out = tmp_path / precision
    args = ["simulate", "--space", "nlp.c3", "--system", "csp", "--stages", "4", "--steps", "8", "--hardware", hardware,
            "--costs", "analytic", "--batch", "max", "--set", f"precision={precision}", "--out", str(out)]
    assert main(args) == 0
    return json.loads((out / "metrics.json").read_text())


def test_simulate_prices_each_precision_at_its_rate(tmp_path, capsys):
    runs = {p: simulate(tmp_path, p) for p in ("fp32", "tf32", "bf16")}
    assert runs["fp32"]["exec_s"] > runs["tf32"]["exec_s"] > runs["bf16"]["exec_s"]
    assert runs["bf16"]["max_batch"] > runs["fp32"]["max_batch"]  # half the activation bytes
    assert runs["bf16"]["config"]["precision"] == "bf16"
    capsys.readouterr()
    assert main(["simulate", "--space", "nlp.c3", "--stages", "4", "--steps", "4", "--hardware",
                 "rtx2080ti-pcie3-40gbe", "--costs", "analytic", "--set", "precision=bf16",
                 "--out", str(tmp_path / "turing")]) == 2
    err = capsys.readouterr().err.strip()
    assert "no FLOP/s for precision 'bf16'" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "turing").exists()


def test_the_workflow_refuses_a_precision_its_simulated_hardware_lacks():
    sim = {"hardware": "rtx2080ti-pcie3-40gbe", "costs": "analytic", "precision": "bf16", "spaces": ["nlp.tiny"],
           "stages": [2]}
    with pytest.raises(ConfigError, match="simulate.precision"):
        check_simulate({"simulate": sim})
