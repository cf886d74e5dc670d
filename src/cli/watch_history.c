/* vramfit watch -- CMD: the run, kept in the history when the command is done. */
#include <signal.h>
#include <string.h>

#include "cli/history_cli.h"
#include "cli/watch.h"

static const char *outcome(int exit_code, int stopped_by) {
  if (stopped_by) return "interrupted";
  return exit_code == 0 ? "ok" : "error";
}

void watch_record(const struct watch *w, time_t started, double seconds, int exit_code,
                  int stopped_by) {
  struct vf_history *h = history_open_for_writing("watch");
  if (!h) return;
  char command[2048];
  history_command_line(w->o.cmd, command, sizeof command);
  struct vf_run r = {.when = (double)started, .command = command, .exit_code = exit_code,
                     .peak_device_bytes = w->tree_peak, .seconds = seconds};
  snprintf(r.source, sizeof r.source, "watch");
  snprintf(r.outcome, sizeof r.outcome, "%s", outcome(exit_code, stopped_by));
  history_gpu(w->nvml, w->tree_peak ? (int)w->tree_peak_gpu : -1, &r);
  history_add(h, "watch", &r);
  vf_history_close(h);
}
