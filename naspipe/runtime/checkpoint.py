"""Checkpoints taken at drain points: one file per layer, verified by SHA-256 before a resume.

At a checkpoint boundary ``s`` stage 0 admits no subnet ``>= s`` until every earlier one has
finished, so each stage saves exactly the state after subnets ``< s``. A run also ends with
one at its last step (``final_checkpoint``): the trained supernet, from which
``--resume RUN --steps M`` extends a finished run. Layout of
``RUN/checkpoints/step-XXXXXXXX/``:

- ``layer-<id>.pt``: that layer's tensors and optimizer state, loadable with
  ``torch.load(weights_only=True)``. Keyed by layer id, so a rank loads only the layers it
  owns and a run may resume at another stage count.
- ``stage-<k>.json``: how many bytes of each of the stage's append-only logs (see
  :mod:`naspipe.runtime.recorder`) were valid at the checkpoint. The logs are not copied
  into the checkpoint, so its size does not grow with the step count.
- ``manifest.json``: written last by stage 0 after a barrier, with the SHA-256 of every file
  above, the run's ``config`` and ``settings`` (what its config resolved to: the stages' device
  type and the static partition's bounds), the merged log lengths, ``written_at`` (Unix time)
  and ``wall_s``: the training wall time up to this checkpoint, summed over the segments of a
  resumed run (the resumed checkpoint's ``wall_s`` plus the new segment's time), so a pause
  between a run and its resume never counts as training time. It places each checkpoint on
  the run's wall-clock axis (Figure 4's curves). Stage 0 hashes the shards itself, which also proves they
  are visible to it (multi-node runs need a shared filesystem). A folder without a manifest
  is incomplete: it is removed and never counts toward ``keep_checkpoints``. The manifest
  protects itself too: ``fields_sha256`` is the SHA-256 of its other fields but ``files``
  (each of which its shard's own hash checks), so an edited configuration, step or log length
  is refused instead of resumed with shards trained under other settings.

A resume reads the manifest and checks every hash in the launcher, before any stage starts,
so a damaged checkpoint is a one-line error (exit 2) and is never resumed. It also refuses
every change of a setting that the run's numbers depend on (:func:`check_compatible`; the
keys are sorted into :data:`MUST_MATCH`, :data:`BY_SYSTEM`, :data:`CHECKED_APART` and
:data:`NO_BITS`, which together name every config key).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from naspipe.errors import UsageError
from naspipe.fsutil import atomic_write_bytes, atomic_write_json
from naspipe.runplan.rundir import check_still_there
from naspipe.runtime.windowed import SharedWindows, split_state
from naspipe.scheduling.policies import POLICIES

if TYPE_CHECKING:
    from naspipe.partition import Partition
    from naspipe.scheduling.policies.base import StagePolicy

MANIFEST = "manifest.json"
# 3: the manifest carries ``settings`` and ``fields_sha256``, its digest of itself. A format-2 manifest is
# refused: without the digest, an edited one cannot be told from an intact one (deleting the digest would
# pass any edit), and its config alone does not say which device or partition its shards were trained on.
FORMAT = 3
DIGEST = "fields_sha256"
UNDIGESTED = ("files", DIGEST)  # each file's entry is checked against the file itself (:func:`verify`)
# Every config key, by what a resume may do with it (tests/test_resume_settings.py checks that the four name
# each key of naspipe.config.Config once, so a new key cannot be added without deciding):
# - MUST_MATCH: every system's numbers depend on it (threads: torch's intra-op reductions split by thread).
MUST_MATCH = ("seed", "system", "space", "shared_policy", "optimizer", "recompute", "subnet", "micro_batches",
              "split_backward", "precision", "threads")
# - BY_SYSTEM: the pipeline's shape; some systems' numbers depend on it (:func:`numerics_settings`).
BY_SYSTEM = ("stages", "replicas", "max_inflight", "bulk_size", "checkpoint_every", "partition_costs", "partition_file",
             "partition_mode", "cache")
# - CHECKED_APART: each by its own rule (shared_window under windowed; numerics: the CPU kernels; device: the
#   type the stages resolved; steps: not behind the checkpoint).
CHECKED_APART = ("shared_window", "numerics", "device", "steps")
# - NO_BITS: order, bookkeeping and output only (priority orders a micro-batched stage's ready tasks, whose
#   results CSP's version rule fixes); a resume may change them freely.
NO_BITS = ("priority", "keep_checkpoints", "final_checkpoint", "trace_max_events", "timeout_s", "progress")
# What a key of MUST_MATCH meant in a checkpoint written before the key existed (its default then and now).
BEFORE_KEY = {"micro_batches": 1, "split_backward": False, "precision": "fp32"}
_STEP_DIR = re.compile(r"step-(\d{8})$")
_HEX64 = re.compile(r"[0-9a-f]{64}$")


def step_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"step-{step:08d}"


def layer_file(layer: int) -> str:
    return f"layer-{layer}.pt"


def stage_file(stage: int) -> str:
    return f"stage-{stage}.json"


# -- writing ------------------------------------------------------------------
def save_stage(directory: Path, stage: int, layers: dict[int, dict[str, torch.Tensor]],
               optimizers: dict[int, dict[str, Any]], log_lengths: dict[str, int]) -> None:
    """One stage's part of a checkpoint: a file per layer, then the stage's log lengths.

    Each shard is serialised in memory and written as bytes: ``torch.save`` into the file turned a
    full disk into ``RuntimeError: ... unexpected pos``, a traceback, where the file's own write
    raises ``OSError(ENOSPC)``, the one line every full disk gets.
    """
    check_still_there(directory.parent.parent)  # never re-create a removed DIR.partial with a partial checkpoint
    directory.parent.mkdir(exist_ok=True)  # (not parents=True: a DIR.partial gone since the check stays gone)
    directory.mkdir(exist_ok=True)
    for layer, state in layers.items():
        shard = {"params": {k: v.detach().cpu() for k, v in state.items()}, "optimizer": optimizers.get(layer)}
        buffer = io.BytesIO()
        torch.save(shard, buffer)
        atomic_write_bytes(directory / layer_file(layer), buffer.getvalue())
    atomic_write_json(directory / stage_file(stage), {"stage": stage, "logs": log_lengths})


def run_settings(partition: Partition, device_type: str) -> dict[str, Any]:
    """What a run computes with beyond its config, as its manifest records it and a resume compares it.

    The device type its stages resolved (``device: auto`` is cpu on one machine, cuda on another) and the
    static partition's bounds (a ``partition_costs`` profile or a ``partition_file`` may change under the
    same name, and PipeDream's updates follow the bounds).
    """
    return {"device": device_type, "partition": list(partition.bounds)}


def write_manifest(directory: Path, step: int, stages: int, layers: list[int], config: dict[str, Any],
                   keep: int, wall_s: float, settings: dict[str, Any]) -> None:
    """Stage 0, after every stage saved: hash every shard, write the manifest, apply retention.

    ``wall_s``: the run's training wall time up to this checkpoint, resumed segments included.
    ``settings``: :func:`run_settings`. The manifest ends with its digest of itself (:data:`DIGEST`).
    """
    names = [layer_file(lid) for lid in layers] + [stage_file(k) for k in range(stages)]
    missing = [n for n in names if not (directory / n).is_file()]
    if missing:
        raise RuntimeError(f"checkpoint {directory}: stage 0 cannot see {', '.join(missing[:3])} written by the other "
                           "stages; multi-node checkpoints need a shared filesystem for --out")
    logs: dict[str, int] = {}
    for k in range(stages):
        logs.update(json.loads((directory / stage_file(k)).read_text(encoding="utf-8"))["logs"])
    files = {n: file_sha256(directory / n) for n in names}
    manifest = {"format": FORMAT, "step": step, "stages": stages, "config": config, "settings": settings,
                "files": files, "logs": logs, "written_at": time.time(), "wall_s": wall_s}
    atomic_write_json(directory / MANIFEST, {**manifest, DIGEST: fields_digest(manifest)})
    prune(directory.parent, keep)


def fields_digest(manifest: dict[str, Any]) -> str:
    """The SHA-256 of the manifest's fields but :data:`UNDIGESTED`, in one canonical JSON form (sorted keys,
    no spaces): the bytes on disk may be re-indented without changing it, not one value."""
    fields = {key: value for key, value in manifest.items() if key not in UNDIGESTED}
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def prune(checkpoints: Path, keep: int, newer_than: int | None = None) -> None:
    """Remove incomplete step folders, stray temp files, all but the ``keep`` newest complete ones,
    and (on an in-place resume) complete ones past the resumed step."""
    complete = []
    for path in sorted(checkpoints.glob("step-*")) if checkpoints.is_dir() else []:
        match = _STEP_DIR.match(path.name)
        if match is None or not path.is_dir():
            continue
        done = (path / MANIFEST).is_file() and (newer_than is None or int(match.group(1)) <= newer_than)
        if done:
            complete.append(path)
            for tmp in path.glob(".*.tmp"):
                tmp.unlink(missing_ok=True)
        else:
            shutil.rmtree(path, ignore_errors=True)
    for old in complete[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# -- finding and verifying ----------------------------------------------------
def find_checkpoint(path: Path) -> Path:
    """A checkpoint directory, or the newest complete one under a run directory."""
    if (path / MANIFEST).is_file():
        return path
    complete = sorted((path / "checkpoints").glob(f"step-*/{MANIFEST}"))
    if not complete:
        partial = path.with_name(path.name + ".partial") if path.name else path
        interrupted = partial != path and (partial / "checkpoints").is_dir()
        hint = f" (an interrupted run is in {partial}: --resume {partial})" if interrupted else ""
        raise UsageError(f"--resume {path}: no complete checkpoint (no {MANIFEST}) found{hint}")
    return complete[-1].parent


def read_manifest(checkpoint: Path) -> dict[str, Any]:
    """The manifest, checked for shape: every field a resume reads, with the right type."""
    path = checkpoint / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise UsageError(f"checkpoint {path}: unreadable (nested too deeply)") from None
    except (OSError, ValueError) as exc:  # ValueError: bad JSON, not UTF-8, an integer past Python's digit limit
        raise UsageError(f"checkpoint {path}: unreadable ({exc})") from None
    if not isinstance(manifest, dict):
        raise UsageError(f"checkpoint {path}: expected a JSON object, got {type(manifest).__name__}")
    _check_format(manifest, path)
    for key, ok in _SHAPE:
        if key not in manifest:
            raise UsageError(f"checkpoint {path}: field {key!r} is missing")
        if not ok(manifest[key]):
            raise UsageError(f"checkpoint {path}: field {key!r} has an invalid value {_short(manifest[key])}")
    if fields_digest(manifest) != manifest[DIGEST]:
        raise UsageError(f"checkpoint {path}: its fields do not match their SHA-256 ({DIGEST}): the manifest was "
                         "edited or damaged, and its shards were trained under the settings it recorded, not these; "
                         "resume an intact checkpoint or train again")
    return manifest


def _check_format(manifest: dict[str, Any], path: Path) -> None:
    """Only this format is read: an older manifest lacks what a resume now compares and the digest."""
    found = manifest.get("format")
    if found == 2:
        raise UsageError(f"checkpoint {path}: format 2 predates the manifest's digest of its own settings "
                         f"({DIGEST}), so an edit of it cannot be detected; resume it with the naspipe that wrote it, "
                         "or train again")
    if found != FORMAT:
        raise UsageError(f"checkpoint {path}: format {_short(found)} is not {FORMAT} (written by another naspipe "
                         "version)")


# Every field a resume reads, with the right type (the digest last: it is checked once the others are sound).
_SHAPE: tuple[tuple[str, Callable[[Any], bool]], ...] = (
    ("step", lambda v: _is_int(v) and v >= 1), ("stages", lambda v: _is_int(v) and v >= 1),
    ("config", lambda v: isinstance(v, dict)),
    ("settings", lambda v: isinstance(v, dict) and isinstance(v.get("device"), str)
     and isinstance(v.get("partition"), list) and all(_is_int(b) for b in v["partition"])),
    ("files", lambda v: isinstance(v, dict) and all(isinstance(h, str) and _HEX64.match(h) for h in v.values())),
    ("logs", lambda v: isinstance(v, dict) and all(_is_int(n) and n >= 0 for n in v.values())),
    (DIGEST, lambda v: isinstance(v, str) and _HEX64.match(v) is not None),
)


def verify(checkpoint: Path, manifest: dict[str, Any], layers: list[int]) -> None:
    """Every shard the manifest lists exists with its recorded SHA-256, and every layer has one."""
    files: dict[str, str] = manifest["files"]
    for name in [layer_file(lid) for lid in layers] + [stage_file(k) for k in range(manifest["stages"])]:
        if name not in files:
            raise UsageError(f"checkpoint {checkpoint / MANIFEST}: no entry for {name}")
    for name, expected in sorted(files.items()):
        path = checkpoint / name
        if "/" in name or not path.is_file():
            raise UsageError(f"checkpoint shard {path}: missing")
        if file_sha256(path) != expected:
            raise UsageError(f"checkpoint shard {path}: SHA-256 does not match the manifest (damaged or truncated)")


def check_compatible(manifest: dict[str, Any], config: dict[str, Any], checkpoint: Path,
                     settings: dict[str, Any] | None = None) -> None:
    """The resumed run computes what the checkpointed one would have: same settings, steps not behind it.

    ``settings``: the resumed run's :func:`run_settings`, compared with the manifest's (None: the config only).
    ``--steps`` equal to the checkpoint's step finishes a run killed after its final checkpoint.
    """
    saved = manifest["config"]
    for key in MUST_MATCH:
        theirs = saved.get(key, BEFORE_KEY.get(key))
        if _normal(theirs) != _normal(config.get(key, BEFORE_KEY.get(key))):
            raise UsageError(f"--resume {checkpoint}: config key {key!r} is {_short(config.get(key))}, "
                             f"checkpoint has {_short(theirs)}; the checkpoint's numbers depend on it, so resuming "
                             "would train a hybrid of two runs (set it as the checkpoint has it, or train again)")
    if config.get("shared_policy") == "windowed" and saved.get("shared_window") != config.get("shared_window"):
        raise UsageError(f"--resume {checkpoint}: config key 'shared_window' is {config.get('shared_window')!r}, "
                         f"checkpoint has {saved.get('shared_window')!r}")
    _check_kernels(saved, config, checkpoint)
    saved_settings = manifest.get("settings")
    if settings is not None and isinstance(saved_settings, dict):
        _check_device(saved_settings, settings, checkpoint)
    _check_system_numerics(manifest, config, settings, checkpoint)
    if config["steps"] < manifest["step"]:
        raise UsageError(f"--resume {checkpoint}: --steps {config['steps']} is not past the checkpoint's "
                         f"step {manifest['step']}")
    if config["steps"] > manifest["step"]:
        _check_drain(config, int(manifest["step"]), checkpoint)


def numerics_settings(config: dict[str, Any], settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a system's numbers depend on beyond :data:`MUST_MATCH`, by the name a user sets it with.

    Systems that keep CSP's version rule (sequential and the csp family: :func:`keeps_version_rule`)
    compute sequential training at any stage count, partition, in-flight limit, cache or drain point:
    nothing more. BSP (gpipe, vpipe) reads one parameter version per bulk: the effective bulk size. Every
    other system follows its pipeline: ASP (pipedream) applies updates as backwards finish, so the
    pipeline's shape decides the numbers (stages, in-flight limit, partition, drain points); the
    artifact's relaxed check (csp-artifact) races as well, so its timing (the cache) counts too.
    ``settings``: a run's :func:`run_settings`, whose partition bounds then count for those systems.
    """
    policy = POLICIES.get(str(config.get("system")))
    stages = config.get("stages")
    if policy is None or keeps_version_rule(policy):
        return {}
    if policy.bulk_synchronous:
        return {"bulk_size (0 means --stages)": config.get("bulk_size") or stages}
    cache = config.get("cache")
    shape = {"stages": stages, "max_inflight (0 means 2 x stages)": config.get("max_inflight") or 2 * int(stages or 0),
             "checkpoint_every": config.get("checkpoint_every"), "partition_costs": config.get("partition_costs"),
             "partition_file": config.get("partition_file"), "partition_mode": config.get("partition_mode"),
             "cache": cache if isinstance(cache, dict) and cache.get("enabled") else {"enabled": False}}
    if settings is not None:
        shape["the partition's stage bounds"] = settings.get("partition")
    return shape


def keeps_version_rule(policy: type[StagePolicy]) -> bool:
    """Whether a system computes sequential training whatever its pipeline: the causal systems keep CSP's
    version rule, and the mirroring ones keep the global versions it reads (csp-no-predictor is marked not
    causal for its makespan's lower bound only). A system that is neither (csp-artifact, pipedream, gpipe, a
    new one) is taken to follow its pipeline until it declares otherwise: refusing too much costs a rerun,
    too little a hybrid."""
    return policy.causal or policy.mirroring


def _check_kernels(saved: dict[str, Any], config: dict[str, Any], checkpoint: Path) -> None:
    """The CPU kernels (config key ``numerics``) are part of the reference: a checkpoint written before the key
    existed ran ``native``."""
    theirs, ours = saved.get("numerics", "native"), config.get("numerics", "native")
    if theirs != ours:
        raise UsageError(f"--resume {checkpoint}: the checkpoint was trained with numerics={theirs}, this run asks "
                         f"for numerics={ours}; resuming would mix two kernels' bits (set numerics={theirs})")


def _check_device(saved: dict[str, Any], settings: dict[str, Any], checkpoint: Path) -> None:
    """The device type is part of the arithmetic (a GPU's kernels are not the CPU's): ``device`` names what the
    stages resolved, so ``auto`` on a CPU machine and ``auto`` on a GPU machine differ."""
    theirs, ours = saved.get("device"), settings.get("device")
    if theirs != ours:
        raise UsageError(f"--resume {checkpoint}: the checkpoint was trained on {theirs}, this run's stages run on "
                         f"{ours}; resuming would mix two devices' bits (set device={theirs} on a machine that has "
                         "it, or train again)")


def _check_system_numerics(manifest: dict[str, Any], config: dict[str, Any], settings: dict[str, Any] | None,
                           checkpoint: Path) -> None:
    saved_settings = manifest.get("settings")
    both = settings is not None and isinstance(saved_settings, dict)  # else the configs alone
    theirs = numerics_settings(manifest["config"], saved_settings if both else None)
    ours = numerics_settings(config, settings if both else None)
    for name, value in ours.items():
        if _normal(theirs.get(name)) != _normal(value):
            raise UsageError(f"--resume {checkpoint}: system {config['system']!r} computes with {name} = "
                             f"{_short(theirs.get(name))} in the checkpoint but {_short(value)} here; resuming would "
                             "train a hybrid of the two runs (set it as the checkpoint has it, or train again)")


def _check_drain(config: dict[str, Any], step: int, checkpoint: Path) -> None:
    """A resume drains the pipeline at its step; for a system that follows its pipeline only a drain the run
    makes anyway keeps its numbers."""
    policy = POLICIES.get(str(config.get("system")))
    every = int(config.get("checkpoint_every") or 0)
    follows = policy is not None and not keeps_version_rule(policy) and not policy.bulk_synchronous
    if follows and (not every or step % every):
        raise UsageError(f"--resume {checkpoint}: system {config['system']!r} drains its pipeline at the resumed "
                         f"step {step}, which checkpoint_every {every} does not (its numbers depend on where it "
                         "drains); extend only from a checkpoint at a multiple of checkpoint_every")


# -- loading ------------------------------------------------------------------
def load_layer(checkpoint: Path, layer: int) -> tuple[dict[str, torch.Tensor], dict[str, Any] | None]:
    """One layer's tensors and optimizer state (verified by the launcher before any stage started)."""
    params, optimizer = _load_shard(checkpoint, layer)
    return split_state(params)[0], optimizer


def _torch_load(path: Path) -> Any:
    """``torch.load`` of a shard, mapped; from an open file when ``path`` holds a byte that is not UTF-8 (a run
    directory named so on the command line): torch's file reader takes UTF-8 names only, so a whole checkpoint
    there was refused. The file object is read into memory (torch maps named files only): the same tensors."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        with open(path, "rb") as f:
            return torch.load(f, map_location="cpu", weights_only=True)
    return torch.load(path, map_location="cpu", weights_only=True, mmap=True)


def _load_shard(checkpoint: Path, layer: int) -> tuple[dict[str, torch.Tensor], dict[str, Any] | None]:
    """The shard as saved: a windowed shared layer's tensors include its window state."""
    path = checkpoint / layer_file(layer)
    try:
        shard = _torch_load(path)
    except (OSError, RuntimeError, ValueError) as exc:
        raise UsageError(f"checkpoint shard {path}: cannot load ({exc})") from None
    return shard["params"], shard["optimizer"]


def restore(checkpoint: Path, layers: dict[int, Any], optimizers: Any, windows: SharedWindows | None = None) -> int:
    """Load the rank's own layers (and their optimizer state) from ``checkpoint``; its step.

    A windowed shared layer's shard also holds its window state (older version, open sum),
    which goes to ``windows``.
    """
    step = int(read_manifest(checkpoint)["step"])
    if windows is not None:
        windows.resume(step)
    for layer, module in layers.items():
        params, optimizer = _load_shard(checkpoint, layer)
        params, window = split_state(params)
        module.load_state_dict(params)
        if optimizer is not None:
            optimizers.load_state_dict(layer, optimizer)  # torch moves state to the param's device
        if windows is not None and layer in windows:
            try:
                windows.load(layer, window, step)
            except ValueError as exc:
                raise UsageError(f"checkpoint shard {checkpoint / layer_file(layer)}: {exc}") from None
    return step


def trained_wall_s(manifest: dict[str, Any]) -> float | None:
    """The training wall time a checkpoint records (None for checkpoints written before it was recorded)."""
    value = manifest.get("wall_s")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _normal(value: Any) -> Any:
    return json.loads(json.dumps(value))
