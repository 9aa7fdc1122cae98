"""The grading cluster admits only the instructor's run (instructor/cluster.py; issue 35, Build 1).

Another local account (created here, deleted after) plays a student with a shell on the machine the instructor
grades on.  Before the grader starts, the student makes Dask's shared scratch folder (``$TMPDIR/dask-scratch-space``,
mode 0777) with a ``bokeh.py`` in it; once the cluster runs, it finds the cluster's ports and tries
``Client.run_on_scheduler`` on them.  Each attack is paired with the same run on a plain ``LocalCluster``, as
``./course grade`` started it before: there the planted module runs as the grader and the student's client runs
code as the grader, so the test can fail.  The honest instructor's client works on both.  The grader runs as
root and as an unprivileged account of its own.
"""
from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.xdist_group("engine-cluster")

# The grader: starts the cluster (ours or plain), says where it listens, waits for the student, then does what a
# coordinator does after the cluster starts (``import bokeh``: run_tasks once looked for the dashboard's plots)
# and asks its workers the same, then its own client runs code on the scheduler and the workers.
GRADER = r"""
import json, os, sys, importlib
import psutil

def try_bokeh():
    try:
        return importlib.import_module("bokeh").__file__
    except ImportError:
        return None

def ports():
    me = psutil.Process()
    return sorted({c.laddr.port for p in [me, *me.children(recursive=True)]
                   for c in p.net_connections(kind="tcp") if c.status == "LISTEN"})

def session(client, address):
    print(json.dumps({"address": address, "ports": ports()}), flush=True)
    sys.stdin.readline()   # the student's turn
    from instructor.private import path_problems
    print(json.dumps({"coordinator_bokeh": try_bokeh(), "worker_bokeh": list(client.run(try_bokeh).values()),
                      "honest": [client.run_on_scheduler(os.getuid), *client.run(os.getuid).values()],
                      "problems": [path_problems(), *client.run(path_problems).values()]}), flush=True)

if __name__ == "__main__":
    if sys.argv[1] == "ours":
        from instructor.cluster import cluster
        with cluster(workers=1) as client:
            session(client, client.scheduler.address)
    else:   # a LocalCluster as ./course grade started it before
        import dask
        from distributed import Client, LocalCluster
        with dask.config.set({"distributed.scheduler.allowed-failures": 0, "distributed.worker.daemon": False}):
            with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, memory_limit=0,
                              dashboard_address=":0", silence_logs=40) as lc, Client(lc) as client:
                session(client, lc.scheduler_address)
"""

# The student: Client.run_on_scheduler on the scheduler's address (as given, and as tls:// with a certificate of its
# own), then on every other port the cluster listens on: a Dask handshake and the dashboard's HTTP pages.
STUDENT = r"""
import asyncio, json, os, ssl, sys, urllib.request
from distributed import Client, Security
from distributed.comm import connect

address, ports = sys.argv[1], [int(p) for p in sys.argv[2:]]
own = Security.temporary()
ctx = own.get_connection_args("client")["ssl_context"]
ctx.verify_mode = ssl.CERT_NONE   # any server will do

def as_client(addr, **kw):
    try:
        with Client(addr, timeout="3s", **kw) as c:
            return ["ran as", c.run_on_scheduler(os.getuid)]
    except Exception as e:
        return ["refused", f"{type(e).__name__}: {str(e)[:200]}"]

async def handshake(addr, **kw):
    try:
        comm = await asyncio.wait_for(connect(addr, timeout=2, **kw), 4)
        await comm.write({"op": "identity"})
        return ["answered", str(await asyncio.wait_for(comm.read(), 4))[:100]]
    except Exception as e:
        return ["refused", f"{type(e).__name__}: {str(e)[:200]}"]

def http(port):
    got = {}
    for path in ("/info/main/workers.html", "/health", "/status"):
        try:
            got[path] = urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2).status
        except Exception as e:
            got[path] = getattr(e, "code", type(e).__name__)
    return got

host_port = address.split("://", 1)[1]
out = {"client": as_client(address)}
if address.startswith("tls://"):
    out["client_own_cert"] = as_client(address, security=Security(require_encryption=True, tls_ca_file=own.tls_ca_file,
                                                                  tls_client_cert=own.tls_client_cert,
                                                                  tls_client_key=own.tls_client_key))
    out["client_tcp"] = as_client("tcp://" + host_port)
out["ports"] = {}
for p in ports:
    out["ports"][p] = {"tcp": asyncio.run(handshake(f"tcp://127.0.0.1:{p}")),
                       "tls": asyncio.run(handshake(f"tls://127.0.0.1:{p}", ssl_context=ctx, require_encryption=True)),
                       "http": http(p)}
print(json.dumps(out))
"""

PLANT = ("import os, sys\n"
         "with open(os.path.join({shared!r}, 'planted-ran-%d' % os.getpid()), 'w') as f:\n"
         "    f.write(str(os.getuid()))\n")


def _runuser(user: str, *cmd: str, env: dict, **kw):
    return ["runuser", "-u", user, "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()], *cmd]


@pytest.fixture(scope="module")
def accounts():
    """Two throw-away accounts: a student and an unprivileged grader (deleted after the module)."""
    if os.geteuid() != 0 or not (shutil.which("useradd") and shutil.which("runuser")):
        pytest.skip("needs root, useradd and runuser to play a student with an account of its own")
    tag = secrets.token_hex(3)
    names = {"student": f"attnst{tag}", "grader": f"attngr{tag}"}
    made = []
    try:
        for name in names.values():
            subprocess.run(["useradd", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
                            name], check=True, capture_output=True)
            made.append(name)
        yield names
    finally:
        for name in made:
            subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture(scope="module")
def python_for(accounts):
    """A Python and PYTHONPATH both accounts can run: this venv's packages and a readable copy of the course's
    modules (tests/test_hub.py closes the checkout to other users while its hub runs)."""
    site = sysconfig.get_paths()["purelib"]
    copy = Path(tempfile.mkdtemp(prefix="attncourse-engine-"))
    for pkg in ("instructor", "judge", "attncourse"):
        shutil.copytree(ROOT / pkg, copy / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for p in [copy, *copy.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    env = {"PYTHONPATH": f"{copy}:{site}", "HOME": "/nonexistent", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    want = f"{sys.version_info[0]}.{sys.version_info[1]}"
    try:
        for python in (sys.executable, "/usr/bin/python3"):
            probe = _runuser(accounts["student"], python, "-c",
                             "import sys, distributed; print('%d.%d' % sys.version_info[:2])", env=env)
            r = subprocess.run(probe, capture_output=True, text=True, cwd="/", timeout=120)
            if r.returncode == 0 and r.stdout.strip() == want:
                yield python, env
                break
        else:
            pytest.skip(f"no Python {want} that another account may run with this venv's packages")
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def _attack(accounts, python_for, kind: str, grader: str) -> tuple[dict, dict, list]:
    """One grading run (``kind``: "ours" or "plain") by ``grader`` ("root" or the unprivileged account) with the
    student's plant in place: (what the grader saw, what the student got, the uids the planted module ran as)."""
    python, env = python_for
    shared = Path(tempfile.mkdtemp(prefix="attncourse-shared-tmp-"))   # the machine's /tmp, as students share it
    shared.chmod(0o1777)
    env = dict(env, TMPDIR=str(shared))
    student = accounts["student"]
    try:
        plant = ("import os, sys\nd = os.path.join(sys.argv[1], 'dask-scratch-space')\nos.mkdir(d)\nos.chmod(d, 0o777)\n"
                 "p = os.path.join(d, 'bokeh.py')\nopen(p, 'w').write(sys.argv[2])\nos.chmod(p, 0o777)\n")
        subprocess.run(_runuser(student, python, "-c", plant, str(shared), PLANT.format(shared=str(shared)), env=env),
                       check=True, cwd="/", timeout=60)
        cmd = [python, "-c", GRADER, kind]
        cmd = cmd if grader == "root" else _runuser(accounts["grader"], *cmd, env=env)
        errors = tempfile.TemporaryFile(mode="w+")   # (a pipe nobody reads would stop the grader once full)
        proc = subprocess.Popen(cmd, cwd="/", env=env if grader == "root" else None, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=errors, text=True, start_new_session=True)

        def said():
            line = proc.stdout.readline()
            if not line:
                errors.seek(0)
                raise AssertionError(errors.read()[-3000:])
            return json.loads(line)

        try:
            started = said()
            got = subprocess.run(_runuser(student, python, "-c", STUDENT, started["address"],
                                          *map(str, started["ports"]), env=env),
                                 capture_output=True, text=True, cwd="/", timeout=300)
            assert got.returncode == 0, got.stderr[-3000:]
            attacked = json.loads(got.stdout.strip().splitlines()[-1])
            proc.stdin.write("go\n")
            proc.stdin.flush()
            seen = dict(started, **said())
        finally:
            proc.stdin.close()
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            errors.close()
        ran = [int(p.read_text()) for p in shared.glob("planted-ran-*")]
        return seen, attacked, ran
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def _uid(accounts, grader: str) -> int:
    return 0 if grader == "root" else pwd.getpwnam(accounts["grader"]).pw_uid


@pytest.mark.slow   # a cluster and a student's probes: 30-40 s each on the loaded 2-core machine
@pytest.mark.parametrize("grader", ["root", "unprivileged"])
def test_a_student_account_gets_nothing_from_the_grading_cluster(accounts, python_for, grader):
    """The planted ``bokeh.py`` is never imported (no grading process has the shared scratch on its path), the
    student's client is refused on every port, no HTTP page answers; the instructor's own client works."""
    seen, attacked, ran = _attack(accounts, python_for, "ours", grader)
    uid = _uid(accounts, grader)
    assert ran == [] and seen["coordinator_bokeh"] is None and seen["worker_bokeh"] == [None], (ran, seen)
    assert seen["problems"] == [[], []], seen["problems"]
    assert seen["address"].startswith("tls://127.0.0.1:"), seen
    assert seen["honest"] == [uid, uid], seen           # the honest instructor's client runs code on the cluster
    for way in ("client", "client_own_cert", "client_tcp"):
        assert attacked[way][0] == "refused", (way, attacked[way])
    assert attacked["ports"] and len(attacked["ports"]) == len(seen["ports"]), attacked
    for port, tried in attacked["ports"].items():
        assert tried["tcp"][0] == tried["tls"][0] == "refused", (port, tried)
        assert 200 not in tried["http"].values(), (port, tried["http"])


@pytest.mark.slow   # a cluster and a student's probes: 30-40 s each on the loaded 2-core machine
@pytest.mark.parametrize("grader", ["root", "unprivileged"])
def test_the_same_attacks_on_a_plain_local_cluster_run_as_the_grader(accounts, python_for, grader):
    """The pairing: against a LocalCluster as ``./course grade`` started it before, the planted module runs in the
    coordinator and the worker as the grader, and the student's client runs code on the scheduler as the grader."""
    seen, attacked, ran = _attack(accounts, python_for, "plain", grader)
    uid = _uid(accounts, grader)
    assert seen["coordinator_bokeh"] and "dask-scratch-space" in seen["coordinator_bokeh"], seen
    assert ran and set(ran) == {uid}, ran
    assert attacked["client"] == ["ran as", uid], attacked["client"]
    assert any(200 in tried["http"].values() for tried in attacked["ports"].values()), attacked["ports"]
    assert seen["honest"] == [uid, uid], seen


def test_private_paths():
    """:func:`instructor.private.foreign_writable`: a folder another account may write to (or one inside it, or a
    missing one below it) is named; a private folder inside a sticky shared one is not."""
    from instructor.private import foreign_writable

    base = Path(tempfile.mkdtemp(prefix="attncourse-paths-"))
    try:
        shared = base / "shared"
        shared.mkdir()
        shared.chmod(0o1777)
        mine = shared / "mine"
        mine.mkdir(mode=0o700)
        assert foreign_writable(str(mine)) is None
        assert foreign_writable(str(mine / "not-there")) is None
        assert "writable by other accounts" in foreign_writable(str(shared))
        assert "writable by other accounts" in foreign_writable(str(shared / "not-there"))
        open_dir = base / "open"
        open_dir.mkdir()
        open_dir.chmod(0o777)           # not sticky: anyone renames what is inside
        (open_dir / "inside").mkdir(mode=0o700)
        assert "writable by other accounts" in foreign_writable(str(open_dir / "inside"))
        if os.geteuid() == 0:
            theirs = base / "theirs"
            theirs.mkdir(mode=0o755)
            os.chown(theirs, 65534, 65534)
            assert "belongs to uid 65534" in foreign_writable(str(theirs))
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_cluster_given_by_address_must_speak_tls():
    """``--scheduler tcp://…`` is refused in one line (any account that reaches it runs code as its workers);
    ``tls://`` is taken with the configured certificate, and ``--insecure-scheduler`` overrides by name."""
    from instructor.cluster import remote_security
    from instructor.config import CourseError

    with pytest.raises(CourseError, match="must use TLS"):
        remote_security("tcp://10.0.0.5:8786")
    assert remote_security("tls://10.0.0.5:8786") is not None
    assert remote_security("tcp://10.0.0.5:8786", insecure=True) is not None
