"""A program that waits in known functions for a known share of its wall time.

Main thread, per cycle: compute() spins, then it waits in read_pipe() (os.read on a pipe
the helper writes 20 ms later), get_queue() (queue.get, fed 20 ms later), take_lock()
(a lock the helper holds for 15 ms) and nap() (time.sleep 20 ms). Every call is timed
here, so the profile is checked against what the program measured itself. The helper
thread waits in helper_sleep() between its moves. Writes the truth as JSON to argv[2].
"""

import json
import os
import queue
import sys
import threading
import time

STEP_S = 0.02


def compute(sec):
    end = time.perf_counter() + sec
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n


def read_pipe(fd):
    return os.read(fd, 1)


def get_queue(q):
    return q.get()


def take_lock(lock):
    lock.acquire()
    lock.release()


def nap(sec):
    time.sleep(sec)


def helper_sleep(sec):
    time.sleep(sec)


def helper(w, q, lock, asks, held):
    while True:
        what = asks.get()
        if what == "stop":
            return
        if what == "pipe":
            helper_sleep(STEP_S)
            os.write(w, b"x")
        elif what == "queue":
            helper_sleep(STEP_S)
            q.put(1)
        elif what == "lock":
            with lock:
                held.set()
                helper_sleep(0.015)


def main():
    duration = float(sys.argv[1])
    r, w = os.pipe()
    q, lock, asks, held = queue.Queue(), threading.Lock(), queue.SimpleQueue(), threading.Event()
    t = threading.Thread(target=helper, args=(w, q, lock, asks, held), name="helper")
    t.start()
    spent = {"compute": 0.0, "read_pipe": 0.0, "get_queue": 0.0, "take_lock": 0.0, "nap": 0.0}

    def timed(name, fn, *args):
        t0 = time.perf_counter()
        fn(*args)
        spent[name] += time.perf_counter() - t0

    start = time.perf_counter()
    while time.perf_counter() - start < duration:
        timed("compute", compute, 0.03)
        asks.put("pipe")
        timed("read_pipe", read_pipe, r)
        asks.put("queue")
        timed("get_queue", get_queue, q)
        held.clear()
        asks.put("lock")
        held.wait()
        timed("take_lock", take_lock, lock)
        timed("nap", nap, STEP_S)
    wall = time.perf_counter() - start
    asks.put("stop")
    t.join()
    with open(sys.argv[2], "w") as f:
        json.dump(
            {
                "wall_s": wall,
                "spent_s": spent,
                "main_tid": threading.get_native_id(),
                "helper_tid": t.native_id,
            },
            f,
        )


if __name__ == "__main__":
    main()
