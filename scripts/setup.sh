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
# Fast DDS's export names the wheel builder's tinyxml2; the wheel ships its own copy (for rclc)
libs = glob.glob(f"{venv}/lib/python3*/site-packages/ros_fastdds.libs/libtinyxml2-*.so*")
targets = f"{venv}/share/fastdds/cmake/fastdds-shared-targets.cmake"
if libs and glob.glob(targets):
    text = open(targets, encoding="utf-8").read()
    if "/usr/lib64/libtinyxml2.so" in text:
        open(targets, "w", encoding="utf-8").write(text.replace("/usr/lib64/libtinyxml2.so", libs[0]))
        n += 1
print(f"[setup] fixed {n} CMake files")
PY
  touch "$VENV/.cmake-fixed"
fi

# 3. ROS 2's pure-Python tools (launch, launch_ros, the ros2 CLI, rosidl_runtime_py) are not on
#    PyPI: wheels from ../shared/ros2_python where it exists, else their upstream tags. --no-deps:
#    their dependencies are in requirements.txt, some under the ros-* wheels' names pip does not
#    know them by (ament_index_python, rclpy). launch_testing and launch_pytest stay out: their
#    pytest plugin breaks pytest 9.
ROS2_PY=$ROOT/../shared/ros2_python
if [ -d "$ROS2_PY/wheels" ]; then
  tools=("$ROS2_PY"/wheels/*.whl)
  tools_hash=$(cat "${tools[@]}" | sha256sum | cut -d' ' -f1)
else
  gh=https://github.com/ros2
  tools=()
  for p in launch launch_xml launch_yaml; do tools+=("git+$gh/launch@3.7.1#subdirectory=$p"); done
  for p in launch_ros ros2launch; do tools+=("git+$gh/launch_ros@0.28.0#subdirectory=$p"); done
  for p in ros2cli ros2action ros2interface ros2lifecycle ros2node ros2param ros2pkg ros2run \
           ros2service ros2topic; do
    tools+=("git+$gh/ros2cli@0.36.1#subdirectory=$p")
  done
  tools+=("git+$gh/rosidl_runtime_py@0.14.0")
  tools_hash=$(printf '%s\n' "${tools[@]}" | sha256sum | cut -d' ' -f1)
fi
if [ "$(cat "$VENV/.ros2-python.sha256" 2>/dev/null)" != "$tools_hash" ]; then
  log "installing launch, launch_ros and the ros2 CLI"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps "${tools[@]}"
  echo "$tools_hash" > "$VENV/.ros2-python.sha256"
else
  log "ros2 CLI up to date"
fi

# 4. launch_ros imports composition_interfaces, an interface package that no wheel carries: it is
#    built with the workspace, from ../shared/ros2_python/src or from rcl_interfaces' tag.
if [ -d "$ROS2_PY/src/composition_interfaces" ]; then
  extra_src=$ROS2_PY/src
else
  extra_src=$ROOT/.ros2_src  # a dot folder: colcon's crawl of . skips it
  if [ ! -f "$extra_src/composition_interfaces/package.xml" ]; then
    log "fetching composition_interfaces (rcl_interfaces 2.2.0)"
    tmp=$(mktemp -d)
    git clone -q --depth 1 --branch 2.2.0 https://github.com/ros2/rcl_interfaces "$tmp"
    mkdir -p "$extra_src"
    cp -r "$tmp/composition_interfaces" "$extra_src/"
    rm -rf "$tmp"
  fi
fi

# 5. colcon build (colcon itself skips up-to-date packages only partly, so guard on sources)
src_hash=$(find delan_msgs delan_common delan_learning delan_control delan_bringup "$extra_src/composition_interfaces" \
             -type f \( -name '*.msg' -o -name '*.srv' -o -name 'CMakeLists.txt' \
                -o -name 'package.xml' -o -name 'setup.py' -o -name 'setup.cfg' \
                -o -path '*/config/*' -o -path '*/resource/*' -o -path '*/launch/*' \
                -o -path '*/urdf/*' \) -print0 \
           | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
if [ "$(cat install/.sources.sha256 2>/dev/null)" != "$src_hash" ] || [ ! -f install/setup.bash ]; then
  log "colcon build --symlink-install"
  # shellcheck disable=SC1091
  source scripts/venv_env.sh
  rm -rf build install log
  colcon build --symlink-install --base-paths . "$extra_src" --event-handlers console_direct- \
     --packages-skip delan_control_rt \
     --cmake-args -DBUILD_TESTING=OFF -DPython3_EXECUTABLE="$VENV/bin/python" \
     2>&1 | tail -n 20
  echo "$src_hash" > install/.sources.sha256
else
  log "workspace build up to date"
fi
# 6. The compiled controller (delan_control_rt) and rclc under it: optional. A failure warns and
#    leaves the Python suite as it is (the launch argument controller_impl:=rt and its tests
#    then say it is not built). rclc from ../shared/ros2_c/src, else its upstream tag.
RCLC_SRC=$ROOT/../shared/ros2_c/src
if [ ! -f "$RCLC_SRC/rclc/package.xml" ]; then
  RCLC_SRC=$ROOT/.ros2_c_src
  if [ ! -f "$RCLC_SRC/rclc/package.xml" ]; then
    log "fetching rclc (6.1.0)"
    tmp=$(mktemp -d)
    if git clone -q --depth 1 --branch 6.1.0 https://github.com/ros2/rclc "$tmp"; then
      mkdir -p "$RCLC_SRC" && cp -r "$tmp/rclc" "$RCLC_SRC/"
    fi
    rm -rf "$tmp"
  fi
fi
rt_hash=$( (echo "$src_hash"; \
            find delan_control_rt "$RCLC_SRC/rclc" -type f -print0 2>/dev/null | sort -z | xargs -0 sha256sum; \
            sha256sum delan_learning/delan_learning/fastpath.py) | sha256sum | cut -d' ' -f1)
if [ "$(cat install/.rt.sha256 2>/dev/null)" != "$rt_hash" ]; then
  log "building the compiled controller (rclc + delan_control_rt)"
  # shellcheck disable=SC1091
  source scripts/venv_env.sh
  mkdir -p log
  if ( set +u; source install/setup.bash; \
       colcon build --symlink-install --base-paths . "$RCLC_SRC" \
         --packages-select rclc delan_control_rt --event-handlers console_direct- \
         --cmake-args -DBUILD_TESTING=OFF -DPython3_EXECUTABLE="$VENV/bin/python" ) \
       > log/rt_build.log 2>&1; then
    echo "$rt_hash" > install/.rt.sha256
  else
    log "WARNING: the compiled controller did not build (see log/rt_build.log): the suite works"
    log "WARNING: without it, controller_impl:=rt and the delan_control_rt tests are unavailable"
  fi
else
  log "compiled controller up to date"
fi
log "done: source env.sh for a shell with everything on the path"
