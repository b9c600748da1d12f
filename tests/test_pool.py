"""The pool's scheduling pieces: the device lock and concurrent evaluations."""

import threading
import time

from conftest import ADD_RELU, kernel_variant
from runner.judge.locks import RWLock


def test_rwlock_readers_share_writer_excludes_and_is_preferred():
    lock = RWLock()
    log = []
    lock.acquire_read()
    lock.acquire_read()  # two correctness runs at once

    def writer():
        lock.acquire_write()
        log.append("write")
        lock.release_write()

    def late_reader():
        lock.acquire_read()
        log.append("late read")
        lock.release_read()

    w = threading.Thread(target=writer)
    w.start()
    time.sleep(0.1)
    r = threading.Thread(target=late_reader)
    r.start()
    time.sleep(0.1)
    assert log == []  # the writer waits for the readers; the late reader waits for the writer
    lock.release_read()
    lock.release_read()
    w.join(2)
    r.join(2)
    assert log == ["write", "late read"]


def test_rwlock_readers_waiting_for_a_writer_go_before_the_next_writer():
    # Timings queued back to back must not hold every correctness check back until the queue
    # is empty: the readers waiting when a writer lets go have their turn first.
    lock = RWLock()
    log = []
    assert lock.acquire_write()

    def next_writer():
        lock.acquire_write()
        log.append("write 2")
        time.sleep(0.2)
        lock.release_write()

    def reader(i):
        lock.acquire_read()
        log.append(f"read {i}")
        time.sleep(0.1)
        lock.release_read()

    w = threading.Thread(target=next_writer)
    w.start()
    time.sleep(0.1)
    readers = [threading.Thread(target=reader, args=(i,)) for i in range(2)]
    for r in readers:
        r.start()
    time.sleep(0.1)
    assert log == []
    lock.release_write()
    for t in (w, *readers):
        t.join(3)
    assert sorted(log[:2]) == ["read 0", "read 1"] and log[2] == "write 2", log
    # A reader arriving while the next writer waits (its turn over) waits for that writer.
    assert lock.acquire_write()
    log.clear()
    w = threading.Thread(target=next_writer)
    w.start()
    time.sleep(0.1)
    lock.release_write()
    time.sleep(0.05)
    late = threading.Thread(target=reader, args=(9,))
    late.start()
    w.join(3)
    late.join(3)
    assert log == ["write 2", "read 9"], log
    u = lock.usage()
    assert u["write"] > 0.4 and u["read"] > 0.15 and u["wall"] >= u["write"] + u["read"] - 0.01, u


def test_concurrent_evaluations_each_get_their_own_verdict(project, runner):
    project.write("good.py", kernel_variant(block=64))
    project.write("bad.py", kernel_variant(store_mask="mask & (offs < 256)"))
    project.write("cheat.py", "import torch\ndef add_relu(x, y):\n    return torch.relu(x + y)\n")
    reqs = [project.request("ref.py::add_relu", f"{name}.py::add_relu", trials=1)
            for name in ("good", "bad", "cheat", "good", "bad", "cheat")]
    results = runner.evaluate_many(reqs)
    assert [r.status for r in results] == ["ok", "mismatch", "rejected"] * 2
    assert len({r.id for r in results}) == 6


def test_warm_starts_spare_workers_and_they_serve(project):
    from runner.judge.pool import WorkerPool
    pool = WorkerPool(size=2, device="interpreter", spares=3)
    try:
        info = pool.warm(3)
        assert info.backend == "interpreter"
        assert len(pool._spares) == 3 and all(j.alive() for j in pool._spares)
        started = set(pool._jobs)
        pool.warm(3)  # already warm: nothing more is started
        assert set(pool._jobs) == started
        r = project.evaluate(type("R", (), {"evaluate": lambda self, req: pool.evaluate(req)})(),
                             "ref.py::add_relu", cases=[0], trials=1)
        assert r.status == "ok" and r.phases.get("run", 0) > 0 and "import" in r.phases, r.phases
        # The evaluation used two spares: the candidate's is gone, the reference's waits for the
        # next evaluation of the same reference (once it has given back what it held, after the
        # result was returned); spares are topped up again.
        deadline = time.time() + 60
        while (len(pool._spares) < 3 or pool._resting) and time.time() < deadline:
            time.sleep(0.1)
        assert len(pool._spares) == 3 and len(pool._refs) == 1
        assert len(started & set(pool._jobs)) == 2  # one spare left + the reference kept
    finally:
        pool.close()


def test_the_next_evaluation_of_a_reference_waits_for_its_worker_to_rest(project):
    """The reference worker gives back its memory after the result is returned; an evaluation
    of the same reference that comes at once waits for that rather than loading a new one."""
    from runner.judge.pool import WorkerPool
    pool = WorkerPool(size=1, device="interpreter", spares=1)
    ev = type("R", (), {"evaluate": lambda self, req: pool.evaluate(req)})()
    try:
        pool.warm(1)
        for _ in range(2):
            r = project.evaluate(ev, "ref.py::add_relu", cases=[0], trials=1)
            assert r.status == "ok" and r.correct, r.message
        deadline = time.time() + 30
        while pool._resting and time.time() < deadline:
            time.sleep(0.05)
        assert not pool._resting and [len(v) for v in pool._refs.values()] == [1]
        assert next(iter(pool._refs.values()))[0].uses == 2
    finally:
        pool.close()


def test_evaluations_of_one_reference_side_by_side_each_keep_a_loaded_reference(project):
    """A tuner's batch: evaluations of one reference, as many at once as the pool has slots.
    Each keeps its reference worker for the next, so the reference is loaded once per slot,
    not once per evaluation."""
    import concurrent.futures
    from runner.judge.pool import WorkerPool
    pool = WorkerPool(size=2, device="interpreter", spares=2)
    ev = type("R", (), {"evaluate": lambda self, req: pool.evaluate(req)})()
    try:
        pool.warm(2)
        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            results = list(ex.map(lambda _: project.evaluate(ev, "ref.py::add_relu", cases=[0], trials=1), range(6)))
        assert all(r.status == "ok" and r.correct for r in results), [r.message for r in results]
        deadline = time.time() + 30
        while pool._resting and time.time() < deadline:
            time.sleep(0.05)
        kept = [j for jobs in pool._refs.values() for j in jobs]
        assert len(kept) == 2 and sum(j.uses for j in kept) == 6, [j.uses for j in kept]
    finally:
        pool.close()


def test_the_device_lock_gives_up_at_the_time_asked():
    lock = RWLock()
    assert lock.acquire_write()
    t0 = time.monotonic()
    assert not lock.acquire_read(time.monotonic() + 0.2) and not lock.acquire_write(time.monotonic() + 0.2)
    assert 0.35 < time.monotonic() - t0 < 3
    lock.release_write()
    # A writer that gave up holds no reader back.
    assert lock.acquire_read()
    assert not lock.acquire_write(time.monotonic() + 0.1)
    got = []
    th = threading.Thread(target=lambda: got.append(lock.acquire_read(time.monotonic() + 1)))
    th.start()
    th.join(2)
    assert got == [True]
    lock.release_read()
    lock.release_read()
    assert lock.acquire_write(time.monotonic() + 1)
    lock.release_write()


def test_an_evaluation_that_waits_past_its_limit_for_a_slot_ends_as_a_timeout(project):
    """Evaluations wait for a free worker slot at most ``limits.wait_s`` (a task's budget lowers
    it): past it the result is a timeout that says why, and the slot's evaluation is unharmed."""
    import concurrent.futures
    from runner.judge.pool import WorkerPool
    from runner.schema import Limits
    project.write("slow.py", ADD_RELU.replace("    out = torch.empty_like(x)\n",
                                              "    import time\n    time.sleep(4)\n    out = torch.empty_like(x)\n"))
    pool = WorkerPool(size=1, device="interpreter", spares=2)
    ev = type("R", (), {"evaluate": lambda self, req: pool.evaluate(req)})()
    try:
        pool.warm(2)
        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            slow = ex.submit(project.evaluate, ev, "ref.py::add_relu", "slow.py::add_relu", cases=[0], trials=1)
            # Until the slow evaluation holds the only slot (building its request may take a
            # while on a loaded machine), then a little into its 4 s.
            deadline = time.monotonic() + 60
            while pool._slots._value > 0 and time.monotonic() < deadline and not slow.done():
                time.sleep(0.02)
            assert pool._slots._value == 0, "the slow evaluation never took the slot"
            time.sleep(0.3)
            t0 = time.monotonic()
            waited = project.evaluate(ev, "ref.py::add_relu", cases=[0], trials=1, limits=Limits(wait_s=1.0))
            took = time.monotonic() - t0
            slow = slow.result()
        assert waited.status == "timeout" and not waited.correct and "free worker slot" in waited.message, waited.message
        assert took < 3, took
        assert slow.status == "ok" and slow.correct, slow.message
    finally:
        pool.close()


def test_an_evaluation_ends_at_its_limit_in_all_whatever_the_phases_allow(project, runner):
    """``limits.total_s`` bounds the whole evaluation, however long each phase may run: a task's
    budget lowers it to the time left, so an evaluation sent near the end ends there. The result
    says which limit ended it."""
    from runner.schema import Limits
    project.write("slow.py", ADD_RELU.replace("    out = torch.empty_like(x)\n",
                                              "    import time\n    time.sleep(1.5)\n    out = torch.empty_like(x)\n"))
    assert project.evaluate(runner, "ref.py::add_relu", trials=1).correct  # workers started
    t0 = time.monotonic()
    r = project.evaluate(runner, "ref.py::add_relu", "slow.py::add_relu", trials=3,
                         limits=Limits(run_s=60.0, total_s=3.0))
    took = time.monotonic() - t0
    assert r.status == "timeout" and not r.correct and "limits.total_s" in r.message, r.message
    assert took < 3.0 + 2.0, (took, r.duration_s, r.phases)  # the limit, and the killed worker's teardown


def test_the_fork_server_runs_the_runner_the_pool_came_from():
    # The folder put first on the fork server's path holds this very runner package (it held
    # runner/ itself once the pool moved into runner/judge/, so workers imported whichever runner
    # the environment had: another checkout's, with a copy of the code run by path).
    from pathlib import Path
    from runner.judge import pool
    assert (Path(pool._PACKAGE_PARENT) / "runner" / "judge" / "pool.py").resolve() == Path(pool.__file__).resolve()


def test_a_fresh_workers_warm_up_waits_for_a_timing_and_is_not_counted_as_an_evaluations(project):
    """A fresh worker's warm-up (``WorkerPool._warm``) runs kernels on the GPU, so each part holds the
    device lock for reading, as any op that runs kernels does: while a timing holds the lock alone
    the warm-up waits, and it goes on once the timing lets go. What it cost (its wait, its op) is
    the spare's, not the next evaluation's. The worker here is a CPU one that the pool takes for a
    GPU worker, so the lock is taken as on a GPU; the worker answers the part with nothing to do."""
    import dataclasses
    from runner.judge.pool import WorkerPool
    pool = WorkerPool(size=1, device="interpreter", spares=0)
    try:
        job = pool._spawn()
        assert job.alive() and job.op_s == {} and job.wait_s == 0.0  # a CPU worker: no warm-up, nothing counted
        job.device = dataclasses.replace(job.device, backend="cuda")
        assert job.device.is_gpu
        done = threading.Event()
        assert pool.device_lock.acquire_write()  # a timing holds the GPU alone
        t = threading.Thread(target=lambda: (pool._warm(job), done.set()), daemon=True)
        t.start()
        assert not done.wait(0.5), "the warm-up ran while a timing held the GPU alone"
        pool.device_lock.release_write()
        assert done.wait(10)
        assert job.wait_s == 0.0 and job.held_s == {"read": 0.0, "write": 0.0} and job.op_s == {}
        assert pool.device_lock.acquire_write(time.monotonic() + 1)  # the warm-up gave the lock back
        pool.device_lock.release_write()
    finally:
        pool.close()
