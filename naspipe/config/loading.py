"""Loading a config: defaults <- YAML file <- ``--set`` overrides <- explicit flags, coerced to
the schema's types (:mod:`naspipe.config.schema`) and range-checked (:mod:`naspipe.config.validation`).

Unknown keys and wrong types are errors that name the key, so a typo never silently does
nothing; ``--set`` values are parsed as YAML scalars, as in a config file.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml

from naspipe.config.schema import Config
from naspipe.config.validation import _check_ranges
from naspipe.errors import UsageError
from naspipe.yamlio import load_unique, read_yaml


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
    _schedule_name(data)
    return config_from_dict(data)


def _schedule_name(data: dict[str, Any]) -> None:
    """A ``-mb`` system name (``csp-mb``: the fast NASPipe; ``sequential-mb``: its reference) is the system with
    :data:`naspipe.systems.MICRO_SCHEDULE`'s keys, each unless the run sets it: the name the report gives such a
    run (:func:`naspipe.systems.schedule_name`) is also the one a user trains it by."""
    from naspipe import systems

    name = data.get("system")
    if not isinstance(name, str) or not systems.is_micro_name(name) or systems.base_name(name) not in systems.names():
        return
    data["system"] = systems.base_name(name)
    for key, value in systems.MICRO_SCHEDULE.items():
        data.setdefault(key, value)


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
        raise UsageError(f"--set {key}: cannot parse value {_shown(text)} as YAML ({problem})") from None
    return key, value


def refuse_repeated_keys(items: Sequence[str], strip: str = "") -> None:
    """A UsageError naming the key when two ``--set`` items give one key (``strip``: a prefix that names nothing,
    as ``space.`` for the space options of ``profile`` and ``partition``).

    Why: the last value would win without a word, and an invalid earlier one (``--set micro_batches=banana
    --set micro_batches=1``) would never be checked. A section given after one of its own keys
    (``--set cache.budget=2x --set 'cache={...}'``) drops that key the same way, and is refused too. Called
    by the command line only: the library's :func:`load_config` keeps the last value, which is how the
    workflow's ``train_options`` override its own keys (before it writes a command line once per key).
    """
    seen: dict[str, str] = {}
    for item in items:
        key = item.partition("=")[0].strip().removeprefix(strip)
        for earlier, first in seen.items():
            if key == earlier:
                raise UsageError(f"--set {key!r} given twice ({_shown(first)}, then {_shown(item)}); "
                                 "give each key once")
            if earlier.startswith(key + "."):
                raise UsageError(f"--set {key!r} would replace the earlier --set {earlier!r} ({_shown(first)}); "
                                 "give each key once")
            if key.startswith(earlier + ".") and _holds(first, key.removeprefix(earlier + ".")):
                raise UsageError(f"--set {key!r} given twice ({_shown(first)}, then {_shown(item)}); "
                                 "give each key once")
        seen[key] = item


def _holds(item: str, path: str) -> bool:
    """Whether the mapping ``item`` sets (``cache={budget: 3x}``) has the dotted key ``path`` (``budget``)."""
    try:
        node = parse_override(item)[1]
    except UsageError:  # not YAML: no mapping, so no key in it (the value's own error comes when it is read)
        return False
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _shown(item: str) -> str:
    """An item as an error quotes it: repr, cut to 60 characters."""
    return repr(item if len(item) <= 60 else f"{item[:57]}...")


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
