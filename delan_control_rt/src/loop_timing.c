/* See loop_timing.h. */
#define _GNU_SOURCE  /* RUSAGE_THREAD */
#include "loop_timing.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static const char * const PART_KEYS[LOOP_PARTS] = {"latency_dds", "take", "compute", "publish",
  "wait", "cycle_cpu"};
/* the parts that add up to a command's latency */
#define LATENCY_PARTS 4

static int64_t clock_ns(clockid_t id)
{
  struct timespec ts;
  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t loop_wall_ns(void) {return clock_ns(CLOCK_REALTIME);}
int64_t loop_mono_ns(void) {return clock_ns(CLOCK_MONOTONIC);}
int64_t loop_thread_cpu_ns(void) {return clock_ns(CLOCK_THREAD_CPUTIME_ID);}

/* ------------------------------------------------------------------ latency and missed cycles */
void loop_stats_received(loop_stats_t * s, int64_t first_ns, int count)
{
  s->states += count;
  if (s->last_command_ns && first_ns < s->last_command_ns) {s->missed++;}
  s->missed += count - 1;
  s->last_command_ns = 0;
}

void loop_stats_command(loop_stats_t * s, int64_t state_ns, int64_t command_ns)
{
  s->last_command_ns = command_ns;
  double us = (command_ns - state_ns) * 1e-3;
  if (us < 0.0) {
    s->clock_skew++;
    return;
  }
  int bin = (int)(us / LOOP_BIN_US);
  s->hist[bin < LOOP_N_BINS ? bin : LOOP_N_BINS]++;
  s->sum_us += us;
  if (us > s->max_us) {s->max_us = us;}
  if (us > s->window_max_us) {s->window_max_us = us;}
}

/* the upper edge [us] of the bin of h (loop_stats_t's bins) holding the q-th percentile; NAN
 * when empty, INFINITY in the overflow bin */
static double percentile_10us(const int64_t * h, double q)
{
  int64_t total = 0, cum = 0;
  for (int i = 0; i <= LOOP_N_BINS; i++) {total += h[i];}
  if (!total) {return NAN;}
  for (int k = 0; k <= LOOP_N_BINS; k++) {
    cum += h[k];
    if ((double)cum >= q / 100.0 * total) {
      return k >= LOOP_N_BINS ? INFINITY : (k + 1) * LOOP_BIN_US;
    }
  }
  return INFINITY;
}

/* ------------------------------------------------------------------ the breakdown */
static int timing_bin(double us)
{
  if (us < LOOP_FINE_US) {return (int)us;}
  if (us < LOOP_COARSE_US) {return LOOP_FINE_US + (int)((us - LOOP_FINE_US) / 10.0);}
  return LOOP_TIMING_BINS - 1;
}

/* the upper edge [us] of timing bin k; INFINITY for the overflow bin */
static double timing_edge(int k)
{
  if (k >= LOOP_TIMING_BINS - 1) {return INFINITY;}
  return k < LOOP_FINE_US ? k + 1.0 : LOOP_FINE_US + (k - LOOP_FINE_US + 1) * 10.0;
}

/* the q-th percentile of the period's histogram of part p (upper bin edge) */
static double timing_percentile(const loop_part_t * p, double q)
{
  int64_t total = 0, cum = 0;
  for (int i = 0; i < LOOP_TIMING_BINS; i++) {total += p->hist[i] - p->window[i];}
  if (!total) {return NAN;}
  for (int k = 0; k < LOOP_TIMING_BINS; k++) {
    cum += p->hist[k] - p->window[k];
    if ((double)cum >= q / 100.0 * total) {return timing_edge(k);}
  }
  return INFINITY;
}

void loop_breakdown_cycle(loop_breakdown_t * b, const loop_cycle_t * t)
{
  const int64_t ns[LOOP_PARTS] = {t->wake - t->source, t->taken - t->wake,
    t->computed - t->taken, t->published - t->computed, t->wake - t->wait_begin, t->cpu_ns};
  for (int i = 0; i < LOOP_PARTS; i++) {
    if (ns[i] < 0) {return;}
  }
  int64_t * slot = b->ring[b->head % LOOP_RING];
  for (int i = 0; i < LOOP_PARTS; i++) {
    loop_part_t * p = &b->part[i];
    const double us = ns[i] * 1e-3;
    p->hist[timing_bin(us)]++;
    p->sum_us += us;
    if (us > p->max_us) {p->max_us = us;}
    if (us > p->window_max_us) {p->window_max_us = us;}
    slot[i] = ns[i];
  }
  const int waiting = t->wait_begin <= t->source;
  b->ring_waiting[b->head % LOOP_RING] = (unsigned char)waiting;
  b->waiting += waiting;
  b->head++;
  b->cycles++;
}

void loop_breakdown_idle(loop_breakdown_t * b, int64_t ns)
{
  if (!b->window_begin_ns) {b->window_begin_ns = loop_mono_ns() - ns;}  /* the first wait */
  if (ns > 0) {b->idle_ns += ns;}
}

static int64_t latency_of(const int64_t * parts)
{
  int64_t sum = 0;
  for (int i = 0; i < LATENCY_PARTS; i++) {sum += parts[i];}
  return sum;
}

static int compare_ns(const void * a, const void * b)
{
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* the period's slowest 1 % (latency at or above its p99, from the ring): their number, the
 * sums [us] of their parts (tail) and latencies (*latency), and how many of them were published
 * while the loop waited (*waiting) */
static int64_t period_tail(loop_breakdown_t * b, double * tail, double * latency,
  int64_t * waiting)
{
  static int64_t sorted[LOOP_RING];
  int64_t n = b->head - b->window_head;
  if (n > LOOP_RING) {n = LOOP_RING;}
  for (int i = 0; i < LOOP_PARTS; i++) {tail[i] = 0.0;}
  *latency = 0.0;
  *waiting = 0;
  if (n <= 0) {return 0;}
  const int64_t first = b->head - n;
  for (int64_t k = 0; k < n; k++) {sorted[k] = latency_of(b->ring[(first + k) % LOOP_RING]);}
  qsort(sorted, (size_t)n, sizeof(sorted[0]), compare_ns);
  const int64_t threshold = sorted[n - (n / 100 > 1 ? n / 100 : 1)];
  int64_t count = 0;
  for (int64_t k = 0; k < n; k++) {
    const int64_t * parts = b->ring[(first + k) % LOOP_RING];
    if (latency_of(parts) < threshold) {continue;}
    count++;
    *waiting += b->ring_waiting[(first + k) % LOOP_RING];
    *latency += latency_of(parts) * 1e-3;
    for (int i = 0; i < LOOP_PARTS; i++) {tail[i] += parts[i] * 1e-3;}
  }
  return count;
}

static void put_number(loop_put put, void * ctx, const char * prefix, const char * key,
  const char * suffix, const char * fmt, double v)
{
  char name[96], value[64];
  snprintf(name, sizeof(name), "%s%s%s", prefix, key, suffix);
  snprintf(value, sizeof(value), fmt, v);
  put(ctx, name, value);
}

/* v (>= 0) in decimal at out; the digits written */
static size_t decimal(int64_t v, char * out)
{
  char digits[24];
  size_t n = 0;
  do {
    digits[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v > 0);
  for (size_t i = 0; i < n; i++) {out[i] = digits[n - 1 - i];}
  return n;
}

/* "bin:count,..." of the non-empty bins of h (n bins) into text (len); by hand, not snprintf:
 * thousands of bins a period, formatted in the loop */
static void histogram_text(const int64_t * h, int n, char * text, size_t len)
{
  size_t used = 0;
  for (int i = 0; i < n && used + 48 < len; i++) {
    if (h[i] <= 0) {continue;}
    if (used) {text[used++] = ',';}
    used += decimal(i, text + used);
    text[used++] = ':';
    used += decimal(h[i], text + used);
  }
  text[used] = '\0';
}

void loop_report(loop_stats_t * s, loop_breakdown_t * b, loop_put put, void * ctx)
{
  /* large enough for every bin of either histogram */
  static char text[LOOP_TIMING_BINS * 24];
  int64_t w[LOOP_N_BINS + 1], period = 0;
  for (int i = 0; i <= LOOP_N_BINS; i++) {
    w[i] = s->hist[i] - s->window[i];
    period += w[i];
  }
  put_number(put, ctx, "", "loop_latency_p50_us", "", "%.0f", percentile_10us(w, 50));
  put_number(put, ctx, "", "loop_latency_p99_us", "", "%.0f", percentile_10us(w, 99));
  put_number(put, ctx, "", "loop_latency_max_us", "", "%.0f", s->window_max_us);
  put_number(put, ctx, "", "loop_latency_max_all_us", "", "%.0f", s->max_us);
  put_number(put, ctx, "", "joint_states_received", "", "%.0f", (double)s->states);
  put_number(put, ctx, "", "missed_cycles", "", "%.0f", (double)s->missed);
  put_number(put, ctx, "", "clock_skew_samples", "", "%.0f", (double)s->clock_skew);
  histogram_text(s->hist, LOOP_N_BINS + 1, text, sizeof(text));
  put(ctx, "latency_histogram_10us", text);
  put_number(put, ctx, "", "loop_latency_mean_us", "", "%.1f",
    period ? (s->sum_us - s->window_sum_us) / period : NAN);
  put_number(put, ctx, "", "loop_latency_sum_us", "", "%.0f", s->sum_us);
  memcpy(s->window, s->hist, sizeof(s->hist));
  s->window_sum_us = s->sum_us;
  s->window_max_us = 0.0;

  double tail[LOOP_PARTS], tail_latency;
  int64_t tail_waiting;
  const int64_t n_tail = period_tail(b, tail, &tail_latency, &tail_waiting);
  const int64_t cycles = b->cycles - b->window_cycles;
  for (int i = 0; i < LOOP_PARTS; i++) {
    loop_part_t * p = &b->part[i];
    const char * key = PART_KEYS[i];
    put_number(put, ctx, "", key, "_p50_us", "%.0f", timing_percentile(p, 50));
    put_number(put, ctx, "", key, "_p99_us", "%.0f", timing_percentile(p, 99));
    put_number(put, ctx, "", key, "_max_us", "%.1f", cycles ? p->window_max_us : NAN);
    put_number(put, ctx, "", key, "_mean_us", "%.1f",
      cycles ? (p->sum_us - p->window_sum_us) / cycles : NAN);
    put_number(put, ctx, "", key, "_sum_us", "%.0f", p->sum_us);
    histogram_text(p->hist, LOOP_TIMING_BINS, text, sizeof(text));
    char name[96];
    snprintf(name, sizeof(name), "%s_histogram", key);
    put(ctx, name, text);
    put_number(put, ctx, "tail_", key, "_mean_us", "%.1f", n_tail ? tail[i] / n_tail : NAN);
    b->tail_sum_us[i] += tail[i];
    put_number(put, ctx, "tail_", key, "_sum_us", "%.0f", b->tail_sum_us[i]);
    memcpy(p->window, p->hist, sizeof(p->hist));
    p->window_sum_us = p->sum_us;
    p->window_max_us = 0.0;
  }
  b->tail_cycles += n_tail;
  b->tail_waiting += tail_waiting;
  b->tail_latency_sum_us += tail_latency;
  put_number(put, ctx, "", "breakdown_cycles", "", "%.0f", (double)b->cycles);
  put_number(put, ctx, "", "tail_cycles", "", "%.0f", (double)b->tail_cycles);
  put_number(put, ctx, "", "states_while_waiting", "", "%.0f", (double)b->waiting);
  put_number(put, ctx, "", "tail_states_while_waiting", "", "%.0f", (double)b->tail_waiting);
  put_number(put, ctx, "", "tail_loop_latency_mean_us", "", "%.1f",
    n_tail ? tail_latency / n_tail : NAN);
  put_number(put, ctx, "", "tail_loop_latency_sum_us", "", "%.0f", b->tail_latency_sum_us);
  const int64_t now = loop_mono_ns();
  put_number(put, ctx, "", "loop_idle_percent", "", "%.1f", b->window_begin_ns &&
    now > b->window_begin_ns ? 100.0 * b->idle_ns / (now - b->window_begin_ns) : NAN);
  struct rusage ru;
  put_number(put, ctx, "", "involuntary_switches", "", "%.0f",
    getrusage(RUSAGE_THREAD, &ru) == 0 ? (double)ru.ru_nivcsw : NAN);
  b->window_cycles = b->cycles;
  b->window_head = b->head;
  b->idle_ns = 0;
  b->window_begin_ns = now;
}

/* ------------------------------------------------------------------ scheduling */
int loop_priority_of(const rcl_params_t * params)
{
  int prio = 0;
  for (size_t i = 0; params && i < params->num_nodes; i++) {
    for (size_t j = 0; j < params->params[i].num_params; j++) {
      const rcl_variant_t * v = &params->params[i].parameter_values[j];
      if (!strcmp(params->params[i].parameter_names[j], "realtime_priority") &&
        v->integer_value)
      {
        prio = (int)*v->integer_value;
      }
    }
  }
  return prio;
}

void loop_realtime(int priority, const char * who)
{
  if (priority <= 0) {return;}
  struct sched_param sp = {.sched_priority = priority};
  if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) {
    fprintf(stderr, "[%s] SCHED_FIFO %d refused (%s): normal scheduling; needs CAP_SYS_NICE "
      "or an rtprio limit\n", who, priority, strerror(errno));
  }
}
