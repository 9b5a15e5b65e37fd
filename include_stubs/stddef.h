/* Minimal stand-in for <stddef.h>: just what ur_api.h needs, in a form pycparser and cffi parse. */
#ifndef UR_CFFI_STUB_STDDEF_H
#define UR_CFFI_STUB_STDDEF_H
typedef unsigned long size_t;
typedef long ptrdiff_t;
#define NULL ((void *)0)
#endif
