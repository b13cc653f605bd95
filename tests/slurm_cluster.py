"""A throwaway SLURM cluster on this machine, started from nothing and stopped by pid (tests/test_slurm_cluster.py).

Why a real one: the fake ``sbatch``/``srun`` of tests/fake_slurm log their arguments and run the job at
once; they cannot show what slurmctld, slurmstepd and slurmdbd do with them (job steps, GPU binding,
accounting, associations). Everything lives in one temporary directory: the configuration files, a munge
key, a MariaDB data directory, the state, spool and log directories and the fake GPUs (character devices
``c 1 3``, like /dev/null: slurmd only needs ``File=`` to exist and be a device). Every daemon listens on a
free port of 127.0.0.1 and runs in the foreground as a child of this process, so it is stopped by its own
pid and nothing of it outlives the cluster. Debian's packages (Slurm 22.05, MariaDB, munge) are installed
with apt when missing; daemons started by the packages are not involved (policy-rc.d keeps them off).
The one file outside that directory is a link /etc/slurm/slurm.conf to its slurm.conf, made only where
none exists and removed at the end (an ``srun`` inside a job cannot be told another path).

Two "nodes" run on this one host (two slurmd, ``-N n1`` and ``-N n2``, each with its own port, spool and
GPUs): a job spanning nodes is then scheduled, launched and bound as on a real cluster, but both nodes share
one kernel, one network stack and one file system, so inter-node transport is not exercised.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

PACKAGES = ("slurmctld", "slurmd", "slurmdbd", "slurm-client", "munge", "mariadb-server")
COMMANDS = ("slurmctld", "slurmd", "slurmdbd", "sbatch", "srun", "sacct", "sacctmgr", "munged", "mariadbd",
            "mariadb-install-db", "mariadb")
CLUSTER = "naspipe"
ACCOUNT = "naspipe"  # the association every test job is charged to (the cluster enforces associations)
NODES = ("n1", "n2")
GPUS_PER_NODE = 2
CPUS_PER_NODE = 2  # per node, whatever the machine has (SlurmdParameters=config_overrides): 4 in all
START_S = 120.0  # the longest any daemon may take to answer
DEFAULT_CONF = Path("/etc/slurm/slurm.conf")  # Debian's compiled-in SLURM_CONF
STOP_S = 30.0  # how long a daemon may take to exit on SIGTERM before SIGKILL


class Unavailable(RuntimeError):
    """The cluster cannot run here (not root, no package manager, packages missing); the test skips."""


def missing_commands() -> list[str]:
    return [c for c in COMMANDS if shutil.which(c) is None and not Path("/usr/sbin", c).exists()]


def install_packages(log: Path) -> None:
    """apt-get install the Debian packages (services are not started: policy-rc.d or no init system)."""
    if os.geteuid() != 0:
        raise Unavailable("the SLURM cluster test needs root (it installs packages and starts daemons)")
    if not missing_commands():
        return
    if shutil.which("apt-get") is None:
        raise Unavailable(f"the SLURM cluster test needs {', '.join(missing_commands())} or apt-get to install them")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with log.open("a") as out:
        for args in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", *PACKAGES]):
            done = subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=1200, check=False)
            if done.returncode != 0:
                raise Unavailable(f"{' '.join(args[:2])} failed (exit {done.returncode}): see {log}")
    if missing_commands():
        raise Unavailable(f"still missing after apt-get install: {', '.join(missing_commands())}")


def free_port() -> int:
    with closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, ready: Callable[[], bool], timeout: float, log: Path | None = None) -> None:
    """Poll ``ready`` until true, at most ``timeout`` seconds; the error names what and the log to read."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.5)
    tail = log.read_text(errors="replace")[-2000:] if log is not None and log.exists() else ""
    raise TimeoutError(f"{what} not ready after {timeout:.0f} s{f' ({log}):' if log else ''}\n{tail}")


class Cluster:
    """The daemons, the client environment (``env``: SLURM_CONF) and the directory they live in."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.host = socket.gethostname()
        self.daemons: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.ports = {name: free_port() for name in ("ctld", "dbd", "mysql", *NODES)}
        for sub in ("etc", "state", "log", "run", "munge", "mysql", "dev", *(f"spool/{n}" for n in NODES)):
            (root / sub).mkdir(parents=True, exist_ok=True)
        self.conf = root / "etc" / "slurm.conf"
        self.linked = False  # whether DEFAULT_CONF is this cluster's link
        self.tasks_log = root / "log" / "tasks.log"  # the task prolog's: job step rank node CUDA_VISIBLE_DEVICES
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    # -- configuration --------------------------------------------------------------------------------

    def gpu_files(self, node: str) -> list[Path]:
        """The node's fake GPUs: character devices 1:3 (mknod), what gres.conf's File= must name."""
        files = []
        for i in range(GPUS_PER_NODE):
            path = self.root / "dev" / f"{node}-gpu{i}"
            if not path.exists():
                os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            files.append(path)
        return files

    def write_config(self) -> None:
        r, p = self.root, self.ports
        nodes = "\n".join(
            f"NodeName={n} NodeHostname={self.host} NodeAddr=127.0.0.1 Port={p[n]} CPUs={CPUS_PER_NODE} "
            f"RealMemory=256000 Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN" for n in NODES)
        (r / "etc" / "slurm.conf").write_text(f"""\
ClusterName={CLUSTER}
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={p['ctld']}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={r}/munge/munge.socket
CredType=cred/munge
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd-%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
LaunchParameters=use_interactive_step
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={p['dbd']}
AccountingStoragePass={r}/munge/munge.socket
AccountingStorageEnforce=associations
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
MinJobAge=300
KillWait=5
TaskProlog={r}/etc/task_prolog.sh
InactiveLimit=0
{nodes}
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
""")
        (r / "etc" / "gres.conf").write_text("".join(
            f"NodeName={n} Name=gpu File={','.join(str(f) for f in self.gpu_files(n))}\n" for n in NODES))
        (r / "etc" / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")  # 22.05 has no "disabled"; v1 here
        prolog = r / "etc" / "task_prolog.sh"  # one line per task started: which GPUs it was bound to
        prolog.write_text("#!/bin/sh\necho \"$SLURM_JOB_ID $SLURM_STEP_ID $SLURM_PROCID $SLURMD_NODENAME "
                          f"${{CUDA_VISIBLE_DEVICES-none}}\" >> {self.tasks_log}\n")
        prolog.chmod(0o755)
        dbd = r / "etc" / "slurmdbd.conf"
        dbd.write_text(f"""\
AuthType=auth/munge
AuthInfo=socket={r}/munge/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={p['dbd']}
SlurmUser=root
LogFile={r}/log/slurmdbd.log
PidFile={r}/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={p['mysql']}
StorageUser=slurm
StoragePass=naspipe
StorageLoc=slurm_acct_db
""")
        dbd.chmod(0o600)

    # -- daemons --------------------------------------------------------------------------------------

    def spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        """Start a foreground daemon, its output in log/NAME.out, remembered for :meth:`stop`."""
        out = (self.root / "log" / f"{name}.out").open("ab")
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env,
                                start_new_session=True)
        out.close()
        self.daemons.append((name, proc))
        return proc

    def alive(self, name: str) -> bool:
        proc = next(p for n, p in self.daemons if n == name)
        if proc.poll() is not None:
            log = self.root / "log" / f"{name}.out"
            raise RuntimeError(f"{name} exited ({proc.returncode}): {log.read_text(errors='replace')[-1500:]}")
        return True

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), env=self.env, capture_output=True, text=True, timeout=timeout, check=False)

    def start_munge(self) -> None:
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        m = self.root / "munge"
        self.spawn("munged", ["munged", "-F", "--force", f"--key-file={key}", f"--socket={m}/munge.socket",
                              f"--pid-file={m}/munged.pid", f"--seed-file={m}/munged.seed",
                              f"--log-file={self.root}/log/munged.log"])
        wait_for("munged", lambda: self.alive("munged") and (m / "munge.socket").exists(), START_S)

    def start_mariadb(self) -> None:
        data, sock = self.root / "mysql", self.root / "mysql" / "mysql.sock"
        init = subprocess.run(["mariadb-install-db", "--user=root", f"--datadir={data}/data",
                               "--auth-root-authentication-method=socket", "--skip-test-db"],
                              capture_output=True, text=True, timeout=300, check=False)
        if init.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed: {init.stderr[-1500:]}")
        self.spawn("mariadbd", ["mariadbd", "--no-defaults", "--user=root", f"--datadir={data}/data",
                                f"--socket={sock}", "--bind-address=127.0.0.1", f"--port={self.ports['mysql']}",
                                f"--pid-file={data}/mariadbd.pid", "--innodb-buffer-pool-size=64M"])

        def answers() -> bool:
            return self.alive("mariadbd") and self.run("mariadb", "--no-defaults", f"--socket={sock}", "-uroot",
                                                      "-e", "SELECT 1").returncode == 0
        wait_for("mariadbd", answers, START_S, self.root / "log" / "mariadbd.out")
        sql = ("CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'naspipe'; "
               "CREATE USER 'slurm'@'localhost' IDENTIFIED BY 'naspipe'; "
               "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; "
               "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';")
        done = self.run("mariadb", "--no-defaults", f"--socket={sock}", "-uroot", "-e", sql)
        if done.returncode != 0:
            raise RuntimeError(f"creating the slurm database user failed: {done.stderr}")

    def start_slurm(self) -> None:
        self.spawn("slurmdbd", ["slurmdbd", "-D"])
        wait_for("slurmdbd", lambda: self.alive("slurmdbd") and self.run("sacctmgr", "-n", "show", "cluster").returncode
                 == 0, START_S, self.root / "log" / "slurmdbd.log")
        self.sacctmgr("add", "cluster", CLUSTER)
        self.sacctmgr("add", "account", ACCOUNT, "Description=naspipe tests", "Organization=naspipe")
        self.sacctmgr("add", "user", "root", f"Account={ACCOUNT}", f"DefaultAccount={ACCOUNT}")
        self.spawn("slurmctld", ["slurmctld", "-D", "-i"])
        wait_for("slurmctld", lambda: self.alive("slurmctld") and self.run("scontrol", "ping").stdout.count("UP") > 0,
                 START_S, self.root / "log" / "slurmctld.log")
        for node in NODES:
            self.spawn(f"slurmd-{node}", ["slurmd", "-D", "-N", node])
        wait_for("both nodes idle", self.nodes_idle, START_S, self.root / "log" / "slurmctld.log")

    def sacctmgr(self, *args: str) -> None:
        done = self.run("sacctmgr", "-i", *args)
        if done.returncode != 0 and "Nothing new added" not in done.stdout + done.stderr:
            raise RuntimeError(f"sacctmgr {' '.join(args)}: {done.stdout} {done.stderr}")

    def nodes_idle(self) -> bool:
        for name, _ in self.daemons:
            if name.startswith("slurmd-"):
                self.alive(name)
        states = self.run("sinfo", "-h", "-N", "-o", "%N %t").stdout.split("\n")
        idle = {line.split()[0] for line in states if line.strip() and line.split()[1] == "idle"}
        return idle == set(NODES)

    def link_default_config(self) -> None:
        """Point the clients' compiled-in path at this cluster's slurm.conf (removed again by :meth:`stop`).

        The jobstep plugin runs each job's command with every ``SLURM_*`` variable but the job's identity
        removed, SLURM_CONF included: an ``srun`` inside a job reads ``/etc/slurm/slurm.conf`` (or asks DNS).
        """
        if DEFAULT_CONF.exists() or DEFAULT_CONF.is_symlink():
            raise Unavailable(f"{DEFAULT_CONF} exists: the SLURM cluster test would not replace a real configuration")
        DEFAULT_CONF.parent.mkdir(parents=True, exist_ok=True)
        DEFAULT_CONF.symlink_to(self.conf)
        self.linked = True

    def start(self) -> None:
        self.link_default_config()
        self.write_config()
        self.start_munge()
        self.start_mariadb()
        self.start_slurm()

    def stop(self) -> list[str]:
        """SIGTERM every daemon by its pid (last started first), SIGKILL after :data:`STOP_S`; what needed it."""
        killed = []
        if any(n == "slurmctld" and p.poll() is None for n, p in self.daemons):
            self.run("scancel", "--full", f"--cluster={CLUSTER}", "--user=root", timeout=STOP_S)
            try:
                wait_for("no job left", lambda: not self.run("squeue", "-h").stdout.strip(), STOP_S)
            except TimeoutError:
                killed.append("jobs still queued")
        for name, proc in reversed(self.daemons):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=STOP_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=STOP_S)
                    killed.append(name)
        self.daemons.clear()
        if self.linked and DEFAULT_CONF.is_symlink() and DEFAULT_CONF.readlink() == self.conf:
            DEFAULT_CONF.unlink()
            self.linked = False
        return killed


@contextmanager
def running_cluster(root: Path) -> Iterator[Cluster]:
    """Install what is missing, start the cluster under ``root``, stop every daemon at the end."""
    install_packages(root / "apt.log")
    cluster = Cluster(root)
    try:
        cluster.start()  # Unavailable (a real configuration in the way) still stops what was started
        yield cluster
    finally:
        cluster.stop()
