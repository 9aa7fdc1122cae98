"""nbgrader's filesystem exchange, made safe for a hub whose students each have a shell (``./course hub``).

nbgrader's default exchange trusts what students write: its root is 0777 without the sticky bit (a student can
rename the course's folder and put a trojaned one in its place), a submission names its student and its time
in its folder name and in ``timestamp.txt`` (``nbgrader submit --student=someone`` is collected as someone; a
far-future folder hides a real resubmission; a rewritten ``timestamp.txt`` dodges the late penalty), inbound
folders are 0777, and collect copies the whole folder, following links (a notebook that is a link to the
instructor's ``source/`` comes back as a submission, with full marks and the solutions in the feedback).

Here identity and time come from the kernel, not from files students write:

* **the layout** (made by ``./course hub`` as root, deploy/hub.py ``make_exchange``): the exchange root
  root-owned 0755; the course folder, ``outbound`` and ``feedback`` the instructor's (students read released
  files; feedback is 0711, each file named by a 128-hex secret only its student holds); ``inbound`` the
  instructor's, 0711 (nobody lists it); and in it **one folder per student, owned by the instructor, group that
  student's own group, mode 0770**: only that student and the instructor reach it, and the student cannot
  change its mode (not the owner). Nothing relies on a setgid bit. (A folder the student owns, the layout
  before, is still accepted.)
* **submit** (:class:`ExchangeSubmit`) writes into the submitting account's own folder: the login comes from the
  process's uid (not ``--student``, not ``$USER``); asking to submit as someone else fails. It writes a hidden
  ``.partial-…`` folder and renames it into place only once every file is written (a submit that fails midway,
  a full disk say, leaves nothing collect would take), and files its own copy (the Assignments panel's, and
  what ``fetch_feedback`` looks up) under the time collect will record: the kernel's, read back from the folder.
* **collect** (:class:`ExchangeCollect`) reads a student's folder through descriptors opened without following
  links (a link anywhere below ``inbound`` is refused), a submission only if that student owns it, and **takes
  the time and the bytes from the same open files**: each released notebook (and ``submission_secret.txt``) is
  opened once, read, and its *ctime* taken by ``fstat`` after the read (a rewrite during collection makes it
  late, never the bytes late and the time early); the submission's time is the latest of those and its
  folder's, never its name or its ``timestamp.txt``. Only released notebooks' names are taken, as regular files
  of the student's with one link, at most ``ExchangeCollect.max_notebook_bytes``, that parse as notebooks (a
  0-byte one is left out); a submission with none is passed over for the student's next newest. A student's
  folder or submission that cannot be read is that student's line in the log, never the class's failure.
* **release_feedback** leaves out, with a line in its log, a student whose ``submission_secret.txt`` or
  ``timestamp.txt`` is missing or not valid; the others are released.
* **list --inbound** shows each submission's kernel time (its folder's ctime), not the time in its name;
  ``--remove`` moves a submission the instructor cannot delete (a student's files) out of every listing.
* the other operations are nbgrader's, with the one change that the exchange root need not be writable by all.
"""
from __future__ import annotations

import base64
import datetime
import errno
import glob
import json
import os
import pwd
import re
import secrets
import shutil
import stat

from traitlets import Integer

from nbgrader.exchange.default import collect as _collect
from nbgrader.exchange.default import exchange as _exchange
from nbgrader.exchange.default import fetch_assignment as _fetch
from nbgrader.exchange.default import fetch_feedback as _fetch_feedback
from nbgrader.exchange.default import list as _list
from nbgrader.exchange.default import release_assignment as _release
from nbgrader.exchange.default import release_feedback as _release_feedback
from nbgrader.exchange.default import submit as _submit
from nbgrader.utils import find_all_notebooks, ignore_patterns

SECRET = re.compile(r"[0-9a-f]{128}")
MAX_SECRET_BYTES = 1024
SECRET_FILE = "submission_secret.txt"
PARTIAL = ".partial-"   # a submission being written (never matches a student's "<login>+" prefix)
REMOVED = ".removed-"   # a submission the instructor removed (list --inbound --remove)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)


def login() -> str:
    """The account this process runs as (its real uid; not $USER, not --student)."""
    return pwd.getpwuid(os.getuid()).pw_name


def _account(name: str) -> tuple[int, int] | tuple[None, None]:
    """(uid, primary gid) of the account ``name``, or (None, None)."""
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        return None, None
    return pw.pw_uid, pw.pw_gid


def kernel_time(ctime_ns: int) -> datetime.datetime:
    """A ctime (ns since the epoch) as nbgrader's naive UTC datetime (to the microsecond)."""
    return datetime.datetime(1970, 1, 1) + datetime.timedelta(microseconds=ctime_ns // 1000)


def format_time(when: datetime.datetime) -> str:
    """How collect writes ``timestamp.txt``, and submit names its copy: the same string on both sides."""
    return when.strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def is_student_folder(st: os.stat_result | None, uid: int | None, gid: int | None) -> bool:
    """Whether ``st`` (an lstat) is a student's inbound folder: a real folder (not a link), the student's group's
    (the instructor's, mode 0770: the layout ``./course hub`` makes) or the student's own (the layout before)."""
    return (st is not None and uid is not None and stat.S_ISDIR(st.st_mode)
            and (st.st_uid == uid or st.st_gid == gid))


class _RootNeedNotBeWritable:
    """The exchange root is root-owned 0755: it must exist and be searchable, not writable by everyone."""

    def ensure_root(self):
        st = _lstat(self.root)
        if st is None or not stat.S_ISDIR(st.st_mode):
            self.fail(f"The exchange {self.root} does not exist; please contact your instructor")
        if not os.access(self.root, os.R_OK | os.X_OK):
            self.fail(f"The exchange {self.root} is not readable; please contact your instructor")


def _lstat(path, dir_fd=None):
    try:
        return os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None


def own_folder(inbound: str, user: str, uid: int | None, gid: int | None = None) -> str | None:
    """``inbound/<user>`` if it is that student's inbound folder (:func:`is_student_folder`); else None."""
    path = os.path.join(inbound, user)
    return path if is_student_folder(_lstat(path), uid, gid) else None


# -- what collect takes, and when ---------------------------------------------------------------------------
def read_own_file(name: str, uid: int, cap: int, dir_fd: int | None = None) -> tuple[bytes | None, str, int]:
    """(bytes, "", ctime_ns) of ``name`` (in ``dir_fd``) if it is a regular file owned by ``uid`` with one link and at
    most ``cap`` bytes, opened without following a link; else (None, why, 0).

    The bytes and the time come from the same open file: its ctime is read by ``fstat`` *after* the bytes (and
    the read is repeated while it changes, three times at most), so every write whose bytes were read happened
    at or before the time returned."""
    try:
        fd = os.open(name, _FILE, dir_fd=dir_fd)
    except FileNotFoundError:
        return None, "missing", 0
    except OSError as exc:
        return None, ("a link" if exc.errno == errno.ELOOP else f"cannot be opened ({exc.strerror})"), 0
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, "not a regular file", 0
        if st.st_uid != uid:
            return None, "not the student's own file", 0
        for _ in range(3):
            if st.st_nlink != 1:
                return None, "a hard link", 0
            if st.st_size > cap:
                return None, f"larger than {cap} bytes", 0
            data = os.pread(fd, cap + 1, 0)
            while len(data) <= cap:
                more = os.pread(fd, cap + 1 - len(data), len(data))
                if not more:
                    break
                data += more
            after = os.fstat(fd)
            if len(data) > cap:
                return None, f"larger than {cap} bytes", 0
            if after.st_ctime_ns == st.st_ctime_ns:
                break
            st = after
        return data, "", after.st_ctime_ns
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror})", 0
    finally:
        os.close(fd)


def folder_time(path: str, dir_fd: int | None = None) -> datetime.datetime | None:
    """A submission folder's kernel time: the latest ctime of the folder and of its entries (not following links)."""
    try:
        fd = os.open(path, _DIR, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        latest = os.fstat(fd).st_ctime_ns
        for name in os.listdir(fd):
            st = _lstat(name, dir_fd=fd)
            if st is not None:
                latest = max(latest, st.st_ctime_ns)
        return kernel_time(latest)
    finally:
        os.close(fd)


def _is_notebook(data: bytes) -> bool:
    try:
        nb = json.loads(data)
    except ValueError:
        return False
    return isinstance(nb, dict) and isinstance(nb.get("cells"), list)


class ExchangeSubmit(_RootNeedNotBeWritable, _submit.ExchangeSubmit):
    """nbgrader's submit, into the submitting account's own inbound folder, as that account, all or nothing."""

    def init_dest(self):
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        me = login()
        asked = self.coursedir.student_id
        if asked not in ("*", "", me):
            self.fail(f"You submit as yourself ({me}), not as {asked!r}.")
        self.coursedir.student_id = me
        inbound = os.path.join(self.root, self.coursedir.course_id, "inbound")
        self.inbound_path = own_folder(inbound, me, os.getuid(), os.getgid())
        if self.inbound_path is None:
            self.fail(f"There is no submission folder for {me} in this course; please contact your instructor.")
        self.cache_path = os.path.join(self.cache, self.coursedir.course_id)
        ts = self.timestamp   # in the folder's name only: collect does not trust it
        rand = base64.urlsafe_b64encode(os.urandom(9)).decode("ascii")
        self.assignment_filename = f"{me}+{self.coursedir.assignment_id}+{ts}+{rand}"

    def do_copy(self, src, dest, log=None):
        """nbgrader's copy, except into the inbound: there each folder is made, files are copied as bytes, and
        links are left out."""
        if not dest.startswith(self.inbound_path + os.sep):
            return super().do_copy(src, dest, log)
        size, cap = self.get_size(src), 1000 * self.coursedir.max_dir_size
        if size > cap:
            raise RuntimeError(f"Directory size is too big. Size is {size}, maximum size is {cap}")
        ignore = ignore_patterns(exclude=self.coursedir.ignore, include=self.coursedir.include,
                                 max_file_size=self.coursedir.max_file_size, log=self.log)

        def copy(s, d):
            os.mkdir(d)
            names = os.listdir(s)
            skip = ignore(s, names)
            for n in names:
                sp, dp = os.path.join(s, n), os.path.join(d, n)
                if n in skip or os.path.islink(sp):
                    continue
                if os.path.isdir(sp):
                    copy(sp, dp)
                elif os.path.isfile(sp):
                    shutil.copyfile(sp, dp)

        copy(src, dest)

    def copy_files(self):
        self.init_release()
        secret = secrets.token_hex(64)
        dest = os.path.join(self.inbound_path, self.assignment_filename)
        partial = os.path.join(self.inbound_path, PARTIAL + self.assignment_filename)
        self.log.info("Source: %s", self.src_path)
        self.log.info("Destination: %s", dest)
        self.check_filename_diff()
        try:
            self.do_copy(self.src_path, partial)
            for name, text in (("timestamp.txt", self.timestamp), (SECRET_FILE, secret)):
                with open(os.path.join(partial, name), "w") as f:
                    f.write(text)
            # readable by the instructor; nobody else reaches the folder above (0770, the student's group)
            self.set_perms(partial, fileperms=0o644, dirperms=0o755)
            os.rename(partial, dest)
        except RuntimeError:   # nbgrader's own: too large (max_dir_size)
            shutil.rmtree(partial, ignore_errors=True)
            raise
        except OSError as exc:   # a full disk, say: nothing is left that collect would take
            shutil.rmtree(partial, ignore_errors=True)
            self.fail(f"Nothing was submitted: {exc}")
        when = folder_time(dest)
        stamp = format_time(when) if when is not None else self.timestamp
        # the student's copy, named by the time collect records (fetch_feedback files the feedback under it)
        cache = os.path.join(self.cache_path, f"{self.coursedir.student_id}+{self.coursedir.assignment_id}+{stamp}")
        os.makedirs(self.cache_path, exist_ok=True)
        self.do_copy(self.src_path, cache)
        for name, text in (("timestamp.txt", stamp), (SECRET_FILE, secret)):
            with open(os.path.join(cache, name), "w") as f:
                f.write(text)
        self.log.info("Submitted as: %s %s %s", self.coursedir.course_id, self.coursedir.assignment_id, stamp)


class ExchangeCollect(_RootNeedNotBeWritable, _collect.ExchangeCollect):
    """Collect that trusts the kernel (owners, ctimes), copies only released notebooks, follows no link, and takes
    each file's bytes and time from one open file."""

    max_notebook_bytes = Integer(20 * 1024 * 1024, help="A larger submitted notebook is left out (and named)."
                                 ).tag(config=True)

    def _released_names(self) -> list[str]:
        release = self.coursedir.format_path(self.coursedir.release_directory, ".", self.coursedir.assignment_id)
        names = [n for n in find_all_notebooks(release) if os.sep not in n]
        if not names:
            self.fail(f"No released notebooks in {release}: generate the assignment first.")
        return names

    def _snapshot(self, sub_fd: int, path: str, uid: int) -> tuple[dict, int]:
        """({name: bytes}, ctime_ns) of what collect takes of the open submission folder ``sub_fd``."""
        files, latest = {}, 0
        for name in [*self.released, SECRET_FILE]:
            cap = MAX_SECRET_BYTES if name == SECRET_FILE else self.max_notebook_bytes
            data, why, ctime = read_own_file(name, uid, cap, dir_fd=sub_fd)
            if data is not None and name == SECRET_FILE and not SECRET.fullmatch(data.decode("ascii", "replace")):
                data, why = None, "not a submission secret"
            elif data is not None and name != SECRET_FILE and not _is_notebook(data):
                data, why = None, f"not a notebook ({len(data)} bytes)"
            if data is None:
                if why != "missing":
                    self.log.warning("Left out %s: %s", os.path.join(path, name), why)
                continue
            files[name] = data
            latest = max(latest, ctime)
        latest = max(latest, os.fstat(sub_fd).st_ctime_ns)   # after the reads: a file renamed in or out is later
        for name in os.listdir(sub_fd):
            if name not in (*self.released, SECRET_FILE, "timestamp.txt"):
                self.log.warning("Left out %s: not a released notebook of %s", os.path.join(path, name),
                                 self.coursedir.assignment_id)
        return files, latest

    def _collect_student(self, user: str, inbound_fd: int) -> dict | None:
        """The submission of ``user`` to collect (with its bytes and kernel time), or None; raises OSError where
        the student's folder cannot be read."""
        uid, gid = _account(user)
        folder = os.path.join(self.inbound_path, user)
        if not is_student_folder(_lstat(user, dir_fd=inbound_fd), uid, gid):
            self.log.warning("Left out %s: not the inbound folder of a user of that name", folder)
            return None
        user_fd = os.open(user, _DIR, dir_fd=inbound_fd)
        try:
            prefix = f"{user}+{self.coursedir.assignment_id}+"
            found = []
            for name in sorted(os.listdir(user_fd)):
                if not name.startswith(prefix):
                    continue
                st = _lstat(name, dir_fd=user_fd)
                if st is None or not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
                    self.log.warning("Left out %s: not a folder %s owns", os.path.join(folder, name), user)
                    continue
                when = folder_time(name, dir_fd=user_fd)
                if when is None:
                    self.log.warning("Left out %s: cannot be read", os.path.join(folder, name))
                    continue
                found.append((when, name))
            found.sort(reverse=True)
            if self.duedate is not None and self.before_duedate:
                found = [f for f in found if f[0] <= self.duedate] + [f for f in found if f[0] > self.duedate]
            for _, name in found:   # newest first: the first with a notebook collect takes
                path = os.path.join(folder, name)
                try:
                    sub_fd = os.open(name, _DIR, dir_fd=user_fd)
                except OSError as exc:
                    self.log.warning("Left out %s: %s", path, "a link" if exc.errno == errno.ELOOP
                                     else f"cannot be read ({exc.strerror})")
                    continue
                try:
                    files, ctime = self._snapshot(sub_fd, path, uid)
                except OSError as exc:
                    self.log.warning("Left out %s: cannot be read (%s)", path, exc.strerror)
                    continue
                finally:
                    os.close(sub_fd)
                if any(n != SECRET_FILE for n in files):
                    return {"username": user, "uid": uid, "filename": name, "path": path,
                            "timestamp": kernel_time(ctime), "files": files}
                self.log.warning("Left out %s: no released notebook in it could be taken", path)
            return None
        finally:
            os.close(user_fd)

    def init_src(self):
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.inbound_path = os.path.join(self.course_path, "inbound")
        try:
            inbound_fd = os.open(self.inbound_path, _DIR)
        except OSError as exc:
            self.fail(f"Course not found: {self.inbound_path} ({exc.strerror})")
        self.released = self._released_names()
        with _collect.Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
            try:
                self.duedate = gb.find_assignment(self.coursedir.assignment_id).duedate
            except _collect.MissingEntry:
                self.duedate = None
        wanted = self.coursedir.student_id if self.coursedir.student_id not in ("", "*") else None
        self.src_records = []
        try:
            for user in sorted(os.listdir(inbound_fd)):
                if (wanted is not None and user != wanted) or user.startswith("."):
                    continue
                try:
                    rec = self._collect_student(user, inbound_fd)
                except OSError as exc:   # that student's line, never the class's failure
                    self.log.warning("Left out %s: %s", os.path.join(self.inbound_path, user),
                                     "a link" if exc.errno == errno.ELOOP else f"cannot be read ({exc.strerror})")
                    continue
                if rec is not None:
                    self.src_records.append(rec)
        finally:
            os.close(inbound_fd)

    def copy_files(self):
        if not self.src_records:
            self.log.warning("No submissions of '%s' for course '%s' to collect",
                             self.coursedir.assignment_id, self.coursedir.course_id)
        for rec in self.src_records:
            student = rec["username"]
            dest = self.coursedir.format_path(self.coursedir.submitted_directory, student, self.coursedir.assignment_id)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if os.path.isdir(dest):
                old = self.coursedir.get_existing_timestamp(dest)
                newer = self.update and (old is None or rec["timestamp"] > old)
                if not (newer or (self.before_duedate and old != rec["timestamp"])):
                    self.log.info("No newer submission to collect: %s %s", student, self.coursedir.assignment_id)
                    continue
                self.log.info("Updating submission: %s %s", student, self.coursedir.assignment_id)
                shutil.rmtree(dest)
            else:
                self.log.info("Collecting submission: %s %s", student, self.coursedir.assignment_id)
            os.makedirs(dest)
            for name, data in rec["files"].items():
                with open(os.path.join(dest, name), "wb") as f:
                    f.write(data)
            with open(os.path.join(dest, "timestamp.txt"), "w") as f:
                f.write(format_time(rec["timestamp"]))


class ExchangeList(_RootNeedNotBeWritable, _list.ExchangeList):
    """nbgrader's list; ``--inbound`` looks in the per-student folders (those the caller can read), shows the
    kernel's time of each submission, and ``--remove`` takes a submission out of every listing even where the
    instructor cannot delete a student's files."""

    def init_dest(self):
        if not self.inbound:
            return super().init_dest()
        course_id = self.coursedir.course_id or "*"
        assignment_id = self.coursedir.assignment_id or "*"
        student_id = self.coursedir.student_id or "*"
        pattern = os.path.join(self.root, course_id, "inbound", student_id, f"{student_id}+{assignment_id}+*")
        self.assignments = sorted(p for p in glob.glob(pattern) if not os.path.islink(p))

    def parse_assignment(self, assignment):
        if not self.inbound:
            return super().parse_assignment(assignment)
        regexp = (r".*/(?P<course_id>[^/]*)/inbound/[^/]*/(?P<student_id>[^+/]*)\+(?P<assignment_id>[^+/]*)"
                  r"\+(?P<timestamp>[^+/]*)(?P<random_string>\+[^/]*)?$")
        m = re.match(regexp, assignment)
        if m is None:
            raise RuntimeError(f"Could not match {assignment!r} with {regexp!r}")
        info = m.groupdict()
        when = folder_time(assignment)   # the kernel's time, not the one in the name the student chose
        info["timestamp"] = format_time(when) if when is not None else "(cannot be read)"
        return info

    def remove_files(self):
        if not self.inbound:
            return super().remove_files()
        assignments = self.parse_assignments()
        self.log.info("Removing submitted assignments:")
        for assignment in assignments:
            for info in assignment["submissions"]:
                self.log.info(self.format_inbound_assignment(info))
        for path in self.assignments:
            head, name = os.path.split(path)
            aside = os.path.join(head, f"{REMOVED}{secrets.token_hex(4)}-{name}")
            try:
                os.rename(path, aside)   # out of every listing and of collect (the folder above is the instructor's)
            except OSError as exc:
                self.log.warning("Could not remove %s: %s", path, exc.strerror)
                continue
            shutil.rmtree(aside, ignore_errors=True)   # the student's own files stay until they delete them
        return assignments


class Exchange(_RootNeedNotBeWritable, _exchange.Exchange):
    pass


class ExchangeReleaseAssignment(_RootNeedNotBeWritable, _release.ExchangeReleaseAssignment):
    pass


class ExchangeFetchAssignment(_RootNeedNotBeWritable, _fetch.ExchangeFetchAssignment):
    pass


class ExchangeFetchFeedback(_RootNeedNotBeWritable, _fetch_feedback.ExchangeFetchFeedback):
    pass


class ExchangeReleaseFeedback(_RootNeedNotBeWritable, _release_feedback.ExchangeReleaseFeedback):
    """nbgrader's release_feedback; a student whose collected secret or time is missing or not valid is a line in
    the log (and left out), never the class's failure."""

    def copy_files(self):
        excluded = set(filter(None, (self.coursedir.student_id_exclude or "").split(",")))
        for html in glob.glob(os.path.join(self.src_path, "*.html")):
            folder = os.path.dirname(html)
            student = os.path.basename(os.path.dirname(folder))
            if student in excluded:
                continue
            try:
                with open(os.path.join(folder, SECRET_FILE)) as f:
                    secret = f.read(MAX_SECRET_BYTES + 1)
                with open(os.path.join(folder, "timestamp.txt")) as f:
                    f.read(1024)
                why = None if SECRET.fullmatch(secret) else f"its {SECRET_FILE} is not a submission secret"
            except (OSError, UnicodeDecodeError) as exc:
                why = f"{getattr(exc, 'filename', None) or SECRET_FILE}: {getattr(exc, 'strerror', None) or exc}"
            if why:
                self.log.warning("Left out the feedback of %s: %s", student, why)
                excluded.add(student)
        self.coursedir.student_id_exclude = ",".join(sorted(excluded))
        super().copy_files()


def config_lines(module: str = "course_exchange") -> str:
    """The nbgrader config that puts this exchange in place of nbgrader's default one."""
    kinds = {"exchange": "Exchange", "submit": "ExchangeSubmit", "collect": "ExchangeCollect", "list": "ExchangeList",
             "release_assignment": "ExchangeReleaseAssignment", "fetch_assignment": "ExchangeFetchAssignment",
             "fetch_feedback": "ExchangeFetchFeedback", "release_feedback": "ExchangeReleaseFeedback"}
    return "".join(f"c.ExchangeFactory.{k} = {module + '.' + v!r}\n" for k, v in kinds.items())
