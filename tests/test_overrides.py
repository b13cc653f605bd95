"""``--set KEY=VALUE``: one parser for ``naspipe train`` and ``naspipe profile``, same results."""

from __future__ import annotations

import pytest

from naspipe.commands.profile import space_options
from naspipe.config import load_config, parse_override
from naspipe.errors import UsageError


@pytest.mark.parametrize(
    "item, expected",
    [
        ("steps=8", ("steps", 8)),
        (" optimizer.lr = 0.5", ("optimizer.lr", 0.5)),
        ("optimizer.betas=[0.8, 0.9]", ("optimizer.betas", [0.8, 0.9])),
        ("space.data=null", ("space.data", None)),
        ("space.data=", ("space.data", None)),  # empty value: YAML null, as `data:` in a file
        ("space.data=   ", ("space.data", None)),
        ("partition_costs=a=b.csv", ("partition_costs", "a=b.csv")),  # only the first '=' splits
        ("space.name=nlp.tiny", ("space.name", "nlp.tiny")),
    ],
)
def test_values_are_yaml(item: str, expected: tuple[str, object]) -> None:
    assert parse_override(item) == expected


@pytest.mark.parametrize("item", ["steps", "=3", " =3", ""])
def test_missing_key_or_equals_sign(item: str) -> None:
    with pytest.raises(UsageError, match="expected KEY=VALUE") as info:
        parse_override(item)
    assert repr(item) in str(info.value)


@pytest.mark.parametrize("item", ["optimizer.betas=[0.9,", 'space.name="toy', "seed=@1", "space.dim=a: b: c"])
def test_invalid_yaml_is_an_error_naming_the_key(item: str) -> None:
    key = item.partition("=")[0]
    with pytest.raises(UsageError, match=f"--set {key}: cannot parse value") as info:
        parse_override(item)
    assert "\n" not in str(info.value)


def test_train_and_profile_read_the_same_values() -> None:
    items = ["space.dim=16", "space.dropout=", "space.blocks=4"]
    config = load_config(None, items)
    assert config.space_options == space_options(items) == {"dim": 16, "dropout": None, "blocks": 4}


def test_empty_value_for_a_typed_key_names_it() -> None:
    with pytest.raises(UsageError, match="'steps': expected int, got None"):
        load_config(None, ["steps="])


# -- issue 18, item 9: conflicting overrides and duplicate YAML keys are errors ---------------------
@pytest.mark.parametrize("item, flags", [
    ("steps=true", {"steps": 4}),
    ("stages=-7", {"stages": 2}),
    ("space.name=toy", {"space.name": "toy"}),  # even the same value: one place sets a key
])
def test_a_key_set_twice_by_set_and_its_flag_is_an_error(item: str, flags: dict) -> None:
    key = item.partition("=")[0]
    with pytest.raises(UsageError, match=f"--set '{item}' conflicts with the flag that sets '{key}'") as info:
        load_config(None, [item], flags)
    assert "\n" not in str(info.value)


def test_set_without_its_flag_still_applies_and_is_checked() -> None:
    assert load_config(None, ["stages=3"], {"stages": None}).stages == 3
    with pytest.raises(UsageError, match="'stages': -7 must be >= 1"):
        load_config(None, ["stages=-7"], {"stages": None})


def test_duplicate_key_in_a_set_value_is_an_error() -> None:
    with pytest.raises(UsageError, match="--set optimizer: cannot parse value .*duplicate key 'lr'"):
        parse_override("optimizer={lr: 1, lr: 2}")


@pytest.mark.parametrize("text, line", [
    ("seed: 1\nsteps: 4\nseed: 2\n", 3),
    ("optimizer:\n  lr: 0.1\n  lr: 0.2\n", 3),
])
def test_duplicate_key_in_a_config_file_is_an_error_naming_file_and_line(tmp_path, text: str, line: int) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(UsageError, match=f"c.yaml line {line}: not valid YAML \\(duplicate key") as info:
        load_config(path)
    assert "\n" not in str(info.value)


def test_duplicate_key_in_a_hardware_spec_is_an_error(tmp_path) -> None:
    from naspipe.sim.hardware import HARDWARE_DIR, load_hardware

    shipped = (HARDWARE_DIR / "cpu-local.yaml").read_text()
    path = tmp_path / "hw.yaml"
    path.write_text(shipped + "hosts: 2\n")
    with pytest.raises(UsageError, match="hw.yaml line .*: not valid YAML \\(duplicate key 'hosts'\\)"):
        load_hardware(str(path))
    path.write_bytes(b"\xff\xfe\x00name: x\n")
    with pytest.raises(UsageError, match="hw.yaml: not UTF-8 text"):
        load_hardware(str(path))
    path.write_text(shipped.replace("device_reserved: 0.0", "device_reserved: 9.0e+9"))
    with pytest.raises(UsageError, match="'device_reserved' \\(9000000000.0\\) must be below 'device_memory'"):
        load_hardware(str(path))
    assert load_hardware(str(HARDWARE_DIR / "cpu-local.yaml")).name == "cpu-local"


def test_duplicate_key_in_a_workflow_config_stops_before_any_job(tmp_path) -> None:
    pytest.importorskip("snakemake")
    from tests.test_workflow import snakemake

    config = tmp_path / "c.yaml"
    config.write_text("device: cpu\nseeds: [0]\nsteps: 4\nstages: [2]\nsystems: [csp]\nsteps: 8\n"
                      "datasets: {}\nspaces:\n  toy: {}\n")
    done = snakemake("-n", "--configfile", str(config), "--directory", str(tmp_path / "work"))
    assert done.returncode != 0
    line = f"naspipe workflow: config error: steps: given twice in {config} line 6"
    assert line in done.stderr, done.stderr[-2000:]
