"""The UR device the tests run on: the CPU device unless ``UR_CFFI_TEST_DEVICE`` names another
device type (``gpu``).  Light on purpose: child processes import it before anything else."""

import os

TYPE = os.environ.get("UR_CFFI_TEST_DEVICE", "cpu")
"""The ``ur_cffi.devices`` name of the device type under test."""

NO_TRITON = ("its kernels come from Triton, and Triton is not installed (triton-xpu has wheels "
             "for Python 3.11 and 3.12)")
"""Why a test that needs Triton's kernels skips where Triton is missing (Python 3.10)."""


def get():
    """The first UR device of type :data:`TYPE`."""
    import ur_cffi

    found = ur_cffi.devices(TYPE)
    if not found:
        raise LookupError(f"UR lists no {TYPE} device (UR_CFFI_TEST_DEVICE={TYPE})")
    return found[0]
