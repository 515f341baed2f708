"""Suite-wide pytest set-up: every pytest run talks DDS on its own ROS domain over loopback, so
parallel runs (developers, CI, the workers of one ``pytest -n``) never hear each other's
nodes."""

import os
import random
import sys

#: test-only helpers (``delan_testing``) live outside the installed packages
TESTING = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'testing')
if TESTING not in sys.path:
    sys.path.insert(0, TESTING)
    os.environ['PYTHONPATH'] = os.pathsep.join(
        p for p in (TESTING, os.environ.get('PYTHONPATH')) if p
    )

#: pytest-xdist workers (``make test`` runs two) take consecutive domains from one drawn base
MAX_WORKERS = 8

_worker = os.environ.get('PYTEST_XDIST_WORKER', '')  # 'gw0', 'gw1', ... in a worker
if _worker.startswith('gw') and 'DELAN_TEST_DOMAIN_BASE' in os.environ:
    # the base was set by the controlling pytest, whose environment the workers inherit
    _index = int(_worker[2:]) % MAX_WORKERS
    os.environ['ROS_DOMAIN_ID'] = str(int(os.environ['DELAN_TEST_DOMAIN_BASE']) + _index)
else:
    if 'ROS_DOMAIN_ID' not in os.environ or os.environ.get('DELAN_TEST_RANDOM_DOMAIN', '1') == '1':
        # domains 1..101 are safe on Linux (participant ports); room is left for the workers
        os.environ['ROS_DOMAIN_ID'] = str(random.SystemRandom().randint(1, 101 - MAX_WORKERS))
    os.environ['DELAN_TEST_DOMAIN_BASE'] = os.environ['ROS_DOMAIN_ID']
os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')

#: thread pools a process sizes to the machine's cores at start-up (torch's OpenMP, BLAS)
POOL_VARIABLES = ('OMP_NUM_THREADS', 'MKL_NUM_THREADS', 'OPENBLAS_NUM_THREADS')
if int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1')) > 1 and not any(
    v in os.environ for v in POOL_VARIABLES
):
    # workers side by side already share the cores: one pool per worker (and per process it
    # starts, which inherits this) sized to every core would put more threads than cores to
    # work on each torch op. Set before any test module imports torch; pools a user sized stay.
    for _variable in POOL_VARIABLES:
        os.environ[_variable] = '1'
