"""A handler whose module takes two seconds to import in a worker's child process (a heavy library,
say), and none in the test's own: what a process-isolated handler's time limit must not count."""

import multiprocessing
import time

if multiprocessing.current_process().name == "leased-child":
    time.sleep(2)  # the import's cost, not a wait of the test's


def quick(n):
    return n + 1
