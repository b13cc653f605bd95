"""Everything the report reads, loaded and validated before anything is written.

Run directories describe themselves (:mod:`naspipe.report.runinfo`); reproducibility JSON
files come from ``naspipe reproducibility``; profiles are ``SPACE=F.csv`` pairs written by
``naspipe profile``. Bad input of any kind is one UsageError naming the file or argument; so
is a damaged run, or a verdict on files that changed after it was made.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from naspipe import systems
from naspipe.errors import UsageError
from naspipe.fsutil import read_json_object
from naspipe.report.runinfo import RunInfo, read_run_info
from naspipe.report.search_inputs import SearchResult, read_curve, read_retrained, read_search
from naspipe.rundigest import check_unchanged, verify_run

if TYPE_CHECKING:
    import pandas as pd

REPRO_FIELDS = ("path", "system", "stages", "seed", "final_loss", "weights_sha256", "identical", "first_divergence")


@dataclass(frozen=True)
class ReportInputs:
    runs: list[RunInfo]
    reproducibility: list[dict[str, Any]] = field(default_factory=list)
    profiles: dict[str, Path] = field(default_factory=dict)  # space -> profile CSV
    ablations: list[RunInfo] = field(default_factory=list)  # Figure 6's runs (kept out of the other sections)
    searches: list[SearchResult] = field(default_factory=list)
    curves: list[pd.DataFrame] = field(default_factory=list)  # naspipe evaluate --every-checkpoint CSVs
    simulated: list[RunInfo] = field(default_factory=list)  # ``naspipe simulate`` runs (the sim_* sections)
    random_retrained: list[pd.DataFrame] = field(default_factory=list)  # evaluate --own-subnet CSVs (run summary)

    @property
    def spaces(self) -> list[str]:
        return sorted({r.space for r in self.runs} | {d["space"] for d in self.reproducibility})

    def runs_of(self, space: str) -> list[RunInfo]:
        return sorted(
            (r for r in self.runs if r.space == space), key=lambda r: (system_rank(r.system), r.stages, r.seed)
        )


def system_rank(system: str) -> tuple[int, str]:
    """Where ``system`` sorts in tables and legends (the registry's report order), then by name."""
    return (systems.rank(system), system)


def load_inputs(runs: list[Path], reproducibility: list[Path], profiles: list[str],
                ablations: list[Path] | None = None, searches: Sequence[str] = (),
                curves: Sequence[Path] = (), simulated: list[Path] | None = None,
                random_retrained: Sequence[Path] = (), undigested: Collection[Path] = ()) -> ReportInputs:
    """Every input read and verified; ``undigested``: runs named as made before ``outputs.sha256`` existed."""
    infos = [read_run_info(p, undigested) for p in runs]
    ablation_infos = [read_run_info(p, undigested) for p in ablations or []]
    sims = [read_run_info(p, undigested, simulated=True) for p in simulated or []]
    seen: dict[Path, Path] = {}
    for info in [*infos, *ablation_infos, *sims]:
        key = info.path.resolve()
        if key in seen:
            raise UsageError(f"run directory {info.path} given twice")
        seen[key] = info.path
    verdicts = [read_reproducibility(p, undigested) for p in reproducibility]
    return ReportInputs(infos, verdicts, parse_profiles(profiles),
                        ablations=ablation_infos, searches=[read_search(s) for s in searches],
                        curves=[read_curve(c) for c in curves], simulated=sims,
                        random_retrained=[read_retrained(r) for r in random_retrained])


def read_reproducibility(path: Path, undigested: Collection[Path] = ()) -> dict[str, Any]:
    data = read_json_object(path, f"reproducibility file {path}")
    if not isinstance(data.get("space"), str) or not isinstance(data.get("runs"), list):
        raise UsageError(f"reproducibility file {path}: expected an object with 'space' and a 'runs' list")
    for i, entry in enumerate(data["runs"]):
        missing = [k for k in REPRO_FIELDS if not isinstance(entry, dict) or k not in entry]
        if missing:
            raise UsageError(f"reproducibility file {path}: runs[{i}] lacks field {missing[0]!r}")
    _check_judged(path, data, undigested)
    return data


def _check_judged(path: Path, data: dict[str, Any], undigested: Collection[Path]) -> None:
    """A verdict holds only for the bytes it judged: each run it names (the reference too) must be
    undamaged and unchanged since. Verdicts written before they recorded digests are taken as they are."""
    judged = [(str(data.get("reference")), data.get("reference_digests"), "reference")]
    judged += [(str(e["path"]), e.get("digests"), f"runs[{i}]") for i, e in enumerate(data["runs"])]
    for run, digests, where in judged:
        if digests is None:
            continue
        label = f"reproducibility file {path}: {where}"
        if not isinstance(digests, dict) or not all(isinstance(v, str) for v in digests.values()):
            raise UsageError(f"{label}: field 'digests' must map file names to SHA-256 strings")
        if not Path(run).is_dir():
            raise UsageError(f"{label}: run directory {run} it judged is not found")
        verify_run(Path(run), undigested)
        check_unchanged(Path(run), digests, label)


def parse_profiles(specs: list[str]) -> dict[str, Path]:
    profiles: dict[str, Path] = {}
    for spec in specs:
        space, sep, file = spec.partition("=")
        if not sep or not space or not file:
            raise UsageError(f"--profile {spec!r}: expected SPACE=FILE.csv")
        path = Path(file)
        if not path.is_file():
            raise UsageError(f"--profile {spec!r}: {path} is not a file")
        if space in profiles:
            raise UsageError(f"--profile {spec!r}: space {space!r} given twice")
        profiles[space] = path
    return profiles
