#!/usr/bin/env bash
# The whole suite (make test) in two passes on one machine: every test not marked `solo` on
# DELAN_TEST_WORKERS pytest-xdist workers side by side (default 2; a test file stays on one
# worker, so its module fixtures are built once), then the `solo` tests one at a time (they
# learn online against the clock or time a control loop: a neighbour's load would change
# what they measure). Each pass must run tests: a pass that selects none (exit 5) fails.
# A first pass stopped by Ctrl-C or by a collection error (pytest exits 2) ends the run there.
# With arguments (make test PYTEST_ARGS=...), one serial pass of exactly those.
set -uo pipefail
cd "$(dirname "$0")/.."
source env.sh
if [ $# -gt 0 ]; then
  exec pytest "$@"
fi
pytest -n "${DELAN_TEST_WORKERS:-2}" --dist loadfile -m 'not solo'
side_by_side=$?
if [ "$side_by_side" -eq 2 ]; then
  echo "make test: tests side by side interrupted (exit 2); the solo tests were not run"
  exit 2
fi
pytest -m solo
solo=$?
echo "make test: tests side by side exit ${side_by_side}, solo tests exit ${solo}"
[ "$side_by_side" -eq 0 ] || exit "$side_by_side"
exit "$solo"
