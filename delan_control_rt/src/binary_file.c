/* The exported files' common frame (binary_file.h). */
#include "binary_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 64-bit FNV-1a: delan_learning.c_export.fnv1a64 */
static uint64_t fnv1a64(const unsigned char * p, size_t n)
{
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; i++) {h = (h ^ p[i]) * 0x100000001b3ULL;}
  return h;
}

uint32_t bin_u32(const unsigned char * p)
{
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

unsigned char * bin_read_file(const char * path, size_t * size, char * err, size_t err_len)
{
  FILE * f = fopen(path, "rb");
  if (!f) {
    snprintf(err, err_len, "cannot open %s", path);
    return NULL;
  }
  unsigned char * buf = NULL;
  long n = -1;
  if (fseek(f, 0, SEEK_END) == 0) {n = ftell(f);}
  if (n >= 0 && fseek(f, 0, SEEK_SET) == 0) {
    buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
      free(buf);
      buf = NULL;
    }
  }
  fclose(f);
  if (!buf) {snprintf(err, err_len, "cannot read %s", path);}
  *size = (size_t)n;
  return buf;
}

int bin_check_frame(
  const unsigned char * blob, size_t size, size_t header_bytes, const char * magic,
  uint32_t max_version, const char * what, const char * path, char * err, size_t err_len)
{
  if (size < header_bytes + 8) {
    snprintf(err, err_len, "%s: %zu bytes, too short for a %s", path, size, what);
    return 0;
  }
  if (memcmp(blob, magic, 8) != 0) {
    snprintf(err, err_len, "%s is not a %s", path, what);
    return 0;
  }
  uint32_t version = bin_u32(blob + 8);
  if (version > max_version || version == 0) {
    snprintf(err, err_len, "%s has format version %u; this reader knows up to %u", path, version,
      max_version);
    return 0;
  }
  if (bin_u32(blob + 12) != 0x01020304u) {
    snprintf(err, err_len, "%s: byte order mark wrong", path);
    return 0;
  }
  uint64_t stored;
  memcpy(&stored, blob + size - 8, 8);
  if (fnv1a64(blob, size - 8) != stored) {
    snprintf(err, err_len, "%s: checksum mismatch (truncated or corrupt)", path);
    return 0;
  }
  return 1;
}

const unsigned char * bin_take(bin_cursor_t * c, size_t bytes)
{
  if (bytes > c->left) {return NULL;}
  const unsigned char * out = c->p;
  c->p += bytes;
  c->left -= bytes;
  return out;
}

char * bin_take_string(bin_cursor_t * c)
{
  const unsigned char * len = bin_take(c, 4);
  const unsigned char * s = len ? bin_take(c, bin_u32(len)) : NULL;
  return s ? strndup((const char *)s, bin_u32(len)) : NULL;
}
