"""Benchmarks of ur_cffi against C, ctypes, dpctl and Triton: ``python -m benchmarks``.

- ``floor``: C loops calling UR directly, compiled at benchmark time (the baseline);
- ``kernel``: the trivial one-work-group Triton kernel every method launches;
- ``methods``: each way of driving UR as a set of timed operations;
- ``harness``: interleaved rounds and their statistics;
- ``startup``: import and demo start-up times in fresh subprocesses;
- ``report``: tables, targets, environment and JSON.
"""
