#!/usr/bin/env bash
# deploy/check-fresh-debian.sh: the one-page guide (deploy/README.md) on a fresh Debian 12, as an instructor follows it.
# Not run by CI (it downloads a whole Debian). As root, on a Debian/Ubuntu machine with debootstrap, util-linux and git
# that reaches Debian's mirror, PyPI and npm:
#
#   deploy/check-fresh-debian.sh [--hub-test] [--keep] [--again] [ROOTDIR]   (ROOTDIR: default /srv/deb12, made afresh;
#                                          --again: 3 and 4 only, in the ROOTDIR a --keep run left)
#
# 1. debootstrap --variant=minbase bookworm ROOTDIR (this machine's Debian mirror; bookworm-updates and -security too);
#    proc, sys, dev, dev/pts, dev/shm mounted in; resolv.conf; this machine's pip configuration (its pip.conf files and
#    the local folders they name), so that pip resolves there as it does here.
# 2. Section 1 of the guide: its ```bash block, word for word, "<this repository>" being a clone of this checkout's
#    committed HEAD.
# 3. Section 2: ./course hub --students 2 on a free port in the background; it must print the passwords; student1 logs
#    in with curl and reaches their JupyterLab; Ctrl-C (SIGINT) must end the hub, the proxy and every process of
#    the hub's users.
# 4. With --hub-test: the repository's browser test of the whole loop, .venv/bin/python -m pytest -x -q tests/test_hub.py.
# Everything mounted is unmounted at the end (--keep leaves ROOTDIR on disk, else it is removed).
#
# The Debian is entered with unshare + pivot_root, not chroot: the kernel refuses user namespaces to a chrooted
# process, and bubblewrap (the grading sandbox; Debian's is not setuid) needs them.
set -euo pipefail
trap 'echo "$0: line $LINENO failed: $BASH_COMMAND" >&2' ERR
HUB_TEST=0 KEEP=0 AGAIN=0
while [ $# -gt 0 ]; do
  case "$1" in
    --hub-test) HUB_TEST=1 ;;
    --keep) KEEP=1 ;;
    --again) AGAIN=1 KEEP=1 ;;
    -*) sed -n '2,21p' "$0"; exit 2 ;;
    *) break ;;
  esac
  shift
done
ROOTDIR=$(realpath -m "${1:-/srv/deb12}")
REPO=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "$0: run it as root (debootstrap, mounts)" >&2; exit 2; }
case "$ROOTDIR/" in "$REPO"/*|/|/srv/|/tmp/) echo "$0: pick another folder than $ROOTDIR" >&2; exit 2 ;; esac
command -v debootstrap >/dev/null || { echo "$0: apt-get install debootstrap" >&2; exit 2; }
MIRROR=$(grep -rhoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
         | awk '{print $2}' | head -1 || true)
MIRROR=${MIRROR:-http://deb.debian.org/debian}
log() { printf '\n=== %s  %s\n' "$(date -u +%H:%M:%S)" "$*"; }

cleanup() {
  set +e
  if mountpoint -q "$ROOTDIR/proc" 2>/dev/null || grep -q " $ROOTDIR/" /proc/mounts; then
    grep -o " $ROOTDIR/[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m"; done
  fi
  grep -q " $ROOTDIR/" /proc/mounts && { echo "$0: still mounted under $ROOTDIR, left on disk" >&2; return; }
  [ "$KEEP" = 1 ] || rm -rf --one-file-system "$ROOTDIR"
}
trap cleanup EXIT

# run "$1" as root in the Debian: a mount namespace of its own whose root is ROOTDIR (pivot_root), a clean environment
in_debian() {
  unshare --mount --propagation private -- /bin/bash -c '
    set -e
    mount --rbind "$0" "$0"; cd "$0"; mkdir -p .oldroot; pivot_root . .oldroot; cd /
    umount -l /.oldroot; rmdir /.oldroot
    exec /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      /bin/bash -euo pipefail -c "$1"' "$ROOTDIR" "$1"
}

grep -q " $ROOTDIR/" /proc/mounts && { echo "$0: something is mounted under $ROOTDIR" >&2; exit 2; }
if [ "$AGAIN" = 0 ]; then
  log "1. debootstrap bookworm (minbase) from $MIRROR into $ROOTDIR"
  rm -rf --one-file-system "$ROOTDIR"
  debootstrap --variant=minbase bookworm "$ROOTDIR" "$MIRROR" >"$ROOTDIR.debootstrap.log" 2>&1 \
    || { tail -20 "$ROOTDIR.debootstrap.log"; exit 1; }
  SEC=${MIRROR%/debian*}/debian-security
  printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb %s bookworm-security main\n' "$MIRROR" "$MIRROR" "$SEC" \
    >"$ROOTDIR/etc/apt/sources.list"
else
  [ -x "$ROOTDIR/opt/attention-transformers/.venv/bin/python" ] || { echo "$0: no kept run in $ROOTDIR" >&2; exit 2; }
  log "1 and 2 skipped (--again): $ROOTDIR as a --keep run left it"
fi
cp /etc/resolv.conf "$ROOTDIR/etc/resolv.conf"
mount -t proc proc "$ROOTDIR/proc"
mount --rbind /sys "$ROOTDIR/sys" && mount --make-rslave "$ROOTDIR/sys"
mount --bind /dev "$ROOTDIR/dev" && mount --make-slave "$ROOTDIR/dev"
for d in pts shm; do mount --bind "/dev/$d" "$ROOTDIR/dev/$d" && mount --make-slave "$ROOTDIR/dev/$d"; done
# this machine's own certificate authorities (a TLS-intercepting proxy's, if any): Debian's ca-certificates, which the
# guide's apt-get brings in, adds them to /etc/ssl/certs as it does here
mkdir -p "$ROOTDIR/usr/local/share/ca-certificates"
cp -r /usr/local/share/ca-certificates/. "$ROOTDIR/usr/local/share/ca-certificates/" 2>/dev/null || true
# this machine's pip configuration and the local folders it names (a wheel folder, a file:// index)
for conf in /etc/pip.conf /etc/xdg/pip/pip.conf "$HOME/.config/pip/pip.conf" "$HOME/.pip/pip.conf"; do
  [ -f "$conf" ] || continue
  dest="$ROOTDIR${conf/#$HOME//root}"; mkdir -p "$(dirname "$dest")"; cp "$conf" "$dest"
  for p in $(grep -oE '(file://)?/[^ ,]+' "$conf" | sed 's|^file://||'); do
    [ "$(basename "$p")" = simple ] && p=$(dirname "$p")   # a file:// index links ../../files
    case "$p" in /etc/ssl/*) continue ;; esac   # the CA bundle: Debian's, with the authorities above
    [ -e "$p" ] || continue
    if [ -d "$p" ]; then mkdir -p "$ROOTDIR$p"; mount --bind -o ro "$p" "$ROOTDIR$p"
    else mkdir -p "$(dirname "$ROOTDIR$p")"; cp "$p" "$ROOTDIR$p"; fi
  done
done
if [ "$AGAIN" = 0 ]; then
# "<this repository>": a clone of this checkout's committed HEAD
git clone -q --bare "$REPO" "$ROOTDIR/srv/attention-transformers.git"
git -C "$ROOTDIR/srv/attention-transformers.git" symbolic-ref HEAD "refs/heads/$(git -C "$REPO" rev-parse --abbrev-ref HEAD)" \
  2>/dev/null || true
echo "Debian $(cat "$ROOTDIR/etc/debian_version"), repository at $(git -C "$REPO" rev-parse --short HEAD)"

log "2. the guide's section 1, word for word"
STEPS=$(awk '/^## 1\./{s=1} /^## 2\./{s=0} s && /^```bash/{b=1; next} s && /^```/{b=0} b' "$REPO/deploy/README.md")
[ -n "$STEPS" ] || { echo "$0: no \`\`\`bash block in section 1 of deploy/README.md" >&2; exit 1; }
printf '%s\n' "$STEPS"
STEPS=${STEPS//<this repository>//srv/attention-transformers.git}
t0=$(date +%s)
in_debian "set -x; $STEPS" 2>&1 | grep -vE "^(Get|Unpacking|Selecting|Preparing|Setting up|Processing)|Reading database|is ignored: it is neither"
in_debian 'cd /opt/attention-transformers; echo "node $(node --version), npm $(npm --version), $(.venv/bin/python --version),"\
" configurable-http-proxy $(deploy/node_modules/.bin/configurable-http-proxy --version), bwrap $(bwrap --version)"'
echo "section 1 took $(( $(date +%s) - t0 )) s"
fi

log "3. the guide's section 2: ./course hub --students 2, a login, Ctrl-C"
in_debian '
apt-get install -y -q curl >/dev/null   # for this check only (the login below)
cd /opt/attention-transformers
port=$(.venv/bin/python -c "import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 0)); print(s.getsockname()[1])")
./course hub --students 2 --port "$port" >/tmp/hub.out 2>&1 &
hub=$!
trap "[ ! -e /proc/$hub ] || { kill -INT $hub; wait $hub; }" EXIT   # a failed check leaves nothing running either
for _ in $(seq 600); do grep -q "^JupyterHub at " /tmp/hub.out && break; kill -0 $hub 2>/dev/null || break; sleep 0.5; done
cat /tmp/hub.out
grep -q "^JupyterHub at http://localhost:$port/" /tmp/hub.out
pw=$(awk "\$1 == \"student\" && \$2 == \"student1\" {print \$3}" /tmp/hub.out)
[ -n "$pw" ]
# the hub on localhost, every user server on a host of its own (USER.localhost): curl is told where they are
base=http://localhost:$port; user=http://student1.localhost:$port; jar=$(mktemp)
curl() { command curl --resolve "localhost:$port:127.0.0.1" --resolve "student1.localhost:$port:127.0.0.1" "$@"; }
xsrf=$(curl -fsS -c "$jar" -b "$jar" "$base/hub/login" | grep -oE "name=\"_xsrf\" value=\"[^\"]+\"" | cut -d\" -f4)
code=$(curl -sS -c "$jar" -b "$jar" -o /dev/null -w "%{http_code} %{redirect_url}" --data-urlencode username=student1 \
       --data-urlencode "password=$pw" --data-urlencode "_xsrf=$xsrf" "$base/hub/login")
echo "POST /hub/login as student1: $code"
case "$code" in 302*) ;; *) echo "login failed"; exit 1 ;; esac
curl -sS -L -c "$jar" -b "$jar" -o /dev/null -w "GET /hub/spawn: %{http_code} %{url_effective}\n" "$base/hub/spawn"
for _ in $(seq 120); do
  got=$(curl -sS -L -c "$jar" -b "$jar" -o /dev/null -w "%{http_code} %{url_effective}" "$user/user/student1/lab" || true)
  case "$got" in "200 $user/user/student1/lab"*) break ;; esac; sleep 1
done
echo "GET /user/student1/lab: $got"
case "$got" in "200 $user/user/student1/lab"*) ;; *) echo "no JupyterLab for student1"; exit 1 ;; esac
pids="$hub $(pgrep -P $hub || true) $(cat /srv/attncourse-hub/state/proxy.pid 2>/dev/null || true) $(pgrep -u student1 || true)"
pids=$(echo $pids)
echo "running: ./course hub, JupyterHub, its proxy, student1 server: pids $pids"
kill -INT $hub
rc=0; wait $hub || rc=$?
tail -1 /tmp/hub.out; echo "./course hub exited $rc after Ctrl-C"
sleep 1
left=$(pgrep -a -u instructor,student1,student2 || true)
for p in $pids; do [ ! -e /proc/$p ] || left+=" $(tr "\0" " " </proc/$p/cmdline)"; done
[ -z "$left" ] || { echo "still running after Ctrl-C:"; echo "$left"; exit 1; }
mount | grep -q "/home/student1 " && { echo "the disk of student1 is still mounted"; exit 1; }
if curl -s -o /dev/null "$base/hub/login"; then echo "port $port still answers"; exit 1; fi
echo "nothing left running, port $port closed"
[ $rc = 0 ]'

if [ "$HUB_TEST" = 1 ]; then
  log "4. tests/test_hub.py in the Debian"
  t0=$(date +%s)
  in_debian 'cd /opt/attention-transformers && .venv/bin/python -m pytest -x -q -rs tests/test_hub.py'
  echo "tests/test_hub.py took $(( $(date +%s) - t0 )) s"
fi
[ "$AGAIN" = 1 ] && log "done (--again: sections 3-4 only)" || log "done: the guide works on a fresh Debian 12"
