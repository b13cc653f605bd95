"""Run configuration: typed, validated, every key documented, overridable with ``--set``.

A config is YAML (``--config FILE``) over built-in defaults, then ``--set key=value``
overrides (values parsed as YAML scalars, dotted keys for nesting), then the explicit flags
(``--space``, ``--system``, ``--stages``, ``--steps``, ``--seed``). Unknown keys and wrong
types are errors that name the key, so a typo never silently does nothing. ``space.*``
keys other than ``space.name`` are the space's own options, validated by the space.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from naspipe.errors import UsageError
from naspipe.yamlio import load_unique, read_yaml


def _doc(text: str, **kwargs: Any) -> Any:
    return field(metadata={"help": text}, **kwargs)


@dataclass(frozen=True)
class OptimizerConfig:
    name: Literal["sgd", "adam"] = _doc("per-layer optimizer: sgd (with momentum) or adam", default="sgd")
    lr: float = _doc("learning rate", default=0.05)
    momentum: float = _doc("sgd momentum", default=0.9)
    weight_decay: float = _doc("L2 weight decay (applied only when a layer is updated)", default=0.0)
    betas: tuple[float, float] = _doc("adam betas", default=(0.9, 0.999))
    eps: float = _doc("adam epsilon", default=1e-8)

    @property
    def state_slots(self) -> int:
        """Tensors of optimizer state torch keeps per trainable parameter: Adam's two moments, SGD's
        momentum buffer, none for SGD without momentum (the one rule for the runtime's memory check,
        its cache's layer sizes and the simulator's memory model)."""
        if self.name == "adam":
            return 2
        return 1 if self.momentum > 0 else 0


@dataclass(frozen=True)
class CacheConfig:
    enabled: bool = _doc(
        "context manager: the stage's layers live in host memory and a byte-bounded device cache holds the "
        "ones in use, fetched ahead by the predictor (systems csp, csp-no-scheduler, csp-no-predictor, and sequential "
        "for a reference too large for one device)",
        default=False,
    )
    budget: str = _doc(
        "device cache size per stage: bytes (e.g. 1048576), or 'Kx' for K times the largest share of the "
        "stage among the run's subnets (the layers it runs there, with gradients and optimizer state)",
        default="3x",
    )
    horizon: int = _doc("tasks the predictor looks ahead for prefetching; 0: fetch on demand", default=8)

    def budget_bytes(self, subnet_share: int) -> int:
        """The budget in bytes, given one subnet's share of the stage in bytes."""
        text = self.budget.strip().lower()
        if text.endswith("x"):
            return max(1, int(float(text[:-1]) * subnet_share))
        return int(text)


def cache_budget_ok(budget: str) -> bool:
    text = budget.strip().lower()
    try:
        value = float(text[:-1]) if text.endswith("x") else int(text)
    except ValueError:
        return False
    return math.isfinite(value) and value > 0


@dataclass(frozen=True)
class Config:
    seed: int = _doc("seeds parameters, batches, dropout and the subnet stream", default=0)
    system: str = _doc("scheduling policy: sequential, csp, ... (see --system)", default="csp")
    stages: int = _doc("pipeline stages D (one process per stage)", default=1)
    steps: int = _doc("subnets to train (one batch each)", default=32)
    space: dict[str, Any] = _doc(
        "search space: space.name plus that space's options, e.g. space.blocks=8",
        default_factory=lambda: {"name": "toy"},
    )
    shared_policy: Literal["frozen", "causal", "windowed"] = _doc(
        "shared (non-choice) layers: frozen at init, causal (trained by every subnet), or windowed "
        "(updated once per shared_window subnets; see docs/shared-layers.md)", default="frozen"
    )
    shared_window: int = _doc("subnets per shared-layer update under shared_policy=windowed (W)", default=8)
    optimizer: OptimizerConfig = _doc("optimizer settings", default_factory=OptimizerConfig)
    cache: CacheConfig = _doc("device cache of layers (the context manager)", default_factory=CacheConfig)
    recompute: bool = _doc("activation recomputation (checkpointing) in the backward", default=True)
    max_inflight: int = _doc("subnets in the pipeline at once; 0 means 2 x stages", default=0)
    bulk_size: int = _doc("subnets per BSP bulk (gpipe, vpipe); 0 means stages", default=0)
    partition_costs: str = _doc(
        "per-position costs for the static partition: 'params' (parameter counts), 'uniform', "
        "or a profile CSV written by 'naspipe profile'",
        default="params",
    )
    partition_file: str = _doc(
        "a partition JSON written by 'naspipe partition' whose bounds the run uses instead of computing its own "
        "(empty: compute them from partition_costs)",
        default="",
    )
    partition_mode: Literal["static", "per-subnet"] = _doc(
        "static: one partition for every subnet; per-subnet: each subnet gets its own balanced split (from "
        "partition_costs per layer; 'params' gives each candidate its own cost) and a layer's newest state "
        "follows it between stages (mirroring; systems csp, csp-no-scheduler, csp-no-predictor)",
        default="static",
    )
    subnet: list[int] = _doc(
        "train one fixed architecture every step (one choice per block, e.g. a search's best.json via "
        "'naspipe train --subnet FILE'); empty: sample subnets uniformly (SPOS supernet training)",
        default_factory=list,
    )
    checkpoint_every: int = _doc("write a checkpoint every K subnets (0: never)", default=0)
    keep_checkpoints: int = _doc("checkpoints kept on disk (oldest removed first)", default=2)
    final_checkpoint: bool = _doc(
        "end the run with a checkpoint of the whole supernet (every layer and its optimizer state), so that "
        "--resume RUN --steps M extends a finished run; counts toward keep_checkpoints",
        default=True,
    )
    trace_max_events: int = _doc(
        "trace.json events kept per stage (the first N; later ones are counted in metrics.json stage_extra "
        "trace_dropped, not written); caps the trace of very long runs; 0: no trace",
        default=1_000_000,
    )
    threads: int = _doc("intra-op threads per stage process (fixed for reproducibility)", default=1)
    device: Literal["auto", "cpu", "cuda"] = _doc("device of the stage workers", default="auto")
    timeout_s: float = _doc("seconds a stage waits on a peer before failing the run", default=300.0)
    progress: Literal["auto", "on", "off"] = _doc(
        "progress bar on the last stage (auto: when a terminal)", default="auto"
    )

    @property
    def space_name(self) -> str:
        return str(self.space["name"])

    @property
    def space_options(self) -> dict[str, Any]:
        return {k: v for k, v in self.space.items() if k != "name"}

    @property
    def inflight_limit(self) -> int:
        return self.max_inflight or 2 * self.stages

    @property
    def bulk(self) -> int:
        return self.bulk_size or self.stages

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def load_config(
    path: Path | None = None, overrides: Sequence[str] = (), flags: Mapping[str, Any] | None = None
) -> Config:
    """Defaults <- YAML file <- ``--set`` overrides <- explicit flags; validated.

    A key set both by ``--set`` and by its own flag (``--set steps=true --steps 4``) is an
    error naming both: the flag would win and the ``--set`` value, however wrong, would be
    dropped without a word.
    """
    data: dict[str, Any] = {}
    if path is not None:
        data = _read_yaml(path)
    given = {key: value for key, value in (flags or {}).items() if value is not None}
    for item in overrides:
        key, value = parse_override(item)
        if key in given:
            raise UsageError(f"--set {item.strip()!r} conflicts with the flag that sets {key!r} to {given[key]!r}; "
                             "give the value once")
        _set_dotted(data, key, value)
    for key, value in given.items():
        _set_dotted(data, key, value)
    if isinstance(data.get("space"), dict):
        data["space"].setdefault("name", "toy")
    return config_from_dict(data)


def config_from_dict(data: dict[str, Any]) -> Config:
    """A validated config from a plain mapping (e.g. the ``config`` a checkpoint manifest echoes)."""
    config = _build(Config, data, prefix="")
    _check_ranges(config)
    return config


def _read_yaml(path: Path) -> dict[str, Any]:
    data = read_yaml(path, f"config file {path}")  # a key given twice is an error, not the last one winning
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"config file {path}: expected a mapping of keys, got {type(data).__name__}")
    return data


def parse_override(item: str) -> tuple[str, Any]:
    """``"optimizer.lr=0.1"`` -> ``("optimizer.lr", 0.1)``: the one parser of ``--set KEY=VALUE``.

    The value is read as YAML, as in a config file: ``64`` is an int, ``[1, 2]`` a list,
    ``null`` (or nothing after ``=``) is None, a bare word is a string. Text that is not valid
    YAML is an error naming the key rather than a silent string, so ``--set betas=[0.9,``
    never reaches the config as ``"[0.9,"``. Used by ``naspipe train`` and ``naspipe profile``.
    """
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UsageError(f"--set {item!r}: expected KEY=VALUE")
    try:
        value = load_unique(text)
    except yaml.YAMLError as exc:
        problem = str(getattr(exc, "problem", None) or exc).splitlines()[0]
        raise UsageError(f"--set {key}: cannot parse value {text!r} as YAML ({problem})") from None
    return key, value


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise UsageError(f"config key {key!r}: {part!r} is not a section")
        node = child
    node[parts[-1]] = value


def _build(cls: type, data: Any, prefix: str) -> Any:
    if not isinstance(data, dict):
        raise UsageError(f"config key {prefix.rstrip('.') or '<root>'!r}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise UsageError(f"unknown config key {prefix + unknown[0]!r}; known keys: {', '.join(sorted(fields))}")
    values = {name: _coerce(hints[name], data[name], prefix + name) for name in data}
    return cls(**values)


def _coerce(hint: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _build(hint, value, key + ".")
    if origin is Literal:
        if isinstance(value, bool) and {"on", "off"} <= set(typing.get_args(hint)):
            value = "on" if value else "off"  # YAML reads a bare on/off as a boolean
        if value not in typing.get_args(hint):
            choices = ", ".join(map(str, typing.get_args(hint)))
            raise UsageError(f"config key {key!r}: {value!r} is not one of {choices}")
        return value
    if origin is dict:
        if not isinstance(value, dict):
            raise UsageError(f"config key {key!r}: expected a mapping, got {value!r}")
        return dict(value)
    if origin is list:
        (item,) = typing.get_args(hint)
        if not isinstance(value, (list, tuple)):
            raise UsageError(f"config key {key!r}: expected a list, got {value!r}")
        return [_coerce(item, v, key) for v in value]
    if origin is tuple:
        args = typing.get_args(hint)
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise UsageError(f"config key {key!r}: expected a list of {len(args)} numbers, got {value!r}")
        return tuple(_coerce(a, v, key) for a, v in zip(args, value, strict=True))
    return _scalar(hint, value, key)


def _scalar(hint: Any, value: Any, key: str) -> Any:
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    elif isinstance(hint, types.UnionType):
        return value
    raise UsageError(f"config key {key!r}: expected {getattr(hint, '__name__', hint)}, got {value!r}")


# per-subnet partitions: the systems that mirror layers
MIRROR_SYSTEMS = ("csp", "csp-no-scheduler", "csp-no-predictor", "csp-artifact")
# the context manager (host store + device cache): the csp family, and the sequential reference for a
# supernet too large for one device (it is still the reference: bitwise the same as without the cache)
CACHE_SYSTEMS = (*MIRROR_SYSTEMS, "sequential")


def _baseline_inflight(config: Config) -> int:
    """Subnets a baseline holds between a forward and its update: its bulk (gpipe, vpipe), ``D`` (pipedream).
    Under windowed shared layers the window must cover them, or a subnet would need a window not yet applied."""
    if config.system in ("gpipe", "vpipe"):
        return config.bulk_size or config.stages
    return config.stages if config.system == "pipedream" else 1


def _check_ranges(config: Config) -> None:
    """Every value in its range before anything runs, so a bad one is one line, not a stage traceback."""
    o = config.optimizer
    checks = [
        ("stages", config.stages >= 1, "must be >= 1"),
        ("steps", config.steps >= 1, "must be >= 1"),
        ("max_inflight", config.max_inflight >= 0, "must be >= 0"),
        ("shared_window", config.shared_window >= 1, "must be >= 1"),
        ("bulk_size", config.bulk_size >= 0, "must be >= 0"),
        ("checkpoint_every", config.checkpoint_every >= 0, "must be >= 0"),
        ("keep_checkpoints", config.keep_checkpoints >= 1, "must be >= 1"),
        ("trace_max_events", config.trace_max_events >= 0, "must be >= 0"),
        ("threads", config.threads >= 1, "must be >= 1"),
        ("timeout_s", _finite(config.timeout_s) and config.timeout_s > 0, "must be a finite number > 0"),
        ("optimizer.lr", _finite(o.lr) and o.lr > 0, "must be a finite number > 0"),
        ("optimizer.momentum", _finite(o.momentum) and 0 <= o.momentum <= 1, "must be in [0, 1]"),
        ("optimizer.weight_decay", _finite(o.weight_decay) and o.weight_decay >= 0, "must be a finite number >= 0"),
        ("optimizer.betas", all(_finite(b) and 0 <= b < 1 for b in o.betas), "must be two numbers in [0, 1)"),
        ("optimizer.eps", _finite(o.eps) and o.eps > 0, "must be a finite number > 0"),
        ("space.name", isinstance(config.space.get("name"), str), "must name a space"),
        ("cache.budget", cache_budget_ok(config.cache.budget), "must be a byte count > 0 or a multiple like 3x"),
        ("cache.horizon", config.cache.horizon >= 0, "must be >= 0"),
        ("shared_window", config.shared_policy != "windowed" or config.shared_window >= _baseline_inflight(config),
         f"must be >= the subnets {config.system} has in flight ({_baseline_inflight(config)}) under windowed"),
        ("partition_mode", config.partition_mode == "static" or config.system in MIRROR_SYSTEMS,
         f"per-subnet needs system {' or '.join(MIRROR_SYSTEMS)}"),
        ("cache.enabled", not config.cache.enabled or config.recompute,
         "needs recompute=true (without it every in-flight subnet's layers stay pinned by its saved activations)"),
        ("cache.enabled", not config.cache.enabled or config.system in CACHE_SYSTEMS,
         f"needs system {' or '.join(CACHE_SYSTEMS)}"),
    ]
    for key, ok, why in checks:
        if not ok:
            value = config.space.get("name") if key == "space.name" else _get(config, key)
            raise UsageError(f"config key {key!r}: {value!r} {why}")


def _finite(value: float) -> bool:
    return math.isfinite(value)


def _get(config: Config, key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        node = getattr(node, part)
    return node


def describe_keys() -> str:
    """One line per config key with its default and meaning, for ``--help``."""
    lines: list[str] = []

    def walk(cls: type, prefix: str) -> None:
        for f in dataclasses.fields(cls):
            hint = typing.get_type_hints(cls)[f.name]
            if isinstance(hint, type) and dataclasses.is_dataclass(hint):
                walk(hint, prefix + f.name + ".")
                continue
            default = f.default_factory() if callable(f.default_factory) else f.default
            lines.append(f"  {prefix + f.name:<24} {f.metadata.get('help', '')} (default: {default})")

    walk(Config, "")
    return "\n".join(lines)


def add_run_arguments(p: argparse.ArgumentParser, steps_help: str) -> None:
    """The flags every run-shaped command shares (``train``, ``simulate``): config file, the
    explicit keys, and ``--set``; read back with :func:`config_from_args`."""
    from naspipe.scheduling import POLICY_NAMES

    p.add_argument("--config", type=Path, help="YAML config file (keys below)")
    p.add_argument("--space", help="search space preset (e.g. toy, nlp.tiny, cv.tiny, nlp.c1); sets space.name")
    p.add_argument("--system", help=f"scheduling policy: {', '.join(POLICY_NAMES)}")
    p.add_argument("--stages", type=int, help="pipeline stages D")
    p.add_argument("--steps", type=int, help=steps_help)
    p.add_argument("--seed", type=int, help="random seed")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key (repeatable), e.g. --set optimizer.name=adam")


def config_from_args(args: argparse.Namespace, **flags: Any) -> Config:
    """The config of :func:`add_run_arguments`' flags plus a command's own ``flags`` (dotted keys)."""
    explicit = {"space.name": args.space, "system": args.system, "stages": args.stages, "steps": args.steps,
                "seed": args.seed, **flags}
    return load_config(args.config, args.overrides, explicit)
