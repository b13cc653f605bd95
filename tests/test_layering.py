"""Layering rules that code review alone would not keep.

The pure core, the run plan and the simulator never load torch (the simulator sizes layers from
the spaces' torch-free shapes, :mod:`naspipe.space.shape`); the runtime and the
simulator, the two executors of one run plan, never import each other; and no module but the
registry (:mod:`naspipe.systems`) keeps a list of system names.
"""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import naspipe
from naspipe.scheduling.policies import POLICY_NAMES

PACKAGE = Path(naspipe.__file__).parent

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


def _modules(package: str) -> tuple[str, ...]:
    """Every module of ``package`` (e.g. ``naspipe.sim``), itself included."""
    path = PACKAGE / package.removeprefix("naspipe.").replace(".", "/")
    return (package, *(f"{package}.{m.name}" for m in pkgutil.iter_modules([str(path)])))


PLAN_MODULES = ("naspipe.systems", *_modules("naspipe.runplan"))


def test_pure_core_imports_without_torch() -> None:
    """Every module of the scheduling core (its policies and the replicas' layout included), not only those named."""
    core = (*_modules("naspipe.scheduling"), *_modules("naspipe.scheduling.policies"))
    assert not _loaded_after_import((*PURE_MODULES, *core), "torch")


def test_run_plan_and_simulator_import_without_torch() -> None:
    """Every module of the run plan and of the simulator, the command's included, in one fresh interpreter."""
    assert not _loaded_after_import((*PURE_MODULES, *PLAN_MODULES, *_modules("naspipe.sim")), "torch")


def test_simulator_and_runtime_do_not_import_each_other() -> None:
    """Checked twice: on the sources (module- and function-level imports, so a lazy import is caught) and in
    a fresh interpreter (what importing the simulator and the run plan actually loads)."""
    for package, other in (("naspipe.sim", "naspipe.runtime"), ("naspipe.runtime", "naspipe.sim"),
                           ("naspipe.runplan", "naspipe.runtime"), ("naspipe.runplan", "naspipe.sim")):
        offenders = [f"{m} imports {name}" for m in _modules(package) for name in _imports(m)
                     if name == other or name.startswith(other + ".")]
        assert not offenders, offenders
    assert not _loaded_after_import((*PLAN_MODULES, *_modules("naspipe.sim")), "naspipe.runtime")


def _imports(module: str) -> set[str]:
    """The absolute names ``module``'s source imports, anywhere in it (module level or inside functions)."""
    path = PACKAGE / module.removeprefix("naspipe").lstrip(".").replace(".", "/")
    source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    names: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


# Collections of system names outside the registry that are not a capability: data about the paper or
# one experiment's choice of systems. Each is named by its file's name (modules move between packages)
# with its names, so a new list (or a grown one) fails.
NOT_CAPABILITIES = {
    ("paper.py", ("csp", "pipedream", "gpipe", "vpipe")): "the paper's Table 2 rows, in its order",
    ("bubble_models.py", ("csp", "gpipe")): "the two systems that experiment compares",
    ("table2_systems.py", ("csp", "gpipe")): "the paper's headline pair, named in the text",
    ("run_summary.py", ("gpipe", "pipedream")): "Table 3's BSP and ASP baselines, the pair the summary line names",
}


def system_name_lists(package: Path = PACKAGE) -> dict[tuple[str, tuple[str, ...]], int]:
    """Every list, tuple or set literal of two or more system-name strings in the package, outside the registry."""
    found: dict[tuple[str, tuple[str, ...]], int] = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).as_posix()
        if rel == "naspipe/systems.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
                names = tuple(e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in POLICY_NAMES)
                if len(names) >= 2:
                    found[(rel, names)] = node.lineno
    return found


def test_no_module_but_the_registry_lists_systems() -> None:
    """Which systems mirror, use the cache, are causal, ... is asked of naspipe.systems, never listed again."""
    found = system_name_lists()
    unexpected = {f"{rel}:{line} {names}" for (rel, names), line in found.items()
                  if (Path(rel).name, names) not in NOT_CAPABILITIES}
    assert not unexpected, f"list of system names outside naspipe.systems (ask the registry): {sorted(unexpected)}"


def test_the_system_list_probe_finds_a_list(tmp_path: Path) -> None:
    """The check above can fail: a tuple of two names is seen, one name or other strings are not."""
    (tmp_path / "naspipe").mkdir()
    (tmp_path / "naspipe" / "m.py").write_text('A = ("csp", "gpipe")\nB = ("csp",)\nC = ["x", "y"]\n'
                                               'def f():\n    return x in {"vpipe", "pipedream"}\n')
    (tmp_path / "naspipe" / "systems.py").write_text('NAMES = ("csp", "gpipe")\n')
    assert system_name_lists(tmp_path / "naspipe") == {("naspipe/m.py", ("csp", "gpipe")): 1,
                                                        ("naspipe/m.py", ("vpipe", "pipedream")): 5}


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
