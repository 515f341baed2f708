"""Test-only helpers (real nodes over real DDS): not installed with the packages.

The suite's ``conftest.py`` and ``bench/node_set.py`` put this folder's parent on ``sys.path``
(and ``PYTHONPATH``, for the processes a test starts).
"""
