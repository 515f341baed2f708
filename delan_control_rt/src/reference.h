/* A joint-space reference for the compiled loop: delan_control.trajectories.PiecewiseQuintic
 * (quintic Hermite segments through waypoints with positions, velocities and accelerations)
 * and rejoin_offset (the offset "arm minus reference" brought smoothly to zero), on plain
 * arrays. Built when a reference arrives (allocates); sampled every cycle (does not). */
#ifndef DELAN_CONTROL_RT__REFERENCE_H_
#define DELAN_CONTROL_RT__REFERENCE_H_

#ifdef __cplusplus
extern "C" {
#endif

typedef struct
{
  int n, points;
  double * t;               /* (points,) strictly increasing, absolute seconds */
  double * q, * qd, * qdd;  /* (points, n) row-major */
} reference_t;

/* A reference of points x n waypoints copied from t, q and (NULL = zero) qd, qdd. NULL with a
 * reason in err when the times do not increase strictly or a value is not finite. */
reference_t * reference_create(
  int n, int points, const double * t, const double * q, const double * qd,
  const double * qdd, char * err, int err_len);

void reference_free(reference_t * r);

/* q, qd, qdd (n,) at time t: the first waypoint at rest before it, the last at rest from it. */
void reference_sample(const reference_t * r, double t, double * q, double * qd, double * qdd);

double reference_end_time(const reference_t * r);

/* The offset (dq, dqd, dqdd) at t0 (dqdd NULL: zero) down to zero at rest over at least
 * min_time seconds, longer when catching up would add more than speed_fraction of
 * velocity_limit (<= 0 or not finite: 1). */
reference_t * reference_rejoin(
  int n, double t0, const double * dq, const double * dqd, const double * dqdd,
  const double * velocity_limit, double min_time, double speed_fraction);

#ifdef __cplusplus
}
#endif
#endif
