/* Minimal stand-in for <stdint.h>: the fixed-width integer names as opaque typedefs that cffi knows. */
#ifndef UR_CFFI_STUB_STDINT_H
#define UR_CFFI_STUB_STDINT_H
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long uint64_t;
typedef long intptr_t;
typedef unsigned long uintptr_t;
#endif
