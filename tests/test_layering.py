"""Layering rules that code review alone would not keep: the pure core never loads torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

PURE_MODULES = (
    "naspipe.scheduling",
    "naspipe.scheduling.driver",
    "naspipe.scheduling.predictor",
    "naspipe.context.cache",
    "naspipe.partition",
    "naspipe.subnet",
    "naspipe.space.structure",
    "naspipe.seeding",
)


def _loaded_after_import(modules: tuple[str, ...], probe: str) -> bool:
    """Import ``modules`` in a fresh interpreter; True if ``probe`` ended up in ``sys.modules``."""
    code = "import importlib, sys\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules)
    code += f"print({probe!r} in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return out.strip() == "True"


def test_pure_core_imports_without_torch() -> None:
    assert not _loaded_after_import(PURE_MODULES, "torch")


def test_profile_readers_import_without_torch() -> None:
    """The training job reads a profile CSV and its costs without the torch measuring code."""
    readers = ("naspipe.profile", "naspipe.profile.rows", "naspipe.profile.costs", "naspipe.profile.table")
    assert not _loaded_after_import(readers, "torch")
    assert not _loaded_after_import(readers, "naspipe.profile.measure")


def test_probe_detects_torch() -> None:
    """The check above can fail: importing a torch-backed module is seen."""
    assert _loaded_after_import(("naspipe.space.base",), "torch")


@pytest.mark.parametrize("name", ["make_space", "SearchSpace", "space_names", "SpaceStructure", "PRESETS"])
def test_space_package_exports_resolve(name: str) -> None:
    import naspipe.space

    assert getattr(naspipe.space, name) is not None
    assert name in dir(naspipe.space)


def test_space_package_unknown_name() -> None:
    import naspipe.space

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        naspipe.space.nope  # noqa: B018
