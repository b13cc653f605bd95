"""The config's command-line wiring: the flags every run-shaped command shares (``--config``,
``--set``, the explicit keys), reading them back into a :class:`~naspipe.config.schema.Config`,
and the per-key help text shown by ``--help``.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from pathlib import Path
from typing import Any

from naspipe.config.loading import load_config, refuse_repeated_keys
from naspipe.config.schema import Config


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
    p.add_argument("--system", help="scheduling policy: csp-mb (the fast NASPipe: csp with each subnet's batch in "
                   "parts, micro_batches=4, a split backward and critical-path priorities unless --set says "
                   f"otherwise), sequential-mb (its reference), gpipe-mb and vpipe-mb (the bulk-synchronous baselines "
                   f"with the same parts), {', '.join(POLICY_NAMES)}")
    p.add_argument("--stages", type=int, help="pipeline stages D")
    p.add_argument("--replicas", type=int, help="processes per stage R (csp; must divide micro_batches): the run uses "
                   "D x R processes and equals sequential with the same micro_batches; sets replicas")
    p.add_argument("--steps", type=int, help=steps_help)
    p.add_argument("--seed", type=int, help="random seed")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key (repeatable), e.g. --set optimizer.name=adam")


def config_from_args(args: argparse.Namespace, **flags: Any) -> Config:
    """The config of :func:`add_run_arguments`' flags plus a command's own ``flags`` (dotted keys); each
    ``--set`` key given once (:func:`~naspipe.config.loading.refuse_repeated_keys`)."""
    refuse_repeated_keys(args.overrides)
    explicit = {"space.name": args.space, "system": args.system, "stages": args.stages, "replicas": args.replicas,
                "steps": args.steps,
                "seed": args.seed, **flags}
    return load_config(args.config, args.overrides, explicit)
