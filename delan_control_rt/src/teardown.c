/* See teardown.h. */
#include "teardown.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

static const char * volatile g_node = "";
static const char * volatile g_stage = "";

static void write_all(const char * text)
{
  size_t len = strlen(text);
  while (len > 0) {
    const ssize_t k = write(STDERR_FILENO, text, len);
    if (k <= 0) {return;}
    text += k;
    len -= (size_t)k;
  }
}

static void on_deadline(int sig)
{
  (void)sig;
  /* async-signal-safe calls only */
  write_all("[");
  write_all(g_node);
  write_all("] teardown stuck in ");
  write_all(g_stage);
  write_all(": exiting\n");
  _exit(1);
}

void teardown_deadline(const char * node_name, unsigned int seconds)
{
  g_node = node_name;
  g_stage = "the start of the teardown";
  signal(SIGALRM, on_deadline);
  alarm(seconds);
}

void teardown_stage(const char * stage)
{
  g_stage = stage;
}
