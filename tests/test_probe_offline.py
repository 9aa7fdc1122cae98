"""Section 07's BERT probe works with the network switched off.

* ``load_bert()`` / ``load_shipped()`` load and run with every outgoing connection refused;
* the instructor notebook (solutions and hidden tests in place) runs top to bottom with no
  network at all and prints which model it used.

How the network is switched off: in a new network namespace (``unshare --net``, needs root or
user namespaces; the namespace has no interface up, not even loopback, so the kernel talks to
nbconvert over IPC sockets instead of TCP). Where ``unshare --net`` is not allowed, a
``sitecustomize`` on ``PYTHONPATH`` makes every non-loopback ``socket.connect`` raise, in the
notebook's kernel too, with ``HF_HUB_OFFLINE=1``. The test reports which one ran.
"""
from __future__ import annotations

import functools
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

from tests.harness import ROOT, cell_text, course_env

SECTION = "07_bert_probe"
SOURCE = ROOT / "source" / SECTION / f"{SECTION}.ipynb"

BLOCK_NET = textwrap.dedent('''
    # Installed by tests/test_probe_offline.py: refuse every connection that leaves the machine.
    import socket as _socket

    class NetworkBlocked(OSError):
        pass

    _LOCAL = ("127.", "::1", "localhost", "0.0.0.0")
    _connect = _socket.socket.connect

    def _guard(address):
        if not isinstance(address, tuple):  # an AF_UNIX path: stays on the machine
            return
        host = str(address[0])
        if host == "" or host.startswith(_LOCAL):
            return
        raise NetworkBlocked(f"network access blocked by the offline test: {address!r}")

    _connect_ex = _socket.socket.connect_ex

    def connect(self, address):
        _guard(address)
        return _connect(self, address)

    def connect_ex(self, address):
        _guard(address)
        return _connect_ex(self, address)

    _socket.socket.connect = connect
    _socket.socket.connect_ex = connect_ex

    def _no_dns(host, *args, **kwargs):
        if isinstance(host, str) and not host.startswith(_LOCAL) and host not in ("", None):
            raise NetworkBlocked(f"DNS lookup blocked by the offline test: {host!r}")
        return _getaddrinfo(host, *args, **kwargs)

    _getaddrinfo = _socket.getaddrinfo
    _socket.getaddrinfo = _no_dns
''')


@functools.lru_cache(maxsize=None)
def unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def offline(cmd: list[str], tmp_path: Path, timeout: int):
    """Run ``cmd`` without network; returns (CompletedProcess, how)."""
    env = course_env({"ATTNCOURSE_ROOT": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                      "HF_HOME": str(tmp_path / "hf_home_empty")})
    if unshare_works():
        how = "unshare --net"
        cmd = ["unshare", "--net", *cmd]
    else:
        how = "sitecustomize socket block + HF_HUB_OFFLINE=1"
        site = tmp_path / "netblock"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(BLOCK_NET)
        env["PYTHONPATH"] = f"{site}:{env.get('PYTHONPATH', '')}".rstrip(":")
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)
    print(f"network switched off with: {how}")
    return proc, how


@pytest.mark.slow
def test_load_bert_never_touches_the_network(tmp_path):
    """Connections are refused in-process as well, so a loader that tried to reach a hub would fail loudly."""
    script = tmp_path / "load.py"
    script.write_text(BLOCK_NET + textwrap.dedent('''
        import time
        import torch
        from attncourse.teach.models import choose_model, load_bert, load_shipped
        start = time.perf_counter()
        bert = load_bert()
        enc = bert.tokenizer("The animal didn't cross the street", return_tensors="pt")
        with torch.no_grad():
            out = bert.model(**enc, output_attentions=True)
        assert len(out.attentions) == bert.n_layers and out.attentions[0].shape[1] == bert.n_heads
        shipped = load_shipped("float64")
        assert shipped.model.dtype == torch.float64 and shipped.model.config.num_hidden_layers == 6
        print("MODEL", bert.describe())
        print("SECONDS", round(time.perf_counter() - start, 1))
    '''))
    proc, how = offline([sys.executable, str(script)], tmp_path, timeout=120)
    assert proc.returncode == 0, f"[{how}]\n{proc.stdout}\n{proc.stderr[-3000:]}"
    assert "MODEL " in proc.stdout, proc.stdout
    assert "NetworkBlocked" not in proc.stderr


@pytest.mark.slow
def test_notebook_runs_offline(tmp_path):
    nb_path = tmp_path / f"{SECTION}.ipynb"
    shutil.copy(SOURCE, nb_path)
    out_path = tmp_path / "executed.ipynb"
    cmd = [sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
           "--ExecutePreprocessor.timeout=120", "--KernelManager.transport=ipc",
           "--output", str(out_path), str(nb_path)]
    proc, how = offline(cmd, tmp_path, timeout=240)
    assert proc.returncode == 0, f"[{how}] the notebook failed offline:\n{proc.stderr[-4000:]}"
    nb = nbformat.read(str(out_path), as_version=4)
    text = "\n".join(cell_text(c) for c in nb.cells if c.cell_type == "code")
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, errors[0]
    assert "model used:" in text, "the notebook should print which model it used"
    assert "✓ attention_maps" in text and "✓ special_token_share" in text, "hidden tests did not run"
    assert (tmp_path / "figures" / "attention_heatmap.png").is_file(), "the deliverable heatmap was not saved"
    assert (tmp_path / "figures" / "it_animal_grid.png").is_file()


@pytest.mark.skipif(not unshare_works(), reason="unshare --net is not allowed here")
def test_unshare_really_cuts_the_network(tmp_path):
    """Sanity check of the harness itself: inside the namespace a connection attempt fails at once."""
    code = ("import socket\n"
            "try:\n"
            "    socket.create_connection(('1.1.1.1', 443), timeout=3)\n"
            "    print('CONNECTED')\n"
            "except OSError as e:\n"
            "    print('BLOCKED', e)\n")
    proc, _ = offline([sys.executable, "-c", code], tmp_path, timeout=30)
    assert "BLOCKED" in proc.stdout, proc.stdout + proc.stderr
