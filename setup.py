# cffi's setuptools integration needs the cffi_modules keyword, which pyproject.toml cannot carry.
from setuptools import setup

setup(cffi_modules=["build_ffi.py:make_ffibuilder"])
