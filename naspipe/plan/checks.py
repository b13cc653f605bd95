"""The workflow configuration's checks before any job: one line naming the key on the first problem.

Snakemake's ``validate()`` decides whether the config matches ``workflow/schemas/config.schema.yaml``
(and fills its defaults); its own message is a multi-line dump, so :func:`schema_error` restates the
best-matching cause as ``KEY: problem``. The schema cannot see across keys or onto the disk, so
:func:`check_references` checks that dataset paths exist and that every space reads a dataset of its
family; :func:`check_duplicate_keys` refuses a config file holding one key twice, which Snakemake's
YAML loader would resolve silently.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NoReturn

import jsonschema
import yaml

from naspipe.data.download import missing_path_message
from naspipe.plan.datasets import DATA_FAMILY, PATH_KEYS, SPACE_FAMILY


class ConfigError(Exception):
    """A workflow config problem: ``key`` is the dotted config key to change."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key, self.message = key, message


def fail(error: ConfigError) -> NoReturn:
    """Stop the workflow before any job with one line (a traceback would bury the key)."""
    print(f"naspipe workflow: config error: {error}", file=sys.stderr)
    raise SystemExit(2)


def schema_error(config: dict[str, Any], schema_file: Path) -> ConfigError:
    """The best-matching schema violation of ``config`` (``validate()`` found one) as one key and message."""
    schema = yaml.safe_load(schema_file.read_text(encoding="utf-8"))
    cause = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(config))
    if cause is None:  # validate() and this validator disagree: name the schema rather than guess
        return ConfigError("(top level)", f"does not match {schema_file}")
    path = [str(p) for p in cause.absolute_path]
    message = cause.message.replace("\n", " ")
    if cause.validator == "additionalProperties" and isinstance(cause.instance, dict):
        known = cause.schema.get("properties", {})
        path.append(sorted(k for k in cause.instance if k not in known)[0])
        message = f"unknown key (allowed: {', '.join(known) or 'none'})"
    elif cause.validator == "required" and isinstance(cause.instance, dict):
        path.append([k for k in cause.validator_value if k not in cause.instance][0])
        message = "required key missing"
    return ConfigError(".".join(path) or "(top level)", message)


def check_references(config: dict[str, Any]) -> None:
    """Dataset paths exist; every space's dataset is a key of ``datasets`` and of the space's family."""
    for name, dataset in config["datasets"].items():
        if "source" in dataset:  # fetched by workflow/rules/download.smk, which checks it
            continue
        for field in PATH_KEYS:
            if field in dataset and not Path(dataset[field]).exists():
                raise ConfigError(f"datasets.{name}.{field}", missing_path_message(dataset, field))
    for name, space in config["spaces"].items():
        dataset = space.get("dataset")
        if dataset is None:
            continue
        if dataset not in config["datasets"]:
            raise ConfigError(f"spaces.{name}.dataset", f"{dataset!r} is not a key of datasets")
        family = DATA_FAMILY[config["datasets"][dataset]["kind"]]
        if SPACE_FAMILY[name.split(".")[0]] != family:
            raise ConfigError(f"spaces.{name}.dataset", f"{dataset!r} is a {family} dataset, not for space {name}")


def check_micro(config: dict[str, Any]) -> None:
    """The ``micro`` block, when a micro-batched (``-mb``) system is trained or simulated: it must split the
    batch (or the backward), and every trained space's batch must hold a sample per part."""
    from naspipe import systems
    from naspipe.plan.jobs import micro
    from naspipe.space import make_shape

    simulated = any(systems.is_micro_name(s) for s in (config.get("simulate") or {}).get("systems", []))
    trained = any(systems.is_micro_name(s) for s in config["systems"])
    for key, used, block in (("micro", trained, micro(config)), ("simulate.micro", simulated, micro(config, True))):
        if used and int(block["micro_batches"]) == 1 and not block["split_backward"]:
            raise ConfigError(key, "micro_batches 1 without split_backward is csp's own schedule: list csp, not csp-mb")
    parts = int(micro(config)["micro_batches"])
    check_layouts(config, parts)
    if not trained:
        return
    for name, space in config["spaces"].items():
        batch = make_shape(name, (space or {}).get("options") or {}).options.get("batch_size")
        if isinstance(batch, int) and parts > batch:
            raise ConfigError("micro.micro_batches", f"{parts} exceeds space {name}'s batch_size {batch}: each part "
                              "needs at least one sample")


def check_layouts(config: dict[str, Any], parts: int) -> None:
    """The ``layouts`` csp-mb trains at: csp-mb trained, and each layout's replicas dividing its parts."""
    from naspipe.plan.jobs import REPLICATED_SYSTEMS, layouts

    if not set(REPLICATED_SYSTEMS) & set(config["systems"]):
        return  # the layouts apply to those systems only (a config may train a subset of the default's systems)
    for stages, replicas in layouts(config):
        if parts % replicas:
            raise ConfigError("layouts", f"{stages}x{replicas}: {replicas} replicas must divide micro.micro_batches "
                              f"({parts}), each replica running the same number of parts")


def check_duplicate_keys(config_files: Iterable[str | Path]) -> None:
    """Refuse a config file holding a key twice (naspipe's own loader, naspipe/yamlio.py, does the same)."""
    for config_file in config_files:
        nodes = [yaml.compose(Path(config_file).read_text(encoding="utf-8"), Loader=yaml.SafeLoader)]
        while nodes:
            node = nodes.pop()
            if isinstance(node, yaml.MappingNode):
                seen: set[str] = set()
                for key, value in node.value:
                    if key.value in seen:
                        where = f"{config_file} line {key.start_mark.line + 1}"
                        raise ConfigError(key.value, f"given twice in {where} (the last would win silently)")
                    seen.add(key.value)
                    nodes.append(value)
            elif isinstance(node, yaml.SequenceNode):
                nodes.extend(node.value)
