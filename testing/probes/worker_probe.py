"""Run by tests/test_test_domains.py under ``pytest -n``: each test writes the worker it ran on,
that worker's ROS domain, the threads torch computes on and ``OMP_NUM_THREADS`` (``-``: not set)
to ``DELAN_DOMAIN_PROBE_OUT``. Not a
test of the suite (not named ``test_*.py``)."""

import os
import time

import pytest
import torch


@pytest.mark.parametrize('k', range(8))
def test_probe(k):
    time.sleep(0.1)
    with open(os.environ['DELAN_DOMAIN_PROBE_OUT'], 'a') as f:
        f.write(
            f'{os.environ.get("PYTEST_XDIST_WORKER", "")} {os.environ["ROS_DOMAIN_ID"]} '
            f'{torch.get_num_threads()} {os.environ.get("OMP_NUM_THREADS", "-")}\n'
        )
