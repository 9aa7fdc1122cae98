"""JupyterHub for the course on one machine: PAM logins of real Unix users, local single-user servers.

``./course hub`` (deploy/hub.py) writes ``$ATTNCOURSE_HUB_DIR/hub.json`` and starts
``jupyterhub -f deploy/jupyterhub_config.py`` as root; see deploy/README.md.
"""
import json
import os
import sys
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner

c = get_config()  # noqa: F821
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # this checkout: deploy.hub
from deploy.hub import limits_preexec, resolve_limits, user_cgroups  # noqa: E402

HUB = Path(os.environ["ATTNCOURSE_HUB_DIR"])
S = json.loads((HUB / "hub.json").read_text())
STATE = Path(S["state"])
VENV_BIN = str(Path(S["python"]).parent)

# where it listens: the proxy on ip:port, the hub and the proxy's API on free local ports
c.JupyterHub.bind_url = f"http://{S['ip']}:{S['port']}"
# every user's server on an origin of its own (http://<user>.localhost:PORT; the hub on http://localhost:PORT): a
# page a student's server serves cannot read, frame or script the hub's or the instructor's pages, whatever it is
if S.get("public_url"):
    c.JupyterHub.subdomain_host = S["public_url"]
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{S['hub_port']}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{S['proxy_api_port']}"
c.ConfigurableHTTPProxy.command = [S["proxy"]]
c.ConfigurableHTTPProxy.pid_file = str(STATE / "proxy.pid")
c.JupyterHub.db_url = f"sqlite:///{STATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "jupyterhub_cookie_secret")
c.JupyterHub.cleanup_servers = True   # stopping the hub stops every user's server
c.JupyterHub.cleanup_proxy = True

# real users, real passwords (PAM); only the course's accounts may log in
c.JupyterHub.authenticator_class = "pam"
c.PAMAuthenticator.open_sessions = False   # no login sessions (systemd-logind) needed for a notebook server
c.Authenticator.allowed_users = {S["instructor"], *S["students"]}
c.Authenticator.admin_users = {S["instructor"]}

# each user's server: this course's Python, as that user, in their home folder, JupyterLab
LIMITS = resolve_limits(S.get("limits"))


class CourseSpawner(LocalProcessSpawner):
    """LocalProcessSpawner; a student's server, and all it starts (kernels, terminals), runs under the per-student
    limits of hub.json (./course hub --user-procs, --process-memory, --user-memory, --cpu-shares): their own
    cgroups where the machine allows them, RLIMIT_NPROC and RLIMIT_AS always. The instructor's is not limited
    (./course grade runs a kernel per worker)."""

    def make_preexec_fn(self, name):
        setuid = super().make_preexec_fn(name)
        if name == S["instructor"]:
            return setuid
        disk = (S.get("disks") or {}).get(name)
        private = {"tmp": str(Path(disk) / "tmp")} if disk else None   # /tmp, /var/tmp on the student's disk
        return limits_preexec(LIMITS, user_cgroups(name, LIMITS), then=setuid, private=private)


c.JupyterHub.spawner_class = CourseSpawner
c.Spawner.cmd = [str(Path(VENV_BIN) / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
c.Spawner.http_timeout = 120
c.Spawner.start_timeout = 120
# a student cannot reconfigure what their server serves: no config, extension or static path from their home
# (~/.jupyter, ~/.local/share/jupyter: JupyterHub's disable_user_config), no module from their user site-packages
# (PYTHONNOUSERSITE; the course's packages are all in the shared environment). Their pages are on their own origin
# anyway (above): a student with a shell can always serve something else on their server's port.
c.Spawner.disable_user_config = True
c.Spawner.environment = {
    "PYTHONNOUSERSITE": "1",
    "PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",
    "MPLBACKEND": "Agg", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
    "LANG": os.environ.get("LANG", "C.UTF-8"),
}


def role_config(spawner):
    """The instructor's servers get formgrader on the course folder, students the Assignments panel only."""
    role = "instructor" if spawner.user.name == S["instructor"] else "student"
    spawner.environment["JUPYTER_CONFIG_PATH"] = str(Path(S["etc"]) / role)
    spawner.environment["ATTNCOURSE_HUB_ROLE"] = role


c.Spawner.pre_spawn_hook = role_config
