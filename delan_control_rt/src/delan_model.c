/* Reader of the exported DeLaN weights (layout: delan_learning/c_export.py) and the kernel. */
#include "delan_model.h"

#include "binary_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the kernel source delan_learning/delan_kernel.c, copied at build time (CMakeLists.txt):
 * defines delan_t and delan_inverse() */
#include "delan_kernel.inc"

#define HEADER_BYTES 96
/* the role field (c_export.ROLES) after the header, from format version 3 */
#define ROLE_SINCE 3
#define ROLES 2
static const char * const role_kinds[ROLES] = {"delan", "delan_residual"};
/* friction coefficient rows by law (delan_learning/friction.py COEFFICIENTS) and the first
 * format version that has the law */
#define FRICTION_LAWS 3
static const int friction_rows[FRICTION_LAWS] = {2, 2, 5};
static const uint32_t friction_since[FRICTION_LAWS] = {1, 1, 2};

struct delan_model
{
  delan_t k;
  int64_t version;
  int role;              /* index into role_kinds */
  char ** names;
  unsigned char * blob;  /* the file */
  double * arrays;       /* its arrays, aligned copies the kernel points into */
};

#define FAIL(...) do {snprintf(err, err_len, __VA_ARGS__); goto fail;} while (0)

delan_model * delan_model_load(const char * path, char * err, size_t err_len)
{
  size_t size = 0;
  unsigned char * blob = bin_read_file(path, &size, err, err_len);
  if (!blob) {return NULL;}
  delan_model * M = calloc(1, sizeof(*M));
  if (!M) {
    free(blob);
    snprintf(err, err_len, "out of memory");
    return NULL;
  }
  M->blob = blob;
  if (!bin_check_frame(blob, size, HEADER_BYTES, "DELANCW\0", DELAN_RT_FORMAT_VERSION,
    "DeLaN weights file", path, err, err_len))
  {
    goto fail;
  }

  int32_t d[10];
  memcpy(d, blob + 16, sizeof(d));
  delan_t * k = &M->k;
  k->n = d[0]; k->m = d[1]; k->n_ang = d[2]; k->K = d[3]; k->W = d[4]; k->depth = d[5];
  k->P = d[6]; k->n_l = d[7]; k->act = d[8]; k->friction = d[9];
  memcpy(&k->v_scale, blob + 56, 8);
  memcpy(&k->eps, blob + 64, 8);
  memcpy(&k->diag_offset, blob + 72, 8);
  memcpy(&k->inv_smooth, blob + 80, 8);
  memcpy(&M->version, blob + 88, 8);
  const int n = k->n, K = k->K, W = k->W, D = k->depth, P = k->P, nl = k->n_l, m = k->m;
  if (n < 1 || n > 64 || K < 1 || K > 2 || W < 1 || W > 4096 || D < 1 || D > 16 ||
    nl != n * (n + 1) / 2 || P != nl + 1 || m < n || m > 2 * n || k->n_ang < 0 ||
    k->n_ang > n || (k->act != 0 && k->act != 1))
  {
    FAIL("%s: inconsistent dimensions (n %d, m %d, K %d, W %d, depth %d, P %d)",
      path, n, m, K, W, D, P);
  }
  const uint32_t version = bin_u32(blob + 8);
  if (k->friction < 0 || k->friction >= FRICTION_LAWS || friction_since[k->friction] > version) {
    FAIL("%s: unknown friction law %d for format version %u", path, k->friction,
      (unsigned)version);
  }
  size_t header = HEADER_BYTES;
  if (version >= ROLE_SINCE) {
    header += 4;
    if (size < header + 8) {
      FAIL("%s: %zu bytes, too short for a DeLaN weights file", path, size);
    }
    int32_t role;
    memcpy(&role, blob + HEADER_BYTES, 4);
    if (role < 0 || role >= ROLES) {FAIL("%s: unknown model role %d", path, role);}
    M->role = role;
  }
  bin_cursor_t c = {blob + header, size - 8 - header};
  M->names = calloc((size_t)n, sizeof(char *));
  if (!M->names) {FAIL("out of memory");}
  for (int i = 0; i < n; i++) {
    if (!(M->names[i] = bin_take_string(&c))) {FAIL("%s: truncated joint names", path);}
  }
  /* the arrays follow the names, so they sit at any byte offset: copied, each on a double */
  const int ** ints[4] = {&k->feat, &k->is_ang, &k->rows, &k->cols};
  const size_t int_sizes[4] = {(size_t)n, (size_t)n, (size_t)nl, (size_t)nl};
  const double ** dbl[7] = {&k->w_in, &k->w_hid, &k->bias, &k->head, &k->head_b,
    &k->friction_coef, &k->root};
  const size_t dbl_sizes[7] = {(size_t)K * m * W, (size_t)(D > 1 ? D - 1 : 1) * K * W * W,
    (size_t)D * K * W, (size_t)K * W * P, (size_t)P, (size_t)friction_rows[k->friction] * n,
    (size_t)nl};
  size_t total = 0, need = 0;
  for (int i = 0; i < 4; i++) {
    total += (int_sizes[i] + 1) / 2;
    need += int_sizes[i] * 4;
  }
  for (int i = 0; i < 7; i++) {
    total += dbl_sizes[i];
    need += dbl_sizes[i] * 8;
  }
  if (need > c.left) {FAIL("%s: truncated (%zu bytes of arrays missing)", path, need - c.left);}
  if (!(M->arrays = malloc(total * 8))) {FAIL("out of memory");}
  double * dst = M->arrays;
  for (int i = 0; i < 4; i++) {
    memcpy(dst, bin_take(&c, int_sizes[i] * 4), int_sizes[i] * 4);
    *ints[i] = (const int *)dst;
    dst += (int_sizes[i] + 1) / 2;
  }
  for (int i = 0; i < 7; i++) {
    const unsigned char * src = bin_take(&c, dbl_sizes[i] * 8);
    if (!src) {FAIL("%s: truncated", path);}
    memcpy(dst, src, dbl_sizes[i] * 8);
    *dbl[i] = dst;
    dst += dbl_sizes[i];
  }
  if (c.left != 0) {FAIL("%s: %zu bytes more than its dimensions give", path, c.left);}
  for (int i = 0; i < n; i++) {
    if (k->feat[i] < 0 || k->feat[i] + (k->is_ang[i] ? k->n_ang : 0) >= m) {
      FAIL("%s: feature index out of range", path);
    }
  }
  for (int e = 0; e < nl; e++) {
    if (k->rows[e] < 0 || k->rows[e] >= n || k->cols[e] < 0 || k->cols[e] > k->rows[e]) {
      FAIL("%s: L layout out of range", path);
    }
  }
  /* non-negative coefficients (dissipative friction) and a Stribeck velocity to divide by */
  const int rows = friction_rows[k->friction];
  for (int e = 0; e < rows * n; e++) {
    double v = k->friction_coef[e];
    if (!(v >= 0.0) || (k->friction == 2 && e >= 4 * n && !(v > 0.0))) {
      FAIL("%s: friction coefficient %d out of range", path, e);
    }
  }
  free(M->blob);
  M->blob = NULL;
  return M;
fail:
  delan_model_free(M);
  return NULL;
}

void delan_model_free(delan_model * M)
{
  if (!M) {return;}
  if (M->names) {
    for (int i = 0; i < M->k.n; i++) {free(M->names[i]);}
    free(M->names);
  }
  free(M->arrays);
  free(M->blob);
  free(M);
}

int delan_model_dof(const delan_model * M) {return M->k.n;}
const char * delan_model_joint_name(const delan_model * M, int i) {return M->names[i];}
int64_t delan_model_version(const delan_model * M) {return M->version;}
const char * delan_model_kind(const delan_model * M) {return role_kinds[M->role];}

int delan_model_inverse(
  const delan_model * M, const double * q, const double * qd, const double * qdd, double * tau)
{
  return delan_inverse(&M->k, q, qd, qdd, tau);
}
