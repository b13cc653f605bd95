"""``naspipe reproducibility``: is each run bitwise identical to the sequential reference?

    naspipe reproducibility REFERENCE_RUN RUN [RUN ...] --out F.json

The verdict goes into a JSON file (paper Table 3's raw data) and the command exits 0 once it
is written, whatever the verdict, so a workflow can collect differing runs as results rather
than failures; ``naspipe compare`` keeps its 0/1 exit for humans. Equality is decided by
:func:`naspipe.compare.compare_pair` (exact losses, layer digests, weights digest); the first
diverging step and layers say where a system stops being sequential. Each run is first
verified against its own digests (:mod:`naspipe.rundigest`): a damaged file is a one-line
error, never a verdict; the verdict records the digests of the files it judged, so the
report can refuse it once those files change.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

from naspipe.compare import RunRecord, compare_pair, read_run
from naspipe.errors import UsageError
from naspipe.report.runinfo import RunInfo, read_run_info

SHOWN_LAYERS = 5


def first_divergence(ref: RunRecord, run: RunRecord) -> dict[str, Any] | None:
    """The first subnet whose loss differs (None if all shared losses agree) and the first differing layers."""
    if not compare_pair(ref, run):
        return None
    step = next((y for y in sorted(ref.losses.keys() & run.losses.keys()) if ref.losses[y] != run.losses[y]), None)
    if step is None and ref.losses.keys() != run.losses.keys():
        step = min(ref.losses.keys() ^ run.losses.keys())
    layers = sorted(x for x in ref.layers.keys() & run.layers.keys() if ref.layers[x] != run.layers[x])
    return {"step": step, "layers": layers[:SHOWN_LAYERS]}


def final_loss(record: RunRecord) -> float | None:
    return float.fromhex(record.losses[max(record.losses)]) if record.losses else None


def run_entry(ref: RunRecord, info: RunInfo, undigested: Collection[Path] = ()) -> dict[str, Any]:
    record = read_run(info.path, undigested)
    divergence = first_divergence(ref, record)
    return {
        "path": str(info.path),
        "system": info.system,
        "stages": info.stages,
        "replicas": info.replicas,
        "seed": info.seed,
        "final_loss": final_loss(record),
        "weights_sha256": record.weights,
        "identical": divergence is None,
        "first_divergence": divergence,
        "digests": record.digests,  # the bytes judged: the report refuses a verdict on files changed since
    }


def build(reference: Path, runs: list[Path], undigested: Collection[Path] = ()) -> dict[str, Any]:
    """The verdict on ``runs`` against ``reference``; ``undigested``: runs named as made before digests."""
    ref_info = read_run_info(reference, undigested)
    infos = [read_run_info(p, undigested) for p in runs]
    for info in infos:
        if (info.space, info.seed) != (ref_info.space, ref_info.seed):
            raise UsageError(
                f"run {info.path}: space {info.space!r} seed {info.seed} does not match the reference "
                f"{reference} (space {ref_info.space!r} seed {ref_info.seed})"
            )
    systems = sorted({i.system for i in infos})
    ref = read_run(reference, undigested)
    entries = [run_entry(ref, i, undigested) for i in infos]
    return {
        "space": ref_info.space,
        "system": systems[0] if len(systems) == 1 else ",".join(systems),
        "seed": ref_info.seed,
        "reference": str(reference),
        "reference_digests": ref.digests,
        "runs": entries,
        "identical_all": all(e["identical"] for e in entries),
    }
