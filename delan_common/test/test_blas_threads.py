"""Every node computes numpy's BLAS on its calling threads only (``run_node`` limits the pool
before the node is built): OpenBLAS called from two threads of a node while its pool was active
returned wrong results (the learner's intake and estimates beside its training thread). A BLAS
loaded later (scipy's own OpenBLAS, on its first import) starts single-threaded as well."""

import os
import subprocess
import sys

import pytest

PROBE = """
import numpy
from threadpoolctl import threadpool_info
from delan_common.ros.spin import run_node

def factory():
    import scipy.linalg  # its own OpenBLAS, loaded after run_node limited numpy's
    print('blas threads', [i['num_threads'] for i in threadpool_info()
                           if i['user_api'] == 'blas'], flush=True)
    raise ValueError('probe done')

raise SystemExit(run_node(factory, []))
"""


def test_run_node_builds_the_node_with_single_threaded_blas():
    pytest.importorskip('threadpoolctl')
    # a pool of 4 asked for: what a user's environment may hold
    out = subprocess.run(
        [sys.executable, '-c', PROBE],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, 'OPENBLAS_NUM_THREADS': '4'},
    )
    assert out.returncode == 2, out.stderr  # the probe's "could not start"
    assert 'blas threads [1, 1]' in out.stdout, (out.stdout, out.stderr)
