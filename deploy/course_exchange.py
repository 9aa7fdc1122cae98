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
  instructor's, 0711 (nobody lists it); and in it **one folder per student, owned by that student, group the
  instructor's, mode 2750**: only that student writes there, only the instructor reads it besides.
* **submit** (:class:`ExchangeSubmit`) writes into the submitting account's own folder: the login comes from the
  process's uid (not ``--student``, not ``$USER``); asking to submit as someone else fails.
* **collect** (:class:`ExchangeCollect`) reads a student's folder only if that student owns it, and a submission
  only if that student owns it; the submission's time is the latest *ctime* of its folder and files (the kernel
  sets ctime; its owner can only move it forward, to the moment of their last change), never its name or its
  ``timestamp.txt``. It copies **only the released notebooks' names**, as regular files owned by the student
  with one link, opened without following links, each at most ``ExchangeCollect.max_notebook_bytes``, plus
  ``submission_secret.txt`` (128 hex digits, for the feedback); everything else is left out and named in the
  log (an extra ``ipykernel_launcher.py``, a link, a hard link, a folder, a file too large).
* the other operations are nbgrader's, with the one change that the exchange root need not be writable by all.
"""
from __future__ import annotations

import base64
import datetime
import errno
import glob
import os
import pwd
import re
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


def login() -> str:
    """The account this process runs as (its real uid; not $USER, not --student)."""
    return pwd.getpwuid(os.getuid()).pw_name


def _uid(name: str) -> int | None:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


class _RootNeedNotBeWritable:
    """The exchange root is root-owned 0755: it must exist and be searchable, not writable by everyone."""

    def ensure_root(self):
        st = _lstat(self.root)
        if st is None or not stat.S_ISDIR(st.st_mode):
            self.fail(f"The exchange {self.root} does not exist; please contact your instructor")
        if not os.access(self.root, os.R_OK | os.X_OK):
            self.fail(f"The exchange {self.root} is not readable; please contact your instructor")


def _lstat(path):
    try:
        return os.lstat(path)
    except OSError:
        return None


def own_folder(inbound: str, user: str, uid: int | None) -> str | None:
    """``inbound/<user>`` if it is a real folder (not a link) owned by ``user`` (whose uid is ``uid``); else None."""
    path = os.path.join(inbound, user)
    st = _lstat(path)
    if uid is None or st is None or not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
        return None
    return path


class ExchangeSubmit(_RootNeedNotBeWritable, _submit.ExchangeSubmit):
    """nbgrader's submit, into the submitting account's own inbound folder, as that account."""

    def init_dest(self):
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        me = login()
        asked = self.coursedir.student_id
        if asked not in ("*", "", me):
            self.fail(f"You submit as yourself ({me}), not as {asked!r}.")
        self.coursedir.student_id = me
        inbound = os.path.join(self.root, self.coursedir.course_id, "inbound")
        self.inbound_path = own_folder(inbound, me, os.getuid())
        if self.inbound_path is None:
            self.fail(f"There is no submission folder for {me} in this course; please contact your instructor.")
        self.cache_path = os.path.join(self.cache, self.coursedir.course_id)
        ts = self.timestamp   # shown to the student (their Assignments panel); collect does not trust it
        rand = base64.urlsafe_b64encode(os.urandom(9)).decode("ascii")
        self.assignment_filename = f"{me}+{self.coursedir.assignment_id}+{ts}+{rand}"

    def do_copy(self, src, dest, log=None):
        """nbgrader's copy, except into the inbound: there each folder is made (not copied with its mode, which
        would clear the setgid bit it inherits) so that every file of the submission, ``timestamp.txt`` and
        ``submission_secret.txt`` written after it included, gets the instructor's group; links are left out."""
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
        super().copy_files()
        # nbgrader leaves the submission 0777 "so the instructor can delete it": here only its owner writes it,
        # and the instructor's group reads it (the folder above is 2750: nobody else even reaches it)
        dest = os.path.join(self.inbound_path, self.assignment_filename)
        self.set_perms(dest, fileperms=0o640, dirperms=0o750)


class ExchangeCollect(_RootNeedNotBeWritable, _collect.ExchangeCollect):
    """Collect that trusts the kernel (owners, ctimes), copies only released notebooks and follows no link."""

    max_notebook_bytes = Integer(20 * 1024 * 1024, help="A larger submitted notebook is left out (and named)."
                                 ).tag(config=True)

    def _released_names(self) -> list[str]:
        release = self.coursedir.format_path(self.coursedir.release_directory, ".", self.coursedir.assignment_id)
        names = [n for n in find_all_notebooks(release) if os.sep not in n]
        if not names:
            self.fail(f"No released notebooks in {release}: generate the assignment first.")
        return names

    def _submissions(self, user: str, folder: str, uid: int) -> list[dict]:
        """The submissions of ``assignment`` in ``folder`` that ``user`` owns, timed by their ctimes."""
        out = []
        prefix = f"{user}+{self.coursedir.assignment_id}+"
        with os.scandir(folder) as it:
            for entry in it:
                if not entry.name.startswith(prefix):
                    continue
                st = _lstat(entry.path)
                if st is None or not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
                    self.log.warning("Left out %s: not a folder %s owns", entry.path, user)
                    continue
                ctime = st.st_ctime
                with os.scandir(entry.path) as files:
                    for f in files:
                        fst = _lstat(f.path)
                        if fst is not None:
                            ctime = max(ctime, fst.st_ctime)
                when = datetime.datetime.fromtimestamp(ctime, datetime.timezone.utc).replace(tzinfo=None)
                out.append({"username": user, "uid": uid, "filename": entry.name, "path": entry.path,
                            "timestamp": when})
        return out

    def init_src(self):
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.inbound_path = os.path.join(self.course_path, "inbound")
        if not os.path.isdir(self.inbound_path):
            self.fail(f"Course not found: {self.inbound_path}")
        self.released = self._released_names()
        wanted = self.coursedir.student_id if self.coursedir.student_id not in ("", "*") else None
        records = []
        with os.scandir(self.inbound_path) as it:
            names = sorted(e.name for e in it)
        for user in names:
            if wanted is not None and user != wanted:
                continue
            uid = _uid(user)
            folder = own_folder(self.inbound_path, user, uid)
            if folder is None:
                self.log.warning("Left out %s: not a folder owned by a user of that name",
                                 os.path.join(self.inbound_path, user))
                continue
            records += self._submissions(user, folder, uid)
        usergroups = _collect.groupby(records, lambda item: item["username"])
        with _collect.Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
            try:
                self.duedate = gb.find_assignment(self.coursedir.assignment_id).duedate
            except _collect.MissingEntry:
                self.duedate = None
        self.src_records = []
        for recs in usergroups.values():
            recs = self._sort_by_timestamp(recs)
            if self.duedate is not None and self.before_duedate:
                before = [r for r in recs if r["timestamp"] <= self.duedate]
                recs = before or recs
            self.src_records.append(recs[0])

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
            self.copy_submission(rec["path"], dest, rec["uid"], rec["timestamp"])

    def copy_submission(self, src: str, dest: str, uid: int, when: datetime.datetime):
        """The released notebooks of ``src`` (and its secret) into ``dest``, each read without following a link;
        ``timestamp.txt`` from ``when``; everything else named in the log and left out."""
        os.makedirs(dest)
        taken = set()
        for name in [*self.released, "submission_secret.txt"]:
            cap = MAX_SECRET_BYTES if name == "submission_secret.txt" else self.max_notebook_bytes
            data, why = read_own_file(os.path.join(src, name), uid, cap)
            if data is None:
                if why != "missing":
                    self.log.warning("Left out %s: %s", os.path.join(src, name), why)
                continue
            if name == "submission_secret.txt" and not SECRET.fullmatch(data.decode("ascii", "replace")):
                self.log.warning("Left out %s: not a submission secret", os.path.join(src, name))
                continue
            with open(os.path.join(dest, name), "wb") as f:
                f.write(data)
            taken.add(name)
        with os.scandir(src) as it:
            for entry in it:
                if entry.name not in taken and entry.name != "timestamp.txt":
                    self.log.warning("Left out %s: not a released notebook of %s", entry.path,
                                     self.coursedir.assignment_id)
        with open(os.path.join(dest, "timestamp.txt"), "w") as f:
            f.write(when.strftime("%Y-%m-%d %H:%M:%S.%f UTC"))


def read_own_file(path: str, uid: int, cap: int) -> tuple[bytes | None, str]:
    """(the bytes of ``path``, "") if it is a regular file owned by ``uid`` with one link and at most ``cap``
    bytes, opened without following a link; else (None, why)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None, "missing"
    except OSError as exc:
        return None, "a link" if exc.errno == errno.ELOOP else f"cannot be opened ({exc.strerror})"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, "not a regular file"
        if st.st_uid != uid:
            return None, "not the student's own file"
        if st.st_nlink != 1:
            return None, "a hard link"
        if st.st_size > cap:
            return None, f"larger than {cap} bytes"
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(cap + 1)
        if len(data) > cap:
            return None, f"larger than {cap} bytes"
        return data, ""
    finally:
        os.close(fd)


class ExchangeList(_RootNeedNotBeWritable, _list.ExchangeList):
    """nbgrader's list; ``--inbound`` looks in the per-student folders (those the caller can read)."""

    def init_dest(self):
        if not self.inbound:
            return super().init_dest()
        course_id = self.coursedir.course_id or "*"
        assignment_id = self.coursedir.assignment_id or "*"
        student_id = self.coursedir.student_id or "*"
        pattern = os.path.join(self.root, course_id, "inbound", student_id, f"{student_id}+{assignment_id}+*")
        self.assignments = sorted(glob.glob(pattern))

    def parse_assignment(self, assignment):
        if not self.inbound:
            return super().parse_assignment(assignment)
        regexp = (r".*/(?P<course_id>[^/]*)/inbound/[^/]*/(?P<student_id>[^+/]*)\+(?P<assignment_id>[^+/]*)"
                  r"\+(?P<timestamp>[^+/]*)(?P<random_string>\+[^/]*)?$")
        m = re.match(regexp, assignment)
        if m is None:
            raise RuntimeError(f"Could not match {assignment!r} with {regexp!r}")
        return m.groupdict()


class Exchange(_RootNeedNotBeWritable, _exchange.Exchange):
    pass


class ExchangeReleaseAssignment(_RootNeedNotBeWritable, _release.ExchangeReleaseAssignment):
    pass


class ExchangeFetchAssignment(_RootNeedNotBeWritable, _fetch.ExchangeFetchAssignment):
    pass


class ExchangeFetchFeedback(_RootNeedNotBeWritable, _fetch_feedback.ExchangeFetchFeedback):
    pass


class ExchangeReleaseFeedback(_RootNeedNotBeWritable, _release_feedback.ExchangeReleaseFeedback):
    pass


def config_lines(module: str = "course_exchange") -> str:
    """The nbgrader config that puts this exchange in place of nbgrader's default one."""
    kinds = {"exchange": "Exchange", "submit": "ExchangeSubmit", "collect": "ExchangeCollect", "list": "ExchangeList",
             "release_assignment": "ExchangeReleaseAssignment", "fetch_assignment": "ExchangeFetchAssignment",
             "fetch_feedback": "ExchangeFetchFeedback", "release_feedback": "ExchangeReleaseFeedback"}
    return "".join(f"c.ExchangeFactory.{k} = {module + '.' + v!r}\n" for k, v in kinds.items())
