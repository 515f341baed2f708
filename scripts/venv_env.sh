# Variables the PyPI ROS wheels need in a venv (sourced by setup.sh and env.sh).
_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export VIRTUAL_ENV="$_root/.venv"
export PATH="$VIRTUAL_ENV/bin:$PATH"
case ":${AMENT_PREFIX_PATH:-}:" in *":$VIRTUAL_ENV:"*) ;; *) export AMENT_PREFIX_PATH="$VIRTUAL_ENV${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}";; esac
case ":${CMAKE_PREFIX_PATH:-}:" in *":$VIRTUAL_ENV:"*) ;; *) export CMAKE_PREFIX_PATH="$VIRTUAL_ENV${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}";; esac
export RMW_IMPLEMENTATION="${RMW_IMPLEMENTATION:-rmw_fastrtps_cpp}"
unset _root
# Keep discovery on this machine unless the user says otherwise (a real arm's network sets it).
export ROS_AUTOMATIC_DISCOVERY_RANGE="${ROS_AUTOMATIC_DISCOVERY_RANGE:-LOCALHOST}"
