"""A one-node Slurm cluster for the tests: scripts/slurm-local in a private folder and on free ports,
started by a pytest fixture and stopped after the tests; plus sacct/squeue helpers."""
import os
import shutil
import socket
import subprocess
import tempfile
import time

SOURCE_DIR = os.environ.get("TANDEM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(SOURCE_DIR, "scripts", "slurm-local")


def _free_port_block(n=4):
    """A base port with n free consecutive ports after it (slurmctld, slurmd, slurmdbd, MariaDB)."""
    for base in range(17817, 30000, 10):
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.bind(("127.0.0.1", p))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free block of ports for the test cluster")


class Cluster:
    def __init__(self):
        # Short paths: munge and MariaDB listen on Unix sockets (108-byte limit).
        self.dir = tempfile.mkdtemp(prefix="tslurm-", dir="/tmp")
        self.env = dict(os.environ, TANDEM_SLURM_DIR=self.dir, TANDEM_SLURM_PORT=str(_free_port_block()),
                        SLURM_CONF=os.path.join(self.dir, "etc", "slurm.conf"))

    def start(self):
        p = subprocess.run([SCRIPT, "start"], env=self.env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, "scripts/slurm-local start failed:\n" + p.stderr[-4000:]

    def stop(self):
        subprocess.run([SCRIPT, "stop"], env=self.env, capture_output=True, text=True, timeout=120)
        shutil.rmtree(self.dir, ignore_errors=True)

    def run(self, *argv, timeout=60):
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout)

    def jobs_of(self, folder):
        """Slurm's accounting records (sacct) of the jobs of one run folder: [(id, name, state, exit)]."""
        p = self.run("sacct", "-n", "-X", "-P", "-S", "now-1days", "-o", "JobID,JobName%200,State,ExitCode")
        assert p.returncode == 0, p.stderr
        tag = ":" + os.path.basename(folder) + ":"
        rows = [line.split("|") for line in p.stdout.splitlines() if line.strip()]
        return [(r[0], r[1], r[2].split(" ")[0], r[3]) for r in rows if tag in r[1]]

    def wait_for_jobs(self, folder, n, timeout=60):
        """sacct's rows once n jobs of the folder have ended (slurmdbd records asynchronously)."""
        deadline = time.monotonic() + timeout
        while True:
            jobs = self.jobs_of(folder)
            ended = [j for j in jobs if j[2] not in ("PENDING", "RUNNING", "COMPLETING", "REQUEUED")]
            if len(ended) >= n or time.monotonic() > deadline:
                return jobs
            time.sleep(0.5)

    def active_jobs(self):
        p = self.run("squeue", "-h", "-o", "%i|%j|%T")
        assert p.returncode == 0, p.stderr
        return [tuple(line.split("|")) for line in p.stdout.splitlines() if line.strip()]
