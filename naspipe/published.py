"""The published results of a workflow config: the digest of every training run and table, and the check of a
run against them ("your run reproduces the published results bit for bit: 28 of 28 runs").

Why it can hold: under ``numerics: portable`` every job runs the same CPU kernels on any x86-64 machine
(:mod:`naspipe.numerics`), the partitions balance parameter counts (not a timed profile), and what a run trains
is then a function of the code and the config alone. What is timed is left out, by name: a run's
``metrics.json``, ``trace.json`` and ``access_order.csv`` (the order in which in-flight subnets read a shared
layer depends on timing, its bits do not), and the tables in :data:`TIMED_TABLES`.

A record holds, per run, its result files' digests, a digest of its losses every :data:`BLOCK` subnets and the
settings it was trained with that can change its bits (:data:`BIT_SETTINGS`), and per table its digest and a
short digest of every line: a run that differs then says which setting it was trained with otherwise, and where
it first diverges (subnets 64-95), and a table the first line that differs, without the repository holding the
results. A record made before settings were recorded compares by its bits alone.

Every run is read through the one run verifier (:func:`naspipe.rundigest.verify_run`), as ``compare`` and
``report`` read it: a damaged run (a file changed since its ``outputs.sha256`` was written, weights that are not
the hash of its layer digests, an unreadable ``metrics.json``) is a one-line error, never a verdict, and the
digests recorded are those of the bytes read, not those the run claims. Imports no torch.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from naspipe.errors import UsageError
from naspipe.fsutil import read_json_object
from naspipe.rundigest import file_sha256, verify_run

# the training runs' directories under results/ (naspipe.plan.paths): the grid, the ablation, the retrained winners
RUN_ROOTS = ("runs", "ablations", "retrain", "retrain_random")
RUN_FILES = ("weights.sha256", "losses.csv", "layer_hashes.csv")  # what a run trains (not access_order.csv)
TABLES = "tables"
# tables with a column that is a timing (or decided by one): measured on the machine, never published
TIMED_TABLES = {
    "table2_systems": "exec time, throughput, bubble ratio",
    "table4_access_order": "the order in which in-flight subnets read a layer",
    "table5_profile": "the profiled compute and copy times",
    "fig5_throughput": "throughput",
    "fig6_ablation": "throughput, bubble ratio, cache hit rate",
    "fig7_scaling": "utilisation",
    "fig4_loss_vs_time": "training time",
    "fig4_search_score": "training time",
    "run_summary": "wall and CPU time",
    "accounting": "CPU seconds",
    "claims": "verdicts on measured throughput and bubble ratios",
}
BLOCK = 32  # losses per prefix digest: a diverging run is located to BLOCK subnets
SHORT = 16  # hex digits of a prefix or line digest
# The config keys (metrics.json's "config") a run's bits can depend on, under some system: what a resume must keep
# (naspipe.runtime.checkpoint's MUST_MATCH and numerics_settings, which import torch; a test keeps this list their
# superset and names every other config key) and the kernels' settings (threads, numerics, the device). Left out:
# order, bookkeeping and output (priority, checkpoints kept, the trace's size, timeouts, progress), ``replicas`` (the
# layout: the one system that replicates, csp, computes the same bits at every layout), ``steps`` (the
# subnets trained are compared) and paths: where a partition or a dataset lies says nothing of its contents. The
# partition a run trained with, and the device it resolved, come from metrics.json itself (RUN_FACTS).
BIT_SETTINGS = ("seed", "system", "space", "stages", "shared_policy", "shared_window", "optimizer", "cache",
                "recompute", "subnet", "micro_batches", "split_backward", "precision", "numerics", "device", "threads",
                "bulk_size", "max_inflight", "checkpoint_every", "partition_costs", "partition_mode")
RUN_FACTS = ("device", "partition")  # metrics.json's own: the device type used (not ``auto``), the stages' sizes
PATH_SETTINGS = {"space": ("data",)}  # path-valued parts of a setting, left out of the record
MAX_DEPTH = 100  # levels of nesting a record or config may have (a workflow config has about 5)


@dataclass(frozen=True)
class Outcome:
    """One published item (a run or a table) and whether this run reproduces it; ``where``: the first divergence
    (or, for a run that reproduces under other settings, which)."""

    kind: str
    name: str
    same: bool
    where: str = ""


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:SHORT]


def _read_text(path: Path) -> str:
    """A result file as text; a missing, unreadable or binary file is a one-line error naming it."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{path}: unreadable (not UTF-8 text)") from None
    except OSError as exc:
        raise UsageError(f"{path}: unreadable ({exc.strerror or exc})") from None


def run_record(run: Path) -> dict[str, Any]:
    """A training run's published record: its result files' digests, the digest of its losses up to every BLOCK-th
    subnet, and its settings that can change the bits (absent for a run whose metrics.json has no config).

    The run is verified first (:func:`verify_run`), and the digests are those of the files as read."""
    digests = verify_run(run)
    files = {name: digests.get(name) or file_sha256(run / name) for name in RUN_FILES if (run / name).is_file()}
    lines = _read_text(run / "losses.csv").splitlines()[1:]
    prefixes = [_short("\n".join(lines[:end])) for end in range(BLOCK, len(lines) + BLOCK, BLOCK)]
    record: dict[str, Any] = {"files": files, "subnets": len(lines), "loss_prefixes": prefixes}
    settings = run_settings(run)
    if settings is not None:
        record["settings"] = settings
    return record


def run_settings(run: Path) -> dict[str, Any] | None:
    """The run's :data:`BIT_SETTINGS` and :data:`RUN_FACTS` from its metrics.json; None without a config (runs made
    before metrics.json held one)."""
    path = run / "metrics.json"
    metrics = read_json_object(path, str(path))
    config = metrics.get("config")
    if config is None:
        return None
    if not isinstance(config, dict):
        raise UsageError(f"{path}: damaged ('config' is not an object)")
    settings = {key: config[key] for key in BIT_SETTINGS if key in config}
    for key, parts in PATH_SETTINGS.items():
        if isinstance(settings.get(key), dict):
            settings[key] = {k: v for k, v in settings[key].items() if k not in parts}
    settings |= {key: metrics[key] for key in RUN_FACTS if isinstance(metrics.get(key), str)}
    check_depth(settings, f"{path}: 'config'", at=4)  # record / runs / RUN / settings
    return settings


def table_record(table: Path) -> dict[str, Any]:
    text = _read_text(table)
    return {"sha256": hashlib.sha256(text.encode()).hexdigest(), "lines": [_short(line) for line in text.splitlines()]}


def _runs(results: Path) -> Iterator[Path]:
    for root in RUN_ROOTS:
        for digests in sorted((results / root).glob("**/outputs.sha256")):
            run = digests.parent
            relative = run.relative_to(results)
            if not any(part.startswith(".") or part == "checkpoints" for part in relative.parts):
                yield run


def collect(results: Path, config: dict[str, Any]) -> dict[str, Any]:
    """Every published item of the results tree ``results`` (and the config it ran); a damaged run or an unreadable
    table is a one-line :class:`UsageError`."""
    if not results.is_dir():
        raise UsageError(f"--results {results}: not a directory")
    runs = {str(run.relative_to(results)): run_record(run) for run in _runs(results)}
    tables = {str(t.relative_to(results)): table_record(t) for t in sorted((results / TABLES).glob("*.csv"))
              if t.stem not in TIMED_TABLES}
    return {"config": config, "runs": runs, "tables": tables}


# -- the record's shape ----------------------------------------------------------------------------------------

def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


Field = tuple[str, Callable[[Any], bool]]  # what the field must be (in words), and the check
RUN_FIELDS: dict[str, Field] = {
    "files": ("an object of file digests",
              lambda v: isinstance(v, dict) and all(isinstance(d, str) for d in v.values())),
    "subnets": ("a count", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0),
    "loss_prefixes": ("a list of digests", _strings),
}
OPTIONAL_RUN_FIELDS: dict[str, Field] = {"settings": ("an object", lambda v: isinstance(v, dict))}
TABLE_FIELDS: dict[str, Field] = {"sha256": ("a digest", lambda v: isinstance(v, str)),
                                  "lines": ("a list of digests", _strings)}


def check_record(record: Mapping[str, Any], label: str) -> None:
    """A one-line :class:`UsageError` starting with ``label`` unless ``record`` has the shape :func:`collect` gives
    (``settings`` optional: records made before it compare by their bits). Checked before anything is read or
    written, so a hand-edited record is never a traceback halfway through the check."""
    check_depth(record, label)
    for key in ("runs", "tables"):
        if not isinstance(record.get(key), dict):
            raise UsageError(f"{label}: no {key!r} record (expected an object, got {kind_of(record.get(key))})")
    if not isinstance(record.get("config", {}), dict):
        raise UsageError(f"{label}: 'config' is not an object (got {kind_of(record['config'])})")
    for name, entry in record["runs"].items():
        _check_entry(entry, RUN_FIELDS, OPTIONAL_RUN_FIELDS, f"{label}: run {name!r}")
    for name, entry in record["tables"].items():
        _check_entry(entry, TABLE_FIELDS, {}, f"{label}: table {name!r}")


def _check_entry(entry: Any, required: Mapping[str, Field], optional: Mapping[str, Field], where: str) -> None:
    if not isinstance(entry, dict):
        raise UsageError(f"{where}: expected an object with {', '.join(required)}, got {kind_of(entry)}")
    for key, (what, check) in {**required, **optional}.items():
        if key not in entry:
            if key in required:
                raise UsageError(f"{where}: no {key!r} (expected {what})")
        elif not check(entry[key]):
            raise UsageError(f"{where}: {key!r} is not {what} (got {kind_of(entry[key])})")


def check_depth(value: Any, label: str, at: int = 1) -> None:
    """A one-line error for JSON nested deeper than :data:`MAX_DEPTH` levels of a record, ``value`` lying ``at``
    levels down in one (so that a record written is one that can be read back); writing or comparing it recursed
    out of the interpreter's stack, a traceback. Walked without recursion."""
    stack = [(value, at)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                raise UsageError(f"{label}: nested deeper than {MAX_DEPTH} levels")
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))


def kind_of(value: Any) -> str:
    """A JSON value's type in words, for an error line (never the value: it may be huge)."""
    names = {type(None): "null", bool: "a boolean", int: "a number", float: "a number", str: "a string",
             list: "a list", dict: "an object"}
    return names.get(type(value), type(value).__name__)


# -- the comparison --------------------------------------------------------------------------------------------

def compare(expected: dict[str, Any], found: dict[str, Any]) -> list[Outcome]:
    """One outcome per published run and table (in the published order); an item this run lacks differs."""
    outcomes = [_compare_run(name, want, found["runs"].get(name)) for name, want in expected["runs"].items()]
    return outcomes + [_compare_table(name, want, found["tables"].get(name))
                       for name, want in expected["tables"].items()]


def _bits(record: Mapping[str, Any]) -> tuple[Any, ...]:
    return record["files"], record["subnets"], record["loss_prefixes"]


def _compare_run(name: str, want: dict[str, Any], got: dict[str, Any] | None) -> Outcome:
    """Settings first: a run trained otherwise says so before (or, bits being equal, instead of) its bits."""
    if got is None:
        return Outcome("run", name, False, "missing from this run's results")
    settings = setting_differences(want.get("settings"), got.get("settings"))
    if _bits(got) == _bits(want):
        return Outcome("run", name, True, f"the same bits, though trained with {' and '.join(settings)}"
                       if settings else "")
    reason = ""
    if settings:
        which = "a setting that changes" if len(settings) == 1 else "settings that change"
        reason = f"trained with {' and '.join(settings)}, {which} the bits; "
    return Outcome("run", name, False, reason + _bits_difference(want, got))


def _bits_difference(want: dict[str, Any], got: dict[str, Any]) -> str:
    files = ", ".join(sorted(f for f in want["files"] if want["files"][f] != got["files"].get(f)))
    for block, (a, b) in enumerate(zip(want["loss_prefixes"], got["loss_prefixes"], strict=False)):
        if a != b:
            first, last = block * BLOCK, min((block + 1) * BLOCK, want["subnets"]) - 1
            return f"{files} differ; the losses first differ in subnets {first}-{last}"
    if want["subnets"] != got["subnets"]:
        return f"{got['subnets']} subnets trained, {want['subnets']} published"
    return f"{files} differ; every loss is the same (the weights moved, not the loss)"


def setting_differences(want: Any, got: Any) -> list[str]:
    """``KEY = THIS RUN'S (published THEIRS)`` per setting both records hold that differs, nested keys dotted
    (``optimizer.lr``); nothing when either record has no settings (made before they were recorded)."""
    if not isinstance(want, dict) or not isinstance(got, dict):
        return []
    return [line for key in sorted(set(want) & set(got)) for line in _differences(key, want[key], got[key])]


def _differences(key: str, want: Any, got: Any) -> list[str]:
    if isinstance(want, dict) and isinstance(got, dict):
        return [line for sub in sorted(set(want) | set(got))
                for line in _differences(f"{key}.{sub}", want.get(sub, _UNSET), got.get(sub, _UNSET))]
    if _shown(want) == _shown(got):
        return []
    return [f"{key} = {_shown(got)} (published {_shown(want)})"]


_UNSET = object()


def _shown(value: Any) -> str:
    return "unset" if value is _UNSET else _canonical(value)


def _compare_table(name: str, want: dict[str, Any], got: dict[str, Any] | None) -> Outcome:
    if got is None:
        return Outcome("table", name, False, "missing from this run's results")
    if got["sha256"] == want["sha256"]:
        return Outcome("table", name, True)
    for line, (a, b) in enumerate(zip(want["lines"], got["lines"], strict=False), start=1):
        if a != b:
            return Outcome("table", name, False, f"line {line} is the first that differs")
    return Outcome("table", name, False, f"{len(got['lines'])} lines, {len(want['lines'])} published")


def config_differences(expected: dict[str, Any], found: dict[str, Any]) -> list[str]:
    """The top-level config keys in which this run's config differs from the published one."""
    a, b = expected.get("config", {}), found.get("config", {})
    return sorted(k for k in set(a) | set(b) if _canonical(a.get(k)) != _canonical(b.get(k)))


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def summary(outcomes: list[Outcome], differing_keys: list[str], source: str) -> str:
    """The verdict as markdown: one sentence when every item matches, else the ones that differ and where."""
    runs = [o for o in outcomes if o.kind == "run"]
    tables = [o for o in outcomes if o.kind == "table"]
    same_runs, same_tables = sum(o.same for o in runs), sum(o.same for o in tables)
    lines = ["# Published results", ""]
    if not outcomes:
        lines.append(f"Nothing is published yet ({source} is empty); results/published.json is this run's record: "
                     "copied there, it publishes this run (docs/numerics.md).")
    elif same_runs == len(runs) and same_tables == len(tables):
        lines.append(f"Your run reproduces the published results bit for bit: {same_runs} of {len(runs)} runs and "
                     f"{same_tables} of {len(tables)} tables ({source}).")
    else:
        lines.append(f"Your run reproduces {same_runs} of {len(runs)} published runs and {same_tables} of "
                     f"{len(tables)} tables bit for bit ({source}). These differ:")
        lines += [""] + [f"- {o.kind} `{o.name}`: {o.where}" for o in outcomes if not o.same]
    lines += _other_settings(outcomes)
    if differing_keys:
        lines += ["", f"This run's config differs from the published one in: {', '.join(differing_keys)}."]
    excluded = ", ".join(sorted(TIMED_TABLES))
    lines += ["", f"Not published (timings, by name): each run's metrics.json, trace.json and access_order.csv, "
              f"the figures, and the tables {excluded}."]
    return "\n".join(lines) + "\n"


def _other_settings(outcomes: list[Outcome]) -> list[str]:
    """The runs that reproduce although trained otherwise (fp32 and tf32 on a CPU, by design): said, not hidden."""
    otherwise = [o for o in outcomes if o.same and o.where]
    if not otherwise:
        return []
    return ["", "These reproduce bit for bit, trained with other settings than the published runs:", "",
            *[f"- {o.kind} `{o.name}`: {o.where}" for o in otherwise]]
