/* See reference.h. The arithmetic is delan_control.trajectories' term for term, so both
 * controllers command the same reference. */
#include "reference.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void reference_free(reference_t * r)
{
  if (!r) {return;}
  free(r->t);
  free(r->q);
  free(r->qd);
  free(r->qdd);
  free(r);
}

reference_t * reference_create(
  int n, int points, const double * t, const double * q, const double * qd,
  const double * qdd, char * err, int err_len)
{
  if (n < 1 || points < 1) {
    snprintf(err, err_len, "%d points of %d joints", points, n);
    return NULL;
  }
  for (int k = 0; k < points; k++) {
    if (!isfinite(t[k])) {
      snprintf(err, err_len, "non-finite waypoint time");
      return NULL;
    }
    if (k && !(t[k] > t[k - 1])) {
      snprintf(err, err_len, "waypoint times must increase strictly");
      return NULL;
    }
  }
  size_t rows = (size_t)points * n;
  for (size_t i = 0; i < rows; i++) {
    if (!isfinite(q[i]) || (qd && !isfinite(qd[i])) || (qdd && !isfinite(qdd[i]))) {
      snprintf(err, err_len, "non-finite waypoint");
      return NULL;
    }
  }
  reference_t * r = calloc(1, sizeof(reference_t));
  if (!r) {
    snprintf(err, err_len, "out of memory");
    return NULL;
  }
  r->n = n;
  r->points = points;
  r->t = malloc(sizeof(double) * points);
  r->q = malloc(sizeof(double) * rows);
  r->qd = calloc(rows, sizeof(double));
  r->qdd = calloc(rows, sizeof(double));
  if (!r->t || !r->q || !r->qd || !r->qdd) {
    reference_free(r);
    snprintf(err, err_len, "out of memory");
    return NULL;
  }
  memcpy(r->t, t, sizeof(double) * points);
  memcpy(r->q, q, sizeof(double) * rows);
  if (qd) {memcpy(r->qd, qd, sizeof(double) * rows);}
  if (qdd) {memcpy(r->qdd, qdd, sizeof(double) * rows);}
  return r;
}

double reference_end_time(const reference_t * r)
{
  return r->t[r->points - 1];
}

void reference_sample(const reference_t * r, double t, double * q, double * qd, double * qdd)
{
  const int n = r->n, last = r->points - 1;
  if (t >= r->t[last] || t < r->t[0]) {
    memcpy(q, r->q + (size_t)(t >= r->t[last] ? last : 0) * n, sizeof(double) * n);
    memset(qd, 0, sizeof(double) * n);
    memset(qdd, 0, sizeof(double) * n);
    return;
  }
  /* the segment [t_i, t_i+1) holding t (binary search: the last t_i <= t) */
  int lo = 0, hi = last;
  while (hi - lo > 1) {
    int mid = (lo + hi) / 2;
    if (r->t[mid] <= t) {lo = mid;} else {hi = mid;}
  }
  const int i = lo;
  const double h = r->t[i + 1] - r->t[i];
  const double s = (t - r->t[i]) / h;
  const double s2 = s * s, s3 = s2 * s, s4 = s3 * s, s5 = s4 * s;
  const double * q0 = r->q + (size_t)i * n, * q1 = q0 + n;
  const double * v0 = r->qd + (size_t)i * n, * v1 = v0 + n;
  const double * a0 = r->qdd + (size_t)i * n, * a1 = a0 + n;
  for (int j = 0; j < n; j++) {
    const double dq = q1[j] - q0[j];
    const double V0 = v0[j] * h, V1 = v1[j] * h, A0 = a0[j] * h * h, A1 = a1[j] * h * h;
    q[j] = q0[j] + (s - 6 * s3 + 8 * s4 - 3 * s5) * V0 +
      (0.5 * s2 - 1.5 * s3 + 1.5 * s4 - 0.5 * s5) * A0 + (10 * s3 - 15 * s4 + 6 * s5) * dq +
      (-4 * s3 + 7 * s4 - 3 * s5) * V1 + (0.5 * s3 - s4 + 0.5 * s5) * A1;
    qd[j] = ((-30 * s2 + 60 * s3 - 30 * s4) * -dq + (1 - 18 * s2 + 32 * s3 - 15 * s4) * V0 +
      (s - 4.5 * s2 + 6 * s3 - 2.5 * s4) * A0 + (-12 * s2 + 28 * s3 - 15 * s4) * V1 +
      (1.5 * s2 - 4 * s3 + 2.5 * s4) * A1) / h;
    qdd[j] = ((-60 * s + 180 * s2 - 120 * s3) * -dq + (-36 * s + 96 * s2 - 60 * s3) * V0 +
      (1 - 9 * s + 18 * s2 - 10 * s3) * A0 + (-24 * s + 84 * s2 - 60 * s3) * V1 +
      (3 * s - 12 * s2 + 10 * s3) * A1) / (h * h);
  }
}

reference_t * reference_rejoin(
  int n, double t0, const double * dq, const double * dqd, const double * dqdd,
  const double * velocity_limit, double min_time, double speed_fraction)
{
  double T = min_time > 1e-3 ? min_time : 1e-3;
  for (int j = 0; j < n; j++) {
    double v = velocity_limit ? velocity_limit[j] : 1.0;
    if (!(isfinite(v) && v > 0)) {v = 1.0;}
    double need = 1.875 * fabs(dq[j]) / (speed_fraction * v);
    if (need > T) {T = need;}
  }
  double t[2] = {t0, t0 + T};
  double * q = calloc((size_t)2 * n, sizeof(double));
  double * qd = calloc((size_t)2 * n, sizeof(double));
  double * qdd = calloc((size_t)2 * n, sizeof(double));
  if (!q || !qd || !qdd) {
    free(q);
    free(qd);
    free(qdd);
    return NULL;
  }
  memcpy(q, dq, sizeof(double) * n);
  memcpy(qd, dqd, sizeof(double) * n);
  if (dqdd) {memcpy(qdd, dqdd, sizeof(double) * n);}
  char err[64];
  reference_t * r = reference_create(n, 2, t, q, qd, qdd, err, sizeof(err));
  free(q);
  free(qd);
  free(qdd);
  return r;
}
