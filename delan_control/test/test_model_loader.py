"""LatestLoader: loads off the caller's thread, newest request wins, failures are reported and
the thread lives on."""
from __future__ import annotations

import threading

from delan_control.model_loader import LatestLoader, ModelLoadError


def test_newest_request_wins_and_failures_do_not_stop_the_loader():
    gate, started = threading.Event(), threading.Event()
    loaded, failed, finished = [], [], threading.Event()

    def load(request):
        if request == 'first':
            started.set()
            gate.wait(10.0)              # a slow load; requests pile up meanwhile
        if request == 'corrupt':
            raise ModelLoadError('truncated checkpoint')
        if request == 'bug':
            raise RuntimeError('unexpected')
        return f'model:{request}'

    def done(request, model):
        loaded.append((request, model))
        if request == 'last':
            finished.set()

    loader = LatestLoader(load, done, lambda r, e: failed.append((r, str(e))))
    try:
        loader.submit('first')
        assert started.wait(10.0)
        for request in ('skipped_1', 'skipped_2', 'corrupt'):
            loader.submit(request)
        gate.set()
        # 'corrupt' (the newest while 'first' loaded) fails; the loader goes on
        loader.submit('bug')
        loader.submit('last')
        assert finished.wait(10.0)
    finally:
        loader.close()
    assert loaded[0] == ('first', 'model:first')
    assert ('last', 'model:last') in loaded
    assert not any(r.startswith('skipped') for r, _ in loaded + failed)
    assert all(r in ('corrupt', 'bug') for r, _ in failed)
    assert len(loaded) + len(failed) <= 4


def test_close_stops_an_idle_loader():
    loader = LatestLoader(lambda r: r, lambda r, m: None, lambda r, e: None)
    loader.close(timeout=5.0)
    assert not loader.thread.is_alive()
