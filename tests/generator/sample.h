/* A small header in UR's style that exercises every construct the generator handles. */
#ifndef SAMPLE_H
#define SAMPLE_H
#include <stddef.h>
#include <stdint.h>

#define SAMPLE_MAX_DIMS 3
#define SAMPLE_FLAGS_MASK 0xfffffff0
#define SAMPLE_TARGET "spir64"
#define SAMPLE_MAKE_VERSION(major, minor) ((major << 16) | (minor & 0x0000ffff))

#ifndef SAMPLE_APIEXPORT
#define SAMPLE_APIEXPORT __attribute__((visibility("default")))
#endif

typedef uint8_t sample_bool_t;
typedef struct sample_handle_t_ *sample_handle_t;

typedef enum sample_result_t {
  /// [::sample_bool_t] success
  SAMPLE_RESULT_SUCCESS = 0,
  /// [deprecated-value] no longer returned
  SAMPLE_RESULT_ERROR_OLD [[deprecated]] = 1,
  SAMPLE_RESULT_ERROR_NEXT,
  SAMPLE_RESULT_VERSION = SAMPLE_MAKE_VERSION(0, 12),
  SAMPLE_RESULT_ERROR_UNKNOWN = 0x7ffffffe,
  SAMPLE_RESULT_FORCE_UINT32 = 0x7fffffff
} sample_result_t;

typedef enum sample_info_t {
  /// [char[]] the name
  SAMPLE_INFO_NAME = 0,
  /// [size_t[]][optional-query] sizes
  SAMPLE_INFO_SIZES = 1,
} sample_info_t;

typedef union sample_value_t {
  const void *pointer;
  uint64_t bits;
} sample_value_t;

typedef struct sample_range_t {
  size_t offset;
  size_t size;
} sample_range_t;

typedef struct sample_desc_t {
  struct {
    sample_range_t ranges[SAMPLE_MAX_DIMS];
    sample_value_t value;
  } inner;
  int32_t count;
} sample_desc_t;

typedef void (*sample_callback_t)(sample_handle_t handle, sample_result_t result, void *user);

SAMPLE_APIEXPORT sample_result_t sampleCreate(const sample_desc_t *pDesc, sample_handle_t *phOut);
SAMPLE_APIEXPORT sample_result_t sampleSetCallback(sample_handle_t h, sample_callback_t cb,
                                                   void *user);
#endif
