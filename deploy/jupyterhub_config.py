"""JupyterHub for the course on one machine: PAM logins of real Unix users, local single-user servers.

``./course hub`` (instructor/hub.py) writes ``$ATTNCOURSE_HUB_DIR/hub.json`` and starts
``jupyterhub -f deploy/jupyterhub_config.py`` as root; see deploy/README.md.
"""
import json
import os
from pathlib import Path

c = get_config()  # noqa: F821

HUB = Path(os.environ["ATTNCOURSE_HUB_DIR"])
S = json.loads((HUB / "hub.json").read_text())
STATE = Path(S["state"])
VENV_BIN = str(Path(S["python"]).parent)

# where it listens: the proxy on ip:port, the hub and the proxy's API on free local ports
c.JupyterHub.bind_url = f"http://{S['ip']}:{S['port']}"
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
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [str(Path(VENV_BIN) / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
c.Spawner.http_timeout = 120
c.Spawner.start_timeout = 120
c.Spawner.environment = {
    "PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",
    "MPLBACKEND": "Agg", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
    "LANG": os.environ.get("LANG", "C.UTF-8"),
}
if S.get("ld_library_path"):   # a copied interpreter finds its libpython there (instructor/hub.py: base_python)
    c.Spawner.environment["LD_LIBRARY_PATH"] = S["ld_library_path"]


def role_config(spawner):
    """The instructor's servers get formgrader on the course folder, students the Assignments panel only."""
    role = "instructor" if spawner.user.name == S["instructor"] else "student"
    spawner.environment["JUPYTER_CONFIG_PATH"] = str(Path(S["etc"]) / role)
    spawner.environment["ATTNCOURSE_HUB_ROLE"] = role


c.Spawner.pre_spawn_hook = role_config
