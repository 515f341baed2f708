/* How a control loop that answers joint states times itself, cheaply enough for 1 kHz: every
 * buffer is preallocated in the structs, a cycle only adds to histograms and a ring (a few
 * clock reads, no allocation, no printing); the percentiles, means and texts are made once per
 * diagnostics period (loop_report).
 *
 * loop_stats_t: the latency of each command (command published - the DDS source stamp of the
 * state it answers) in 10 us bins and the missed cycles, as delan_control.loop_stats.
 *
 * loop_breakdown_t: where that latency goes, per command (all instants on CLOCK_REALTIME, the
 * clock of the source stamps):
 *   latency_dds  source stamp -> the loop's rcl_wait returned: the writer's publish, transport,
 *                the middleware's delivery and the loop waking up (or, when the state came
 *                while the loop was busy or not scheduled, the wait for it)
 *   take         rcl_wait returned -> every queued state taken (rcl_take, deserialised)
 *   compute      taken -> the command computed (map, gate, reference, model, law, limits)
 *   publish      computed -> rcl_publish returned (serialise, DDS write)
 * The four add up to the command's latency. Beside them, per command:
 *   wait         the time the loop sat in the rcl_wait that woke for the state (idle)
 *   cycle_cpu    the loop thread's CPU time from wake to publish returned (take + compute +
 *                publish minus it: the cycle preempted)
 * and per period the share of time the loop sat in rcl_wait and the loop thread's involuntary
 * context switches. A state published while the loop sat in rcl_wait (waiting since before its
 * source stamp) was delayed by its delivery alone (the writer, the middleware, the wake-up),
 * not by the loop being busy: those are counted. The slowest 1 % of each period's commands
 * (latency at or above its p99) are attributed part by part (the tail_* keys): what the p99 is
 * made of. */
#ifndef DELAN_CONTROL_RT__LOOP_TIMING_H_
#define DELAN_CONTROL_RT__LOOP_TIMING_H_

#include <stdint.h>

#include <rcl_yaml_param_parser/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOOP_BIN_US 10
#define LOOP_N_BINS 2000

typedef struct
{
  int64_t hist[LOOP_N_BINS + 1], window[LOOP_N_BINS + 1];
  double max_us, window_max_us, sum_us, window_sum_us;
  int64_t states, missed, clock_skew, last_command_ns;
} loop_stats_t;

/* states taken together, the oldest published at first_ns; only the last is answered */
void loop_stats_received(loop_stats_t * s, int64_t first_ns, int count);

/* the command answering the state published at state_ns went out at command_ns */
void loop_stats_command(loop_stats_t * s, int64_t state_ns, int64_t command_ns);

/* The breakdown's histograms: 1 us bins up to LOOP_FINE_US, 10 us bins up to LOOP_COARSE_US,
 * one overflow bin. */
#define LOOP_FINE_US 1000
#define LOOP_COARSE_US 20000
#define LOOP_TIMING_BINS (LOOP_FINE_US + (LOOP_COARSE_US - LOOP_FINE_US) / 10 + 1)
/* cycles kept for the tail attribution: at least one diagnostics period at 1 kHz */
#define LOOP_RING 2048

enum {LOOP_DDS = 0, LOOP_TAKE, LOOP_COMPUTE, LOOP_PUBLISH, LOOP_WAIT, LOOP_CPU, LOOP_PARTS};

/* the instants of one answered state [ns]: CLOCK_REALTIME, but cpu_wake and cpu_ns */
typedef struct
{
  int64_t source;       /* the state's DDS source stamp (the writer's clock) */
  int64_t wait_begin;   /* the loop entered the rcl_wait that woke for it */
  int64_t wake;         /* that rcl_wait returned */
  int64_t cpu_wake;     /* the loop thread's CPU time then */
  int64_t taken;        /* every queued state taken */
  int64_t computed;     /* the command computed */
  int64_t published;    /* rcl_publish returned */
  int64_t cpu_ns;       /* the loop thread's CPU time from wake to published */
} loop_cycle_t;

typedef struct
{
  int64_t hist[LOOP_TIMING_BINS], window[LOOP_TIMING_BINS];
  double sum_us, window_sum_us, max_us, window_max_us;
} loop_part_t;

typedef struct
{
  loop_part_t part[LOOP_PARTS];
  int64_t cycles, window_cycles;
  /* the last LOOP_RING cycles' parts [ns] (the latency: the first four summed) */
  int64_t ring[LOOP_RING][LOOP_PARTS];
  unsigned char ring_waiting[LOOP_RING];  /* published while the loop sat in rcl_wait */
  int64_t head, window_head;
  int64_t waiting;                        /* states published while the loop waited */
  /* the slowest 1 % of each period: count (those published while the loop waited) and sums
   * [us] of the parts and of the latency */
  int64_t tail_cycles, tail_waiting;
  double tail_sum_us[LOOP_PARTS], tail_latency_sum_us;
  /* time in rcl_wait [ns] and the start of the period [ns, CLOCK_MONOTONIC] */
  int64_t idle_ns, window_begin_ns;
} loop_breakdown_t;

/* records a cycle; one whose instants are out of order (the clock stepped) is left out */
void loop_breakdown_cycle(loop_breakdown_t * b, const loop_cycle_t * t);

/* the loop sat in rcl_wait for ns */
void loop_breakdown_idle(loop_breakdown_t * b, int64_t ns);

/* Writes the keys of s and b (put(ctx, key, value)) and starts the next period:
 *   loop_latency_p50_us, _p99_us, _max_us (of the period), loop_latency_max_all_us,
 *   joint_states_received, missed_cycles, clock_skew_samples, latency_histogram_10us
 *   (cumulative), loop_latency_mean_us (period), loop_latency_sum_us (cumulative);
 *   per part (latency_dds, take, compute, publish, wait, cycle_cpu): <part>_p50_us, _p99_us,
 *   _max_us, _mean_us (the period), <part>_sum_us and <part>_histogram (cumulative,
 *   "bin:count,..." in the bins above), tail_<part>_mean_us (the period's slowest 1 %) and
 *   tail_<part>_sum_us (cumulative); breakdown_cycles, tail_cycles, states_while_waiting,
 *   tail_states_while_waiting (cumulative), tail_loop_latency_mean_us / _sum_us,
 *   loop_idle_percent (the period), involuntary_switches (the loop thread, cumulative). Call
 *   it from the loop's thread. */
typedef void (*loop_put)(void * ctx, const char * key, const char * value);
void loop_report(loop_stats_t * s, loop_breakdown_t * b, loop_put put, void * ctx);

/* nanoseconds: CLOCK_REALTIME (as source stamps), CLOCK_MONOTONIC, the calling thread's CPU */
int64_t loop_wall_ns(void);
int64_t loop_mono_ns(void);
int64_t loop_thread_cpu_ns(void);

/* realtime_priority among the command line's parameters, for any node name (0: absent) */
int loop_priority_of(const rcl_params_t * params);

/* SCHED_FIFO at priority (> 0) for the process, before the middleware's threads exist (they
 * inherit it); a refusal is said on stderr (who: the log prefix) and changes nothing */
void loop_realtime(int priority, const char * who);

#ifdef __cplusplus
}
#endif
#endif
