/* Minimal stand-in for <stdbool.h>. */
#ifndef UR_CFFI_STUB_STDBOOL_H
#define UR_CFFI_STUB_STDBOOL_H
#define bool _Bool
#define true 1
#define false 0
#endif
