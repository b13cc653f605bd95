"""The SLURM account of a cluster run, checked on the submitting host before any job is submitted (issue 37).

The account is the ``slurm_account`` resource: ``default-resources: slurm_account: NAME`` in
profiles/slurm/config.yaml, or ``--default-resources slurm_account=NAME`` on the command line (a rule may
set its own); the SLURM executor plugin passes it to ``sbatch -A``. Why check it here rather than leave it
to the plugin: the plugin (2.8.0) checks an account only when it submits the job that carries it, after
the local jobs before it have run, and it cannot guess one (its ``sacct ... | tail -1`` passes ``|``,
``tail`` and ``-1`` to sacct as arguments), so on a cluster that enforces associations a user without a
default account had every job refused. The workflow's ``onstart`` handler calls :func:`check_jobs`.
"""

from __future__ import annotations

import getpass
import re
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from naspipe.plan.checks import ConfigError

KEY = "slurm_account"
HOW = ("set it with `default-resources: slurm_account: NAME` in the profile (profiles/slurm/config.yaml) or "
       "`--default-resources slurm_account=NAME`")
TIMEOUT_S = 60.0
Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def run_command(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """Run a SLURM client command, bounded (a hung slurmdbd must not hang the workflow's start)."""
    try:
        return subprocess.run(list(args), capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(list(args), 127, "", str(exc))


def job_accounts(jobs: Iterable[tuple[str, Mapping[str, Any]]]) -> tuple[dict[str, list[str]], list[str]]:
    """(account -> the rules whose jobs carry it, the rules whose jobs carry none), from (rule, resources)."""
    accounts: dict[str, list[str]] = {}
    without: list[str] = []
    for rule, resources in jobs:
        names = [a for a in re.split(r"[,\s]+", str(resources.get(KEY) or "")) if a]
        for name in names:
            accounts.setdefault(name, []).append(rule)
        if not names:
            without.append(rule)
    return {a: sorted(set(r)) for a, r in accounts.items()}, sorted(set(without))


def user_accounts(user: str, run: Runner) -> set[str]:
    """The accounts ``user`` has an association with (lower case, as SLURM compares them)."""
    done = run(["sacctmgr", "-nP", "show", "associations", f"user={user}", "format=account"])
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise ConfigError(KEY, f"cannot list the accounts of user {user} (sacctmgr show associations: "
                               f"{detail[-1] if detail else f'exit {done.returncode}'}); the plugin could not either")
    return {line.strip().lower() for line in done.stdout.splitlines() if line.strip()}


def requires_account(user: str, run: Runner) -> bool:
    """Whether a job without ``-A`` would be refused: associations enforced and no default account for ``user``."""
    config = run(["scontrol", "show", "config"]).stdout
    enforce = re.search(r"^AccountingStorageEnforce\s*=\s*(\S*)", config, re.M)
    if enforce is None or "associations" not in enforce.group(1).lower():
        return False
    default = run(["sacctmgr", "-nP", "show", "user", user, "format=defaultaccount"])
    return default.returncode != 0 or not default.stdout.strip()


def check(accounts: Mapping[str, Sequence[str]], without: Sequence[str], user: str, run: Runner = run_command) -> None:
    """Refuse (ConfigError, one line) an account ``user`` may not use, or no account where the cluster needs one."""
    if accounts:
        known = user_accounts(user, run)
        for name, rules in sorted(accounts.items()):
            if name.lower() not in known:
                listed = ", ".join(sorted(known)) or "none"
                raise ConfigError(KEY, f"{name!r} (jobs of {', '.join(rules)}) is not an account of user {user} "
                                       f"on this cluster (sacctmgr lists: {listed})")
    if without and requires_account(user, run):
        raise ConfigError(KEY, f"jobs of {', '.join(without)} have no account, and this cluster enforces associations "
                               f"while user {user} has no default account: {HOW}")


def check_jobs(jobs: Iterable[Any], run: Runner = run_command) -> None:
    """:func:`check` for the jobs Snakemake will submit (not ``job.is_local``; ``job.rule.name``, ``job.resources``)."""
    submitted = [(job.rule.name, job.resources) for job in jobs if not job.is_local]
    if submitted:
        check(*job_accounts(submitted), getpass.getuser(), run)
