"""A correct raw-layer program for UR's validation and leak-checking layers: one USM fill with
an event, waited for and released, everything freed.  A sound layer reports nothing; the one
of oneAPI 2025.0 and 2025.1 (UR 0.10, 0.11) reports the fill's event as a release of a handle
it never saw.

    UR_CFFI_VALIDATION=1 python tests/validation_control.py
"""

import device_under_test
import ur_cffi
from ur_cffi import ffi, lib


def ok(result, name):
    assert result == 0, f"{name} returned {result}"


device = device_under_test.get()
context = ffi.new("ur_context_handle_t *")
ok(lib.urContextCreate(1, ffi.new("ur_device_handle_t[1]", [device.handle]), ffi.NULL, context),
   "urContextCreate")
queue = ffi.new("ur_queue_handle_t *")
ok(lib.urQueueCreate(context[0], device.handle, ffi.NULL, queue), "urQueueCreate")
memory = ffi.new("void **")
ok(lib.urUSMDeviceAlloc(context[0], device.handle, ffi.NULL, ffi.NULL, 64, memory),
   "urUSMDeviceAlloc")
event = ffi.new("ur_event_handle_t *")
ok(lib.urEnqueueUSMFill(queue[0], memory[0], 4, ffi.new("float *", 1.0), 64, 0, ffi.NULL, event),
   "urEnqueueUSMFill")
ok(lib.urEventWait(1, event), "urEventWait")
ok(lib.urEventRelease(event[0]), "urEventRelease")
ok(lib.urQueueFinish(queue[0]), "urQueueFinish")
ok(lib.urUSMFree(context[0], memory[0]), "urUSMFree")
ok(lib.urQueueRelease(queue[0]), "urQueueRelease")
ok(lib.urContextRelease(context[0]), "urContextRelease")
print("control done")
