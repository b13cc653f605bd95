"""Run configuration: typed, validated, every key documented, overridable with ``--set``.

A config is YAML (``--config FILE``) over built-in defaults, then ``--set key=value``
overrides (values parsed as YAML scalars, dotted keys for nesting), then the explicit flags
(``--space``, ``--system``, ``--stages``, ``--steps``, ``--seed``). Unknown keys and wrong
types are errors that name the key, so a typo never silently does nothing. ``space.*``
keys other than ``space.name`` are the space's own options, validated by the space.

The package is split by concern: :mod:`~naspipe.config.schema` (the dataclasses, defaults and
help text), :mod:`~naspipe.config.loading` (YAML, ``--set``, coercion to the schema's types),
:mod:`~naspipe.config.validation` (range checks and the systems lists they use) and
:mod:`~naspipe.config.arguments` (the argparse flags of ``train`` and ``simulate``). Every
name is re-exported here: ``from naspipe.config import Config`` is how the rest of the
package imports them.
"""

from __future__ import annotations

from naspipe.config.arguments import add_run_arguments, config_from_args, describe_keys
from naspipe.config.loading import config_from_dict, load_config, parse_override
from naspipe.config.schema import CacheConfig, Config, OptimizerConfig
from naspipe.config.validation import CACHE_SYSTEMS, MIRROR_SYSTEMS, cache_budget_ok

__all__ = [
    "CACHE_SYSTEMS",
    "MIRROR_SYSTEMS",
    "CacheConfig",
    "Config",
    "OptimizerConfig",
    "add_run_arguments",
    "cache_budget_ok",
    "config_from_args",
    "config_from_dict",
    "describe_keys",
    "load_config",
    "parse_override",
]
