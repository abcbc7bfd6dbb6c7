"""Per-test deadlines sized to the cold case, where a module's fixtures fill the test cache.

pytest-timeout's 1,800 s (pyproject) counts a module fixture's set-up inside the first test that
asks for it. On a machine whose test cache is empty, the cross road's fixtures download and
unpack their wheels (10 GB of x86_64 and aarch64 torch) and compile the real units for the first
time: the cross subset's took 2,491 s on a loaded 2-core host, over that deadline, while a warm
run takes minutes. These modules get about twice the measured cold case instead, so a new
machine's first ``make test`` passes from nothing; a hang still ends.
"""

COLD_FIXTURE_TIMEOUT_S = 5400
