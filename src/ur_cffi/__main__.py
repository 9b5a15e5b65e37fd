"""``python -m ur_cffi``: list UR adapters, platforms and devices, like ``sycl-ls`` or
``clinfo``."""

from __future__ import annotations

import argparse
import os
import sys

import ur_cffi
from ur_cffi import _checks, _libraries, loader
from ur_cffi.device import _selector_name, devices
from ur_cffi.info import HEADER_FACTS


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f} GiB"


def _variable(name: str) -> str:
    """Environment variable ``name``'s value, printable whatever its bytes (backslash escapes
    for those that are not UTF-8)."""
    return os.environ[name].encode(errors="surrogateescape").decode(errors="backslashreplace")


def _why_no_devices() -> list[str]:
    reasons = []
    if os.environ.get("UR_ADAPTERS_FORCE_LOAD"):
        reasons.append(f"UR_ADAPTERS_FORCE_LOAD={_variable('UR_ADAPTERS_FORCE_LOAD')} is set: "
                       "UR's loader loads the adapters it names, and no others")
    if os.environ.get("ONEAPI_DEVICE_SELECTOR"):
        hint = loader.selector_hint(frozenset(
            _selector_name(platform) for adapter in loader.init()
            for platform in adapter.platforms()))
        reasons.append(f"ONEAPI_DEVICE_SELECTOR={_variable('ONEAPI_DEVICE_SELECTOR')} may "
                       f"filter every device out{f' ({hint})' if hint else ''}")
    if not any(_libraries._first(name) for name in ("libze_loader.so.1", "libze_loader.so")):
        reasons.append("no Level Zero GPU driver (libze_loader) was found: no Intel GPU")
    icd, vendors = os.environ.get("OCL_ICD_FILENAMES"), os.environ.get("OCL_ICD_VENDORS")
    if vendors and not icd:
        reasons.append(f"OCL_ICD_VENDORS={_variable('OCL_ICD_VENDORS')} is set: ur_cffi leaves "
                       "the OpenCL runtimes to it (unset it for the intel-opencl-rt wheel's CPU "
                       "device)")
    elif not icd and not os.path.isdir("/etc/OpenCL/vendors"):
        reasons.append("no OpenCL runtime: pip install intel-opencl-rt for the CPU device")
    elif icd and not all(os.path.exists(p) for p in icd.split(":")):
        reasons.append(f"OCL_ICD_FILENAMES={_variable('OCL_ICD_FILENAMES')} names a file that "
                       "does not exist")
    return reasons


def main(argv=None) -> int:
    """Print what the UR loader finds; exit 1 if it finds no device."""
    argparse.ArgumentParser(
        prog="python -m ur_cffi",
        description="List the UR adapters, platforms and devices ur_cffi finds (as sycl-ls "
                    "does); ONEAPI_DEVICE_SELECTOR filters them. Exits 1 if there is none."
    ).parse_args(argv)
    try:
        status = _list_devices()
        if sys.stdout is not None:  # (None: started with stdout closed)
            sys.stdout.flush()  # here, where a closed pipe is caught
        return status
    except (loader.DeviceSelectorError, _checks.SwitchError) as error:
        print(f"python -m ur_cffi: {error}", file=sys.stderr)
        return 1
    except OSError as error:  # (| head, a full disk): no traceback, nor another at exit's flush
        if not isinstance(error, BrokenPipeError):
            print(f"python -m ur_cffi: writing the listing: {error}", file=sys.stderr)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _list_devices() -> int:
    built_for = HEADER_FACTS.get("loader") or {}
    header = HEADER_FACTS["header"]
    if "pip-build-env-" in header:  # gone once pip built the package
        header = f"the ur_api.h of pip's build environment, with {built_for.get('release')}"
    print(f"ur_cffi: UR API {HEADER_FACTS['version']} (bindings built from {header})")
    print(f"loader:  {_libraries.opened_loader() or 'found by the dynamic linker'} (built for "
          f"{built_for.get('release', 'an unrecorded loader')})")
    print("OpenCL ICDs: " + (_variable("OCL_ICD_FILENAMES") if "OCL_ICD_FILENAMES" in os.environ
                             else "(system default)")
          + (f", OCL_ICD_VENDORS={_variable('OCL_ICD_VENDORS')}"
             if os.environ.get("OCL_ICD_VENDORS") else ""))
    adapters = loader.init()
    if not adapters:
        print("\nNo UR adapter found" + ("." if loader.selector_text() else
              ": the loader found neither Level Zero, OpenCL, CUDA nor HIP."))
        for reason in _why_no_devices():
            print(f"  - {reason}")
        return 1
    found = devices()
    for index, adapter in enumerate(adapters):
        try:
            version = f" (version {adapter.version})"
        except NotImplementedError:  # no UR_ADAPTER_INFO_VERSION before oneAPI 2025.1
            version = ""
        print(f"\nadapter {index}: {adapter.backend.name}{version}")
        platforms = adapter.platforms()
        if not platforms:
            print("  no platforms")
        for platform in platforms:
            print(f"  platform: {platform.name} [{platform.version}]")
            for device in (d for d in found if d.platform.handle == platform.handle):
                print(f"    device: {device.name}")
                print(f"      type {device.type.name}, backend {device.backend.name}, "
                      f"vendor {device.vendor}")
                print(f"      driver {device.driver_version}, global memory "
                      f"{_gib(device.global_mem_size)}, max work-group "
                      f"{device.max_work_group_size}, sub-groups {device.sub_group_sizes}")
    if not found:
        print("\nNo UR device found.")
        for reason in _why_no_devices():
            print(f"  - {reason}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
