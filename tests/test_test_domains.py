"""``make test`` runs the suite on pytest-xdist workers side by side: each must talk DDS on a
ROS domain of its own (conftest.py), or one worker's nodes would hear another's, and compute on
one thread, or the workers' thread pools would put more threads than cores to work."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
PROBE = os.path.join(ROOT, 'testing', 'probes', 'worker_probe.py')


def _probe(tmp_path, **env) -> dict:
    """Worker -> set of (ROS domain, torch threads, OMP_NUM_THREADS) its probe tests saw, for
    ``pytest -n 2`` with ``env``."""
    out = tmp_path / 'domains.txt'
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ('PYTEST_XDIST_WORKER', 'DELAN_TEST_DOMAIN_BASE', 'ROS_DOMAIN_ID')
        and not k.endswith('_NUM_THREADS')  # thread pools as a user may have set them
    }
    res = subprocess.run(
        [sys.executable, '-m', 'pytest', '-q', '-n', '2', '-p', 'no:cacheprovider', PROBE],
        cwd=ROOT,
        env={**clean, 'DELAN_DOMAIN_PROBE_OUT': str(out), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    seen: dict = {}
    for line in out.read_text().split('\n'):
        if line:
            worker, domain, threads, omp = line.split()
            seen.setdefault(worker, set()).add((int(domain), int(threads), omp))
    return seen


def test_each_xdist_worker_has_a_domain_of_its_own_and_one_thread(tmp_path):
    seen = _probe(tmp_path)
    assert sorted(seen) == ['gw0', 'gw1'], seen
    ((d0, t0, _),), ((d1, t1, _),) = seen['gw0'], seen['gw1']  # one domain each, for all tests
    assert d1 == d0 + 1 and 1 <= d0 and d1 <= 101, seen
    assert t0 == t1 == 1, seen


def test_a_domain_the_user_fixed_is_the_first_workers(tmp_path):
    seen = _probe(tmp_path, ROS_DOMAIN_ID='42', DELAN_TEST_RANDOM_DOMAIN='0')
    assert {w: {x[0] for x in s} for w, s in seen.items()} == {'gw0': {42}, 'gw1': {43}}, seen


def test_thread_pools_a_user_sized_are_left_as_they_are(tmp_path):
    seen = _probe(tmp_path, OPENBLAS_NUM_THREADS='4')
    assert {w: {x[2] for x in s} for w, s in seen.items()} == {'gw0': {'-'}, 'gw1': {'-'}}, seen
