"""``make test`` runs the suite on pytest-xdist workers side by side: each must talk DDS on a
ROS domain of its own (conftest.py), or one worker's nodes would hear another's."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
PROBE = os.path.join(ROOT, 'testing', 'probes', 'domain_probe.py')


def _probe(tmp_path, **env) -> dict:
    """Worker -> set of ROS domains its probe tests saw, for ``pytest -n 2`` with ``env``."""
    out = tmp_path / 'domains.txt'
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ('PYTEST_XDIST_WORKER', 'DELAN_TEST_DOMAIN_BASE', 'ROS_DOMAIN_ID')
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
            worker, domain = line.split()
            seen.setdefault(worker, set()).add(int(domain))
    return seen


def test_each_xdist_worker_talks_on_a_domain_of_its_own(tmp_path):
    seen = _probe(tmp_path)
    assert sorted(seen) == ['gw0', 'gw1'], seen
    (d0,), (d1,) = seen['gw0'], seen['gw1']  # one domain per worker, for all its tests
    assert d1 == d0 + 1 and 1 <= d0 and d1 <= 101, seen


def test_a_domain_the_user_fixed_is_the_first_workers(tmp_path):
    seen = _probe(tmp_path, ROS_DOMAIN_ID='42', DELAN_TEST_RANDOM_DOMAIN='0')
    assert seen == {'gw0': {42}, 'gw1': {43}}, seen
