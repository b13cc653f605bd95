"""``--set KEY=VALUE``: one parser for ``naspipe train`` and ``naspipe profile``, same results."""

from __future__ import annotations

import pytest

from naspipe.config import load_config, parse_override
from naspipe.errors import UsageError
from naspipe.profile.cli import space_options


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
