# Source me: `source env.sh` gives a shell where the venv, ROS 2 wheels and this workspace import,
# and the suite's CLIs (delan-train, delan-eval, ...) are on PATH.
_delan_root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ ! -f "$_delan_root/install/setup.bash" ]; then
  echo "env.sh: workspace not built; run 'make setup' first" >&2
  return 1 2>/dev/null || exit 1
fi
source "$_delan_root/scripts/venv_env.sh"
_delan_u=$(set +o | grep nounset); set +u
source "$_delan_root/install/setup.bash"
eval "$_delan_u"; unset _delan_u
for _p in delan_learning delan_control; do
  case ":$PATH:" in *":$_delan_root/install/$_p/lib/$_p:"*) ;; *) PATH="$_delan_root/install/$_p/lib/$_p:$PATH";; esac
done
export PATH; unset _p _delan_root
