"""Issue 41's hostile-input generator as a property test: whatever a user types, a command ends in exit 0 (valid
input) or in exactly one ``naspipe...`` line on stderr and exit 2; never a traceback, never a multi-line error.

Why generated, not tabled: tests/test_bad_input.py and tests/test_hostile_inputs.py pin the inputs someone thought
of; each hostile probe of the command line (issues 35-41) found new ones in combinations nobody listed. Here
hypothesis draws them, from a fixed seed and with no example database, so every run of the suite tries the same
cases: ``--set KEY=VALUE`` for every key ``naspipe train --help`` lists (derived from
:func:`naspipe.config.arguments.describe_keys`, never written out) and hostile flag values for train, simulate,
partition, profile, plan, compare and published. The values mix hostile text (empty, control characters, an
undecodable byte, very long, ``nan``, ``1e400``, ``2x``, ``[]``, ``null``...), paths to files, directories, binary
files and missing ones, and small numbers.

Valid runs stay cheap: every train case starts from a one-stage toy run of two steps (it runs in this process),
numbers stay within -3..64 and steps within 8; runs of two or more stages (processes, seconds each) are drawn in the
slow set only. Each case runs in its own directory (the working directory too, so a relative name a flag was given
lands there), with its own copies of the finished runs it names. The default suite draws a few cases per command;
``-m slow`` draws over 1,000.

The contract checked is the CLI's (naspipe/cli.py): exit 0; or exit 2 with one non-empty stderr line that starts
``naspipe`` (argparse's own errors included: every parser is a one-line parser); for ``compare`` also exit 1 (the
runs differ: the report is on stdout). Never ``Traceback`` on stderr, never an exception out of ``main``.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tempfile
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
import torch  # loaded before any case: numerics=portable is then refused in one line, not pinned in this process
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from naspipe import published
from naspipe.cli import main
from naspipe.config.arguments import describe_keys
from naspipe.scheduling import POLICY_NAMES
from naspipe.sim.hardware import hardware_names
from naspipe.space.registry import make_shape, space_names
from tests.conftest import ROOT

# -- what the generator draws from ------------------------------------------------------------------------------

CONFIG_KEYS = tuple(line.split()[0] for line in describe_keys().splitlines() if line.strip())
TOY_OPTIONS = tuple(make_shape("toy").options)
SPACE_KEYS = tuple(f"space.{option}" for option in TOY_OPTIONS)

HOSTILE_TEXT = (
    "", " ", "\t", "\n", "\r\n", "\x1b[31mred", "\u2028", "\udcff", "é", "日本語", "x" * 5000, "9" * 400,
    "nan", "-nan", "NaN", "inf", "-inf", ".inf", "-1", "0", "-0", "1e400", "-1e400", "1e-400", "2x", "0.5x", "0x",
    "-3x", "1.5x", "x", "[]", "{}", "[1, 2]", "[0.9,", "{a: 1}", "{{", "null", "~", "true", "false", "yes", "no",
    "banana", "'", '"', ":", "- a", "&a [*a]", "!!python/object/apply:os.getcwd []", "0x10", "0o17", "1_000",
    "+1", ".5", "1/2", "%s%n", "${HOME}", "$(echo hi)", "--help", "-", "--", "=", "a=b", "../..", "/", ".",
)
# files and directories each case's directory holds (:func:`_junk`), and names that cannot be opened
PATHS = (
    "@tmp@/missing", "@tmp@/file.txt", "@tmp@/junk", "@tmp@/binary.bin", "@tmp@/empty", "@tmp@/deep.json",
    "@tmp@/file.txt/under", "@tmp@/" + "n" * 300, "@tmp@/no\nsuch", "@tmp@", "/dev/null", "@tmp@/junk/sub",
    # the generated input files (:func:`input_files`): near-valid, so their readers' checks are reached
    "@tmp@/config.yaml", "@tmp@/profile.csv", "@tmp@/part.json", "@tmp@/subnet.json",
    "@config-odd@", "@profile-odd@", "@part-odd@", "@subnet-odd@",  # the same under a name UTF-8 cannot encode
)
OUT_PATHS = (
    "@tmp@/out", "@tmp@/out", "@tmp@/out", "", ".", "@tmp@/junk", "@tmp@/file.txt", "@tmp@/file.txt/under",
    "@tmp@/missing/deeper/out", "@tmp@/" + "o" * 300, "@tmp@/a\nb", "@tmp@/sp ace", "@tmp@/\udcff",
    "/proc/naspipe-out",  # not writable, even by root (the suite may run as root, so no read-only directory)
)
JSON_VALUES: tuple[Any, ...] = (None, True, False, 0, -1, 1.5, 10**30, float("nan"), "", "x", "\udcff", [], {},
                                [None], {"a": None}, [[[[]]]], "0" * 1000)


def numbers(low: int = -3, high: int = 64) -> st.SearchStrategy[str]:
    """Small numbers as the command line spells them: a valid run they make stays cheap."""
    return st.one_of(st.integers(low, high).map(str), st.sampled_from(["0.5", "-0.0", "1e-3", "3.0", "2.5e1"]))


def _above(text: str, high: int) -> bool:
    """Whether ``text`` reads as a number above ``high``, as argparse's ``int`` or YAML (``--set``) reads it."""
    with contextlib.suppress(ValueError):
        return int(text) > high
    with contextlib.suppress(yaml.YAMLError, RecursionError):
        value = yaml.safe_load(text)
        return isinstance(value, int | float) and not isinstance(value, bool) and value > high
    return False


# what a command line can carry: no NUL, and no surrogate but the ones Python makes of bytes that are not UTF-8
# (HOSTILE_TEXT's \udcff)
TYPED = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")


def hostile(*extra: str, low: int = -3, high: int = 64, cap: bool = False) -> st.SearchStrategy[str]:
    """Text a hostile user might type for any value: the fixed list, paths, small numbers, short random text
    (no NUL: a real command line cannot carry one) and ``extra`` (the flag's own valid values).

    Random text that reads as a number above ``high`` is left out (eight random digits as ``space.vocab`` would
    build a model of gigabytes); with ``cap`` the fixed list's huge numbers too, for a flag whose valid values
    scale the run (``--steps`` 10**400 is a valid request that never ends)."""
    fixed = st.sampled_from([t for t in HOSTILE_TEXT if not (cap and _above(t, high))])
    return st.one_of(
        fixed, st.sampled_from(PATHS), numbers(low, high),
        st.text(TYPED, max_size=8).filter(lambda t: not _above(t, high)),
        *([st.sampled_from(extra)] if extra else []),
    )


# values some key takes (none that would make a valid run large): half of the drawn values, so that several keys
# are often valid at once and the checks behind the first one are reached
PLAUSIBLE = ("true", "false", "0", "1", "2", "3", "4", "8", "10", "16", "64", "1e-3", "0.5", "1x", "2x", "0.5x",
             "critical", "fifo", "frozen", "causal", "windowed", "adam", "sgd", "static", "per-subnet", "native",
             "portable", "fp32", "bf16", "tf32", "on", "off", "auto", "cpu", "cuda", "params", "uniform", "[0, 1]",
             "sequential", "csp", "gpipe", "pipedream", "vpipe")


def set_items(keys: Sequence[str]) -> st.SearchStrategy[str]:
    """One ``--set`` argument: mostly a listed key with a hostile or plausible value, sometimes a malformed item."""
    key = st.one_of(st.sampled_from(keys), st.sampled_from(keys), st.sampled_from(keys),
                    st.sampled_from(["", "nosuch", "space.", "optimizer.lr.x", " progress", "cache.nosuch", "a b"]))
    value = st.one_of(hostile(), st.sampled_from(PLAUSIBLE))
    malformed = st.sampled_from(["banana", "=5", "=", "progress", "steps==2", "cache.budget=2x=3"])
    return st.one_of(st.builds(lambda k, v: f"{k}={v}", key, value), st.builds(lambda k, v: f"{k}={v}", key, value),
                     malformed)


# -- one case: its arguments and the files it needs -------------------------------------------------------------

FileData = bytes | Callable[["Assets"], bytes]  # a function of the assets: an edited copy of a real file
Files = tuple[tuple[str, FileData], ...]


@dataclass(frozen=True)
class Case:
    """A command line (``@tmp@``: the case's directory; ``@NAME@``: a fresh copy of asset NAME) and files
    to write into the case's directory first (bytes, or a function of the assets for edited copies)."""

    argv: tuple[str, ...]
    files: Files = ()


@dataclass(frozen=True)
class Flags:
    """A command's base flags (a valid, cheap invocation) and the strategies that replace or add them."""

    command: str
    base: dict[str, str]
    sets: tuple[str, ...] = ()
    flags: dict[str, st.SearchStrategy[str]] = field(default_factory=dict)
    switches: tuple[str, ...] = ()


NO_FILES: st.SearchStrategy[Files] = st.just(())


@st.composite
def flag_case(draw: st.DrawFn, spec: Flags, set_keys: Sequence[str] = CONFIG_KEYS,
              files: st.SearchStrategy[Files] = NO_FILES) -> Case:
    """``spec``'s base invocation with one to four hostile changes: a flag's value, a ``--set``, a switch; with the
    input files every path may name (:func:`input_files`) and the command's own ``files``."""
    base, sets = dict(spec.base), []
    kinds = ["set"] * bool(set_keys) + ["flag"] * bool(spec.flags) + ["switch"] * bool(spec.switches)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(kinds))
        if kind == "set":
            sets.append(draw(set_items(set_keys)))
        elif kind == "flag":
            name = draw(st.sampled_from(sorted(spec.flags)))
            base[name] = draw(spec.flags[name])
        else:
            base[draw(st.sampled_from(spec.switches))] = ""
    given = {item.partition("=")[0].strip() for item in sets}
    # a base --set the drawn ones would repeat (or whose section they set) is left out: the drawn value is tried
    kept = [s for s in spec.sets if not ({s.partition("=")[0], s.partition(".")[0]} & given)]
    argv = [spec.command]
    for name, value in base.items():
        argv += [name] if value == "" and name in spec.switches else [name, value]
    for item in [*kept, *sets]:
        argv += ["--set", item]
    return Case(tuple(argv), draw(input_files()) + draw(files))


TRAIN_SPACES = ("toy", "nlp.tiny", "cv.tiny")  # the tiny presets: the c presets are paper-sized models


def train_flags(stages: st.SearchStrategy[str], base_stages: str = "1") -> Flags:
    run_paths = ("@run@", "@run-odd@", "@run@/checkpoints", "@flipped@", "@badmetrics@", "@run@.partial")
    return Flags("train", {"--space": "toy", "--stages": base_stages, "--steps": "2", "--out": "@tmp@/out"},
                 sets=("space.blocks=2",),
                 flags={"--space": hostile(*TRAIN_SPACES), "--system": hostile(*POLICY_NAMES, "csp-mb"),
                        "--stages": stages, "--steps": hostile("1", "4", low=-3, high=8, cap=True),
                        "--seed": hostile("99999999999999999999", "-1"), "--checkpoint-every": numbers(-3, 8),
                        "--subnet": hostile("@tmp@/subnet.json"), "--resume": hostile(*run_paths),
                        "--out": st.sampled_from(OUT_PATHS), "--config": hostile("@tmp@/config.yaml")},
                 switches=("--overwrite",))


def train_cases(stages: st.SearchStrategy[str], base_stages: str = "1") -> st.SearchStrategy[Case]:
    return flag_case(train_flags(stages, base_stages), (*CONFIG_KEYS, *SPACE_KEYS))


TRAIN_STAGES = hostile("1", low=-3, high=1, cap=True)  # in this process: no stage is spawned
# the slow set: one case in eight starts from two stages (processes, about 6 s a valid run), some draw three
TRAIN_SLOW = st.sampled_from(["1"] * 7 + ["2"]).flatmap(
    lambda base: train_cases(st.one_of(TRAIN_STAGES, st.sampled_from(["2", "3"])), base))

SIMULATE = Flags(
    "simulate", {"--space": "toy", "--stages": "1", "--steps": "2", "--out": "@tmp@/sim"}, sets=("space.blocks=2",),
    flags={"--space": hostile(*space_names()), "--system": hostile(*POLICY_NAMES),
           "--stages": hostile("2", "4", "16", low=-3, high=16, cap=True),
           "--steps": hostile("8", low=-3, high=8, cap=True),
           "--hardware": hostile(*hardware_names(), str(ROOT / "config" / "hardware" / "cpu-local.yaml")),
           "--costs": hostile("analytic", "uniform", "@tmp@/profile.csv"),
           "--batch": hostile("config", "max", "1", "8"), "--partition-by": hostile("config", "costs"),
           "--trace-subnets": numbers(-3, 8), "--seed": numbers(), "--out": st.sampled_from(OUT_PATHS),
           "--config": hostile("@tmp@/config.yaml")},
    switches=("--overwrite",))

PARTITION = Flags(
    "partition", {"--space": "toy", "--stages": "2", "--out": "@tmp@/p.json"},
    flags={"--space": hostile(*space_names()), "--stages": hostile("1", "3", "16", low=-3, high=16),
           "--costs": hostile("params", "uniform", "@tmp@/profile.csv"),
           "--shared-policy": hostile("frozen", "causal"), "--out": st.sampled_from(OUT_PATHS)})

PROFILE = Flags(
    "profile", {"--space": "toy", "--repeats": "1", "--warmup": "0", "--out": "@tmp@/p.csv", "--quiet": ""},
    flags={"--space": hostile("toy"), "--device": hostile("cpu", "cuda"),
           "--repeats": hostile(low=-3, high=2, cap=True),
           "--warmup": hostile(low=-3, high=1, cap=True), "--seed": numbers(), "--threads": hostile(low=-3, high=2),
           "--shared-policy": hostile("frozen", "causal"), "--out": st.sampled_from(OUT_PATHS),
           "--table": st.one_of(st.sampled_from(OUT_PATHS), hostile())},
    switches=("--quiet", "--recompute", "--no-recompute"))


# -- plan: config/config.yaml with hostile values ---------------------------------------------------------------

def _key_paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path of a YAML/JSON document (mapping keys and list indexes), outermost first."""
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    paths: list[tuple[Any, ...]] = []
    for key, value in items:
        paths += [(*prefix, key), *_key_paths(value, (*prefix, key))]
    return paths


@dataclass(frozen=True)
class Edit:
    """Change the value at the ``index``-th key path of a document: chosen by index, so that the strategy need not
    know the document (the published record exists only once the assets are trained). ``how``: ``replace`` it by
    ``value``, ``delete`` the key, ``keep`` it, or make it ``like`` the old one (same type, another size:
    :func:`_like`), which passes a schema's type check and reaches the code behind it."""

    index: int
    value: Any
    how: str = "replace"

    def apply(self, data: Any) -> Any:
        data = json.loads(json.dumps(data))
        paths = _key_paths(data)
        if not paths:
            return self.value
        *parents, last = paths[self.index % len(paths)]
        holder = data
        for key in parents:
            holder = holder[key]
        if self.how == "keep":
            pass
        elif self.how == "delete":
            del holder[last]
        else:
            holder[last] = _like(holder[last], self.index, self.value) if self.how == "like" else self.value
        return data


def _like(old: Any, n: int, value: Any) -> Any:
    """A value of ``old``'s type: a bool flipped, a small number, ``value`` for a string, a list or mapping cut
    short (or a list doubled)."""
    if isinstance(old, bool):
        return not old
    if isinstance(old, int | float) or old is None:
        return n % 68 - 3
    if isinstance(old, list):
        return old + old if n % 5 == 0 else old[:n % (len(old) + 1)]
    if isinstance(old, dict):
        return dict(list(old.items())[:n % (len(old) + 1)])
    return value


EDITS = ("replace", "delete", "like", "like")


def yaml_value() -> st.SearchStrategy[Any]:
    text = st.sampled_from(HOSTILE_TEXT)
    return st.one_of(st.sampled_from(JSON_VALUES), text, st.integers(-3, 64),
                     text.map(lambda t: [t]), text.map(lambda t: {t: 1}))


def _dump_yaml(data: Any) -> bytes:
    return yaml.safe_dump(data, allow_unicode=True, sort_keys=False).encode("utf-8", "surrogateescape")


def plan_files() -> st.SearchStrategy[Files]:
    """config/config.yaml with one to three values replaced or keys removed, or a file that is no config."""
    base = yaml.safe_load((ROOT / "config" / "config.yaml").read_text(encoding="utf-8"))
    edit = st.builds(Edit, st.integers(0, 10_000), yaml_value(), st.sampled_from(EDITS))
    edits = st.lists(edit, min_size=1, max_size=3)

    def edited(chosen: list[Edit]) -> bytes:
        data = base
        for edit in chosen:
            data = edit.apply(data)
        return _dump_yaml(data)

    junk = st.sampled_from([b"", b"[]", b"\xff\xfe\x00junk", b"a: 1\na: 2\n", b"[" * 10000, b"\tsteps: 2\n",
                            b"!!python/object/apply:os.getcwd []\n", b"steps: 512\nsteps: 4\n"])
    return st.one_of(edits.map(edited), edits.map(edited), junk).map(lambda data: (("plan.yaml", data),))


PLAN = Flags("plan", {"--configfile": "@tmp@/plan.yaml"},
             flags={"--configfile": hostile("@tmp@/plan.yaml", "@plan-odd@"), "--hardware": hostile(*hardware_names())})


# -- the input files every path may name ---------------------------------------------------------------------

JUNK_FILES = (b"", b"[]", b"{}", b"null", b"\xff\xfe\x00junk", b"[" * 10_000, b"{broken", b"banana\n", b"a,b\n1\n")
CONFIG_JUNK = (b"a: 1\na: 2\n", b"\tsteps: 2\n", b"space: {name: toy, blocks: 2}\nspace.blocks: 3\n",
               b"!!python/object/apply:os.getcwd []\n", b"cache: 3\n", b"optimizer: [sgd]\n")
SUBNETS = (b'{"choices": [0, 1]}', b'{"choices": [0, 3]}', b'{"choices": [0, 9]}', b'{"choices": [0]}',
           b'{"choices": [-1, 0]}', b'{"choices": [0.5, true]}', b'{"choices": "01"}', b"[[0, 1]]", b"[[0, 1], [1, 0]]",
           b'{"subnets": [[1, 2]]}', b'{"subnets": []}', b'{"choices": [0, 1e400]}',
           b'{"choices": [0, 1' + b"0" * 30 + b"]}")


def _csv_edit(index: int, text: str) -> Callable[[Assets], bytes]:
    """The real toy profile with its ``index``-th cell replaced by ``text``."""
    def edit(assets: Assets) -> bytes:
        rows = [line.split(",") for line in assets.profile.decode().splitlines()]
        cells = [(r, c) for r in range(len(rows)) for c in range(len(rows[r]))]
        r, c = cells[index % len(cells)]
        rows[r][c] = text
        return "".join(",".join(row) + "\n" for row in rows).encode("utf-8", "surrogateescape")
    return edit


def _partition_edit(edit: Edit, stages: int) -> Callable[[Assets], bytes]:
    """The real toy partition over ``stages`` stages (blocks=2), edited."""
    return lambda assets: _dump_json(edit.apply(assets.partitions[stages]))


def _dump_json(data: Any) -> bytes:
    return json.dumps(data, ensure_ascii=False).encode("utf-8", "surrogateescape")


@st.composite
def input_files(draw: st.DrawFn) -> Files:
    """``config.yaml`` (one key, any value), ``profile.csv`` and ``part.json`` (the real ones for the toy space
    with blocks=2, kept or with a value changed) and ``subnet.json``; each sometimes junk."""
    keys, junk = (*CONFIG_KEYS, *SPACE_KEYS), st.sampled_from(JUNK_FILES)
    entry = st.builds(lambda k, v: f"{k}: {v}\n".encode("utf-8", "surrogateescape"), st.sampled_from(keys),
                      st.one_of(hostile(), st.sampled_from(PLAUSIBLE)))
    edit = st.builds(Edit, st.integers(0, 10_000), st.one_of(yaml_value(), st.integers(-3, 8)),
                     st.sampled_from(("keep", *EDITS)))
    files: dict[str, st.SearchStrategy[FileData]] = {
        "config.yaml": st.one_of(entry, entry, junk, st.sampled_from(CONFIG_JUNK)),
        "profile.csv": st.one_of(junk, st.just(lambda assets: assets.profile),
                                 st.builds(_csv_edit, st.integers(0, 10_000), hostile())),
        "part.json": st.one_of(junk, st.builds(_partition_edit, edit, st.sampled_from([1, 2]))),
        "subnet.json": st.one_of(junk, st.sampled_from(SUBNETS)),
    }
    return tuple((name, draw(strategy)) for name, strategy in files.items())


# -- compare and published: finished runs, damaged copies, junk ---------------------------------------------------

RUN_TOKENS = ("@run@", "@run-odd@", "@same@", "@same-odd@", "@run2@", "@flipped@", "@badmetrics@", "@nodigest@",
              "@binlosses@", "@run@/checkpoints")


@st.composite
def compare_cases(draw: st.DrawFn) -> Case:
    run = st.one_of(st.sampled_from(RUN_TOKENS), st.sampled_from(RUN_TOKENS), hostile())
    argv = ["compare", *draw(st.lists(run, min_size=draw(st.sampled_from([2, 2, 1])), max_size=3))]
    if draw(st.booleans()):
        argv += ["--undigested", *draw(st.lists(run, min_size=0, max_size=2))]
    return Case(tuple(argv))


def _record_edit(edit: Edit) -> Callable[[Assets], bytes]:
    return lambda assets: json.dumps(edit.apply(assets.record), ensure_ascii=False).encode("utf-8", "surrogateescape")


RECORD_FILES = st.one_of(
    st.builds(Edit, st.integers(0, 10_000), st.sampled_from(JSON_VALUES), st.sampled_from(EDITS)).map(
        lambda edit: (("record.json", _record_edit(edit)),)),
    st.sampled_from([b"{}", b"null", b'"s"', b"[]", b"{broken", b"\xff\x00", b"[" * 100_000,
                     b'{"runs": {"x": {}}, "tables": {}}', b'{"runs": {}, "tables": {}, "config": []}']).map(
        lambda data: (("record.json", data),)),
)
RESULTS_TOKENS = ("@results@", "@results-odd@", "@results-flipped@", "@results-bintable@")
PUBLISHED = Flags(
    "published", {"--results": "@results@", "--expected": "@record@", "--out": "@tmp@/v.md", "--json": "@tmp@/r.json"},
    flags={"--results": hostile(*RESULTS_TOKENS), "--expected": hostile("@tmp@/record.json", "@record-odd@"),
           "--config-json": hostile('{"steps": 4}', "[" * 10_000, '{"a": {"b": [1, null]}}', "{}"),
           "--out": st.sampled_from(OUT_PATHS), "--json": st.sampled_from(OUT_PATHS),
           "--report": st.one_of(st.sampled_from(OUT_PATHS), hostile("@tmp@/file.txt"))})


# -- the assets: two finished runs, a results tree and its record ----------------------------------------------

@dataclass(frozen=True)
class Assets:
    run: Path  # a finished toy run (blocks=2) with checkpoints
    run2: Path  # the same with another seed: compare says they differ
    record: dict[str, Any] = field(default_factory=dict)  # published.collect of a results tree holding ``run``
    partitions: dict[int, dict[str, Any]] = field(default_factory=dict)  # naspipe partition of that space, D = 1, 2
    profile: bytes = b""  # naspipe profile of that space


def _edit_file(name: str, edit: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        (run / name).write_bytes(edit((run / name).read_bytes()))
    return apply


def _flip_hex(data: bytes) -> bytes:
    line = data.index(b"\n") + 1  # first digit of the first layer's digest
    at = data.index(b",", line) + 1
    return data[:at] + (b"0" if data[at:at + 1] != b"0" else b"1") + data[at + 1:]


DAMAGE: dict[str, Callable[[Path], None]] = {
    "flipped": _edit_file("layer_hashes.csv", _flip_hex),
    "badmetrics": _edit_file("metrics.json", lambda data: b"{broken"),
    "nodigest": lambda run: (run / "outputs.sha256").unlink(),
    "binlosses": _edit_file("losses.csv", lambda data: b"\xff\xfe\x00" + data[3:]),
}


def _results(case: Path, assets: Assets, name: str, damage: Callable[[Path], None] | None = None,
             table: bytes = b"a,b\n1,2\n") -> Path:
    """A results tree holding a copy of the run (damaged by ``damage``) and one published table."""
    tree = case / name
    run = tree / "runs" / "toy" / "csp" / "D1-seed0"
    shutil.copytree(assets.run, run, ignore=shutil.ignore_patterns("checkpoints"))
    if damage is not None:
        damage(run)
    (tree / "tables").mkdir()
    (tree / "tables" / "table3_reproducibility.csv").write_bytes(table)
    return tree


def _run_copy(source: Callable[[Assets], Path], damage: Callable[[Path], None] | None = None
              ) -> Callable[[Path, Assets, str], Path]:
    def make(case: Path, assets: Assets, name: str) -> Path:
        shutil.copytree(source(assets), case / name)
        if damage is not None:
            damage(case / name)
        return case / name
    return make


BUILDERS: dict[str, Callable[[Path, Assets, str], Path]] = {
    "run": _run_copy(lambda a: a.run), "same": _run_copy(lambda a: a.run), "run2": _run_copy(lambda a: a.run2),
    **{name: _run_copy(lambda a: a.run, damage) for name, damage in DAMAGE.items()},
    "results": lambda case, assets, name: _results(case, assets, name),
    "results-flipped": lambda case, assets, name: _results(case, assets, name, DAMAGE["flipped"]),
    "results-bintable": lambda case, assets, name: _results(case, assets, name, table=b"\xff\x00\xfe"),
    "record": lambda case, assets, name: _write(case / name, json.dumps(assets.record).encode()),
}
# the same under a name a shell can give and UTF-8 cannot print: a space, a byte that is not UTF-8 (\udcff, as
# Python reads it from the command line), a line separator, an accent; a command that prints the path on stdout
# must not fail to encode it
ODD = "odd \udcff\u2028é "


def _oddly_named(build: Callable[[Path, Assets, str], Path]) -> Callable[[Path, Assets, str], Path]:
    return lambda case, assets, name: build(case, assets, ODD + name)


BUILDERS.update({f"{name}-odd": _oddly_named(BUILDERS[name]) for name in ("run", "same", "results", "record")})


def _odd_copy(file: str) -> Callable[[Path, Assets, str], Path]:
    return lambda case, assets, name: _copy_file(case / file, case / f"{ODD}{file}")


BUILDERS.update({f"{Path(file).stem}-odd": _odd_copy(file)
                 for file in ("plan.yaml", "config.yaml", "profile.csv", "part.json", "subnet.json")})


def _copy_file(source: Path, target: Path) -> Path:
    if source.exists():
        shutil.copyfile(source, target)
    return target


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _junk(case: Path) -> None:
    """The files :data:`PATHS` names: text, binary, empty, deeply nested JSON, a directory of junk."""
    (case / "file.txt").write_text("banana\n")
    (case / "binary.bin").write_bytes(bytes(range(256)) * 4)
    (case / "empty").write_bytes(b"")
    (case / "deep.json").write_text("[" * 100_000)
    (case / "junk" / "sub").mkdir(parents=True)
    for name, data in {"a.txt": b"x\n", "b.bin": b"\xff\x00", ".hidden": b"", "sub/c.csv": b"a,b\n1\n"}.items():
        (case / "junk" / name).write_bytes(data)


def materialize(case: Case, directory: Path, assets: Assets) -> list[str]:
    """The case's arguments with its tokens replaced by paths under ``directory`` (files written, copies made)."""
    _junk(directory)
    for name, data in case.files:
        (directory / name).write_bytes(data(assets) if callable(data) else data)
    made: dict[str, str] = {}
    argv = []
    for arg in case.argv:
        for name, build in BUILDERS.items():
            token = f"@{name}@"
            if token in arg:
                if token not in made:
                    made[token] = str(build(directory, assets, name))
                arg = arg.replace(token, made[token])
        argv.append(arg.replace("@tmp@", str(directory)))
    return argv


# -- running a case and checking the contract -------------------------------------------------------------------

@contextlib.contextmanager
def _torch_state() -> Iterator[None]:
    """A case may set torch's intra-op threads (``threads``, ``profile --threads``): the next case and the next
    test start with this process's own."""
    threads = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def run_case(argv: list[str], directory: Path, capfd: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``naspipe ARGV`` in-process in ``directory``: (status, stdout, stderr); an exception out of ``main`` is
    status -1 with its traceback as stderr (argparse's ``SystemExit`` is a status, as in a real process).

    stdout is strict UTF-8, as a real process's is under a UTF-8 locale such as en_US.UTF-8 (pytest's capture
    would replace what cannot be encoded); stderr is captured at the descriptor, so a stage process's traceback
    is seen too."""
    capfd.readouterr()
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)
    status, trace = -1, ""
    with _torch_state(), contextlib.chdir(directory), contextlib.redirect_stdout(stdout):
        try:
            status = main(argv)
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: B036 - anything else would be a traceback for the user
            trace = traceback.format_exc()
    err = capfd.readouterr().err + trace
    return status, cast(io.BytesIO, stdout.buffer).getvalue().decode("utf-8", "replace"), err


def check_contract(argv: Sequence[str], status: int, out: str, err: str) -> None:
    """Exit 0; exit 2 with one ``naspipe`` line on stderr; for compare also exit 1 (the runs differ). No traceback."""
    shown = f"naspipe {argv!r} -> exit {status}\nstderr:\n{err}"
    assert "Traceback" not in err, shown
    lines = [line for line in err.splitlines() if line.strip()]
    if status == 0:
        return
    if status == 1 and argv[0] == "compare":
        assert out.strip() and len(lines) <= 1, shown
        return
    assert status == 2, shown
    assert len(lines) == 1 and lines[0].startswith("naspipe"), shown


def check_case(case: Case, tmp_path: Path, assets: Assets, capfd: pytest.CaptureFixture[str]) -> None:
    directory = Path(tempfile.mkdtemp(dir=tmp_path))
    try:
        argv = materialize(case, directory, assets)
        check_contract(argv, *run_case(argv, directory, capfd))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> Assets:
    """The real files the cases copy and edit, made by the commands themselves (toy space, blocks=2)."""
    root = tmp_path_factory.mktemp("hostile-assets")
    for seed in ("0", "1"):
        assert main(["train", "--space", "toy", "--steps", "4", "--checkpoint-every", "2", "--seed", seed,
                     "--set", "space.blocks=2", "--set", "progress=off", "--out", str(root / f"run{seed}")]) == 0
    for stages in (1, 2):
        assert main(["partition", "--space", "toy", "--set", "blocks=2", "--stages", str(stages),
                     "--out", str(root / f"part{stages}.json")]) == 0
    assert main(["profile", "--space", "toy", "--set", "blocks=2", "--repeats", "1", "--warmup", "0", "--quiet",
                 "--out", str(root / "profile.csv")]) == 0
    runs = Assets(root / "run0", root / "run1")
    return Assets(runs.run, runs.run2, published.collect(_results(root, runs, "tree"), {}),
                  {d: json.loads((root / f"part{d}.json").read_text()) for d in (1, 2)},
                  (root / "profile.csv").read_bytes())


# -- the properties: a few cases per command by default, over 1,000 in the slow set -------------------------------

COMMANDS: dict[str, st.SearchStrategy[Case]] = {
    "train": train_cases(TRAIN_STAGES),
    "simulate": flag_case(SIMULATE, (*CONFIG_KEYS, *SPACE_KEYS)),
    "partition": flag_case(PARTITION, TOY_OPTIONS),
    "profile": flag_case(PROFILE, TOY_OPTIONS),
    "plan": flag_case(PLAN, (), plan_files()),
    "compare": compare_cases(),
    "published": flag_case(PUBLISHED, (), RECORD_FILES),
}
DEFAULT_EXAMPLES = {"train": 14, "simulate": 10, "partition": 8, "profile": 6, "plan": 6, "compare": 8,
                    "published": 10}
SLOW_EXAMPLES = {"train": 300, "simulate": 200, "partition": 100, "profile": 100, "plan": 100, "compare": 100,
                 "published": 120}
SLOW_STRATEGIES = {**COMMANDS, "train": TRAIN_SLOW}


def _settings(examples: int) -> settings:
    return settings(derandomize=True, database=None, deadline=None, max_examples=examples, print_blob=False,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large])


def test_the_keys_are_those_train_help_lists() -> None:
    """The generator's keys come from ``naspipe train --help``'s own list: a key added to the config is drawn."""
    assert {"micro_batches", "cache.budget", "optimizer.lr", "timeout_s", "precision"} <= set(CONFIG_KEYS)
    assert len(set(CONFIG_KEYS)) == len(CONFIG_KEYS) >= 30
    assert sum(DEFAULT_EXAMPLES.values()) >= 50 and sum(SLOW_EXAMPLES.values()) >= 1000


LENGTHS = {"default": (DEFAULT_EXAMPLES, COMMANDS), "long": (SLOW_EXAMPLES, SLOW_STRATEGIES)}


@pytest.mark.parametrize("length", ["default", pytest.param("long", marks=pytest.mark.slow)])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_hostile_input_is_exit_0_or_one_line_exit_2(command: str, length: str, tmp_path: Path, assets: Assets,
                                                     capfd: pytest.CaptureFixture[str]) -> None:
    """Drawn inputs of every command; the slow set draws ``SLOW_EXAMPLES`` of them, train's at length."""
    examples, strategies = LENGTHS[length]

    @_settings(examples[command])
    @given(case=strategies[command])
    def check(case: Case) -> None:
        check_case(case, tmp_path, assets, capfd)

    check()


# -- what the generator found (each failed before its fix) --------------------------------------------------------

def test_a_run_path_utf8_cannot_encode_is_printed_escaped(tmp_path: Path, assets: Assets,
                                                          capfd: pytest.CaptureFixture[str]) -> None:
    """``naspipe compare $'odd \\xff' run`` under a strict UTF-8 stdout (a real process under en_US.UTF-8): the
    verdict line names the run, and printing it was a UnicodeEncodeError traceback, exit 1. Now the path is shown
    escaped, as on stderr."""
    odd = tmp_path / f"{ODD}run"
    shutil.copytree(assets.run, odd)
    argv = ["compare", str(odd), str(assets.run)]
    status, out, err = run_case(argv, tmp_path, capfd)
    check_contract(argv, status, out, err)
    assert status == 0 and out.startswith("IDENTICAL: ") and "odd \\udcff\u2028é run" in out, out


def test_a_config_path_utf8_cannot_encode_is_printed_escaped(tmp_path: Path, capfd: pytest.CaptureFixture[str]
                                                             ) -> None:
    """``naspipe plan --configfile $'\\xff.yaml'`` prints the file's name in its first line: the same traceback."""
    config = tmp_path / f"{ODD}plan.yaml"
    shutil.copyfile(ROOT / "config" / "config.yaml", config)
    argv = ["plan", "--configfile", str(config)]
    status, out, err = run_case(argv, tmp_path, capfd)
    check_contract(argv, status, out, err)
    assert status == 0 and "odd \\udcff" in out.splitlines()[0], out


@pytest.mark.parametrize("command", ["partition", "simulate"])
def test_a_costs_path_utf8_cannot_encode_is_written_escaped(command: str, tmp_path: Path, assets: Assets,
                                                            capfd: pytest.CaptureFixture[str]) -> None:
    """``--costs $'odd \\xff.csv'`` (a real profile): the output JSON records the costs' path, and writing it was a
    UnicodeEncodeError traceback. Now the file is UTF-8 with the path escaped, and reads back as given."""
    costs = tmp_path / f"{ODD}profile.csv"
    costs.write_bytes(assets.profile)
    out = tmp_path / ("out.json" if command == "partition" else "out")  # a JSON file, a directory
    stages = ["--stages", "1"] if command == "partition" else ["--stages", "1", "--steps", "2"]
    space = ["--set", "blocks=2"] if command == "partition" else ["--set", "space.blocks=2"]
    argv = [command, "--space", "toy", *space, *stages, "--costs", str(costs), "--out", str(out)]
    status, stdout, err = run_case(argv, tmp_path, capfd)
    check_contract(argv, status, stdout, err)
    assert status == 0, err
    written = [p for p in out.rglob("*") if p.is_file()] if out.is_dir() else [out]
    assert any(str(costs) in json.dumps(json.loads(p.read_bytes().decode("utf-8")), ensure_ascii=False)
               for p in written if p.suffix == ".json"), written


def test_a_record_path_utf8_cannot_encode_is_written_escaped(tmp_path: Path, assets: Assets,
                                                             capfd: pytest.CaptureFixture[str]) -> None:
    """``naspipe published --expected $'odd \\xff.json'``: the verdict and the report name the record, and writing
    them was a UnicodeEncodeError traceback (after --json was written)."""
    expected = _write(tmp_path / f"{ODD}record.json", json.dumps(assets.record).encode())
    results, verdict, report = _results(tmp_path, assets, "results"), tmp_path / "v.md", tmp_path / "report.md"
    report.write_text("# Report\n")
    argv = ["published", "--results", str(results), "--expected", str(expected), "--out", str(verdict),
            "--json", str(tmp_path / "r.json"), "--report", str(report)]
    status, out, err = run_case(argv, tmp_path, capfd)
    check_contract(argv, status, out, err)
    assert status == 0, err
    assert "odd \\udcff" in verdict.read_bytes().decode("utf-8") and "odd \\udcff" in out
    assert "bit for bit" in report.read_bytes().decode("utf-8")


def test_a_run_under_a_path_utf8_cannot_encode_resumes(tmp_path: Path, assets: Assets,
                                                       capfd: pytest.CaptureFixture[str]) -> None:
    """``naspipe train --resume $'r\\xff'`` (a run trained there, its checkpoints whole) was refused in one line:
    "checkpoint shard ...: cannot load ('utf-8' codec can't encode ...)", torch's file reader taking UTF-8 names
    only. Found beside the generator, whose contract a one-line refusal meets: it resumes as the same run does
    under a plain name."""
    losses = []
    for name in (f"{ODD}run", "plain"):
        run = tmp_path / name
        shutil.copytree(assets.run, run)
        argv = ["train", "--space", "toy", "--steps", "6", "--set", "space.blocks=2", "--resume", str(run),
                "--out", str(tmp_path / f"{name}-extended")]
        status, out, err = run_case(argv, tmp_path, capfd)
        check_contract(argv, status, out, err)
        assert status == 0, err
        losses.append((tmp_path / f"{name}-extended" / "losses.csv").read_bytes())
    assert losses[0] == losses[1] and losses[0].count(b"\n") == 7  # the header and 6 subnets
