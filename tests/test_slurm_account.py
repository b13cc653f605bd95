"""The SLURM account check before submission (naspipe.plan.slurm_account), against scripted client answers."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

import pytest

from naspipe.plan import slurm_account as sa
from naspipe.plan.checks import ConfigError


def cluster(accounts: str = "naspipe\nother\n", enforce: str = "associations,limits", default: str = "naspipe\n",
            sacctmgr_rc: int = 0) -> tuple[sa.Runner, list[list[str]]]:
    """A runner answering sacctmgr and scontrol as a cluster with these settings would; the calls it saw."""
    calls: list[list[str]] = []

    def run(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        calls.append(list(args))
        if args[0] == "scontrol":
            return subprocess.CompletedProcess(args, 0, f"AccountingStorageEnforce = {enforce}\nMinJobAge = 300\n", "")
        if "associations" in args:
            return subprocess.CompletedProcess(args, sacctmgr_rc, accounts, "sacctmgr: error: slurmdbd down")
        return subprocess.CompletedProcess(args, 0, default, "")

    return run, calls


def test_accounts_are_collected_per_rule_and_split_like_the_plugin_splits_them() -> None:
    jobs = [("train", {"slurm_account": "a, b"}), ("search", {"slurm_account": "a"}), ("prepare", {}),
            ("profile", {"slurm_account": ""})]
    assert sa.job_accounts(jobs) == ({"a": ["search", "train"], "b": ["train"]}, ["prepare", "profile"])


def test_a_listed_account_passes_in_any_case() -> None:
    run, calls = cluster()
    sa.check({"NASPIPE": ["train"]}, [], "alice", run)
    assert calls == [["sacctmgr", "-nP", "show", "associations", "user=alice", "format=account"]]


def test_an_account_the_user_lacks_is_named_with_the_ones_listed() -> None:
    run, _ = cluster()
    with pytest.raises(ConfigError, match=r"^slurm_account: 'nosuch' \(jobs of search, train\) is not an account of "
                                          r"user alice on this cluster \(sacctmgr lists: naspipe, other\)$"):
        sa.check({"nosuch": ["search", "train"]}, [], "alice", run)


def test_accounts_that_cannot_be_listed_stop_the_run() -> None:
    run, _ = cluster(sacctmgr_rc=1)
    with pytest.raises(ConfigError, match=r"cannot list the accounts of user alice \(sacctmgr show associations: "
                                          r"sacctmgr: error: slurmdbd down\)"):
        sa.check({"naspipe": ["train"]}, [], "alice", run)


def test_no_account_is_refused_only_where_enforced_and_without_a_default() -> None:
    for enforce, default in (("none", ""), ("associations", "naspipe\n"), ("limits", "")):
        run, _ = cluster(enforce=enforce, default=default)
        sa.check({}, ["train"], "alice", run)  # jobs go to the default account, or the cluster needs none
    run, _ = cluster(enforce="associations,limits,qos", default="")
    with pytest.raises(ConfigError, match=r"jobs of train have no account, and this cluster enforces associations "
                                          r"while user alice has no default account: set it with `default-resources"):
        sa.check({}, ["train"], "alice", run)


def test_only_submitted_jobs_are_checked() -> None:
    class Job:
        def __init__(self, rule: str, local: bool, account: str = "") -> None:
            self.rule = type("Rule", (), {"name": rule})()
            self.is_local, self.resources = local, {"slurm_account": account}

    run, calls = cluster()
    sa.check_jobs([Job("report", True, "nosuch")], run)
    assert calls == []
    with pytest.raises(ConfigError, match="'nosuch' \\(jobs of train\\)"):
        sa.check_jobs([Job("report", True), Job("train", False, "nosuch")], run)
