"""The shapes' analytic layer sizes equal the layers built on torch's meta device, exactly, so they never drift.

The simulator, the planners and the launcher's memory check size layers from
:meth:`naspipe.space.shape.SpaceShape.tensor_sizes` without torch; the runtime builds the
torch modules. Every preset is checked, with the option variants the configs use
(``config/*.yaml``, ``.test/config``) and the corners the formulas branch on (stem strides,
reductions, candidate counts past the op lists, identity at a reduction).
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from naspipe.space import make_shape, make_space, space_names

VARIANTS: list[tuple[str, dict[str, Any]]] = [
    *((name, {}) for name in space_names()),
    ("toy", {"blocks": 126, "candidates": 24}),  # the simulator's scale run
    ("toy", {"dim": 48, "heads": 6, "vocab": 100, "seq_len": 7, "candidates": 7}),
    ("nlp.tiny", {"vocab": 2000, "dim": 64, "seq_len": 24, "batch_size": 32}),  # config/real-small.yaml
    ("nlp.tiny", {"candidates": 30, "dim": 48, "cross_heads": 8, "blocks": 3}),
    ("nlp.tiny", {"batch_size": 32}),  # config/config.yaml
    ("cv.tiny", {"image_size": 32, "channels": 16, "batch_size": 32}),  # config/real-small.yaml
    ("cv.tiny", {"candidates": 23, "reductions": 3, "blocks": 7}),
    ("cv.tiny", {"stem_stride": 2, "reductions": 0}),
    ("cv.tiny", {"stem_stride": 4, "image_size": 30}),
    ("cv.tiny", {"stem_stride": 16, "image_size": 64, "channels": 6, "reductions": 2}),
]


@pytest.mark.parametrize(("name", "options"), VARIANTS, ids=lambda v: v if isinstance(v, str) else repr(v))
def test_analytic_sizes_equal_the_meta_build(name: str, options: dict[str, Any]) -> None:
    space = make_space(name, options)
    shape = make_shape(name, options)
    assert type(space).space_class() is type(space)
    measured: dict[object, tuple[int, int]] = {}
    for layer in range(space.structure.num_layers):
        key = space.shape_key(layer)
        if key not in measured:
            measured[key] = tuple(space.meta_tensor_sizes(layer))  # type: ignore[assignment]
        assert shape.layer_tensors(layer) == measured[key], (name, options, layer, space.structure.op_name(layer))
        assert space.layer_tensors(layer) == measured[key]
        assert shape.unmoved_bytes(layer) == space.meta_unmoved_bytes(layer), (name, options, layer)
        assert shape.layer_cost(layer) == space.layer_cost(layer)
    assert shape.structure == space.structure


def test_a_registered_torch_space_is_built_as_itself() -> None:
    """make_space builds a registered subclass of a preset's space, not the preset's class; its shape too."""
    from naspipe.space import PRESETS, register_preset
    from naspipe.space.toy import ToySpace

    class WiderToy(ToySpace):
        pass

    register_preset("test.wider-toy", WiderToy, {"dim": 48, "heads": 6})
    try:
        assert type(make_space("test.wider-toy")) is WiderToy
        assert make_shape("test.wider-toy").layer_tensors(0) == make_space("toy", {"dim": 48}).layer_tensors(0)
    finally:
        del PRESETS["test.wider-toy"]


def test_every_preset_is_covered() -> None:
    assert {name for name, _ in VARIANTS} == set(space_names())


def test_shapes_import_no_torch() -> None:
    """Every preset's shape, its sizes and costs, in a fresh interpreter without torch."""
    code = ("import sys\nfrom naspipe.space import make_shape, space_names\n"
            "for n in space_names():\n    s = make_shape(n)\n"
            "    [s.layer_tensors(i) for i in range(s.structure.num_layers)]\n"
            "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
