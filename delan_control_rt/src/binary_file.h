/* The frame the exported model files share (delan_learning/c_export.py for the DeLaN weights,
 * delan_common/rigid_body_export.py for the rigid-body model): an 8-byte magic, a uint32 format
 * version, the uint32 0x01020304 (byte order), a header of the file's own, the payload, and a
 * uint64 FNV-1a 64 of every byte before it; all little-endian, no padding. */
#ifndef DELAN_CONTROL_RT__BINARY_FILE_H_
#define DELAN_CONTROL_RT__BINARY_FILE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The whole file in a malloc'ed buffer (its size in *size); NULL with the reason in err. */
unsigned char * bin_read_file(const char * path, size_t * size, char * err, size_t err_len);

/* 1 when blob (size bytes) is a file of magic (8 bytes), of a version from 1 to max_version,
 * at least header_bytes + 8 long, with a matching checksum; else 0 with the reason in err
 * (too short, not a <what>, format version, byte order, checksum). */
int bin_check_frame(
  const unsigned char * blob, size_t size, size_t header_bytes, const char * magic,
  uint32_t max_version, const char * what, const char * path, char * err, size_t err_len);

uint32_t bin_u32(const unsigned char * p);

/* a bounded cursor over a file's payload: every read is checked against its end */
typedef struct
{
  const unsigned char * p;
  size_t left;
} bin_cursor_t;

/* the next bytes of c (and c moved past them); NULL when fewer are left */
const unsigned char * bin_take(bin_cursor_t * c, size_t bytes);

/* the next length-prefixed (uint32) UTF-8 string, malloc'ed and terminated; NULL when the file
 * ends first or memory does */
char * bin_take_string(bin_cursor_t * c);

#ifdef __cplusplus
}
#endif
#endif
