/* watch's terminal view (ncursesw): the selected GPU's memory and utilization bars, its
 * memory history, the processes on it with their trends, recent warnings and the watched
 * command's last output lines. */
#include <curses.h>
#include <langinfo.h>
#include <locale.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/gpu_view.h"
#include "cli/watch.h"

#define OUT_LINES 200
#define OUT_WIDTH 256
#define KEPT_WARNINGS 6
#define GRAPH_ROWS 8

enum { PAIR_OK = 1, PAIR_HIGH, PAIR_FULL, PAIR_GRAPH, PAIR_WARN };

struct tui {
  SCREEN *screen;
  unsigned gpu; /* selected */
  bool color, utf8;
  char out[OUT_LINES][OUT_WIDTH];
  size_t out_next, out_count, partial;
  char warnings[KEPT_WARNINGS][WATCH_WARN_LEN];
  size_t warn_next, warn_count;
  uint64_t warned_at; /* the sample whose warnings were kept */
};

struct tui *tui_open(void) {
  if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) return NULL;
  struct tui *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  setlocale(LC_CTYPE, "");
  t->utf8 = strcmp(nl_langinfo(CODESET), "UTF-8") == 0;
  t->screen = newterm(NULL, stdout, stdin);
  if (!t->screen) {
    free(t);
    return NULL;
  }
  cbreak();
  noecho();
  keypad(stdscr, TRUE);
  nodelay(stdscr, TRUE);
  curs_set(0);
  t->color = has_colors() && !(getenv("NO_COLOR") && *getenv("NO_COLOR"));
  if (t->color) {
    start_color();
    use_default_colors();
    init_pair(PAIR_OK, COLOR_GREEN, -1);
    init_pair(PAIR_HIGH, COLOR_YELLOW, -1);
    init_pair(PAIR_FULL, COLOR_RED, -1);
    init_pair(PAIR_GRAPH, COLOR_CYAN, -1);
    init_pair(PAIR_WARN, COLOR_YELLOW, -1);
  }
  t->warned_at = UINT64_MAX;
  return t;
}

static void color_on(const struct tui *t, int pair) {
  if (t->color) attron(COLOR_PAIR(pair));
}

static void color_off(const struct tui *t, int pair) {
  if (t->color) attroff(COLOR_PAIR(pair));
}

static int level_pair(double fraction) {
  return fraction < 0.75 ? PAIR_OK : fraction < 0.9 ? PAIR_HIGH : PAIR_FULL;
}

/* "[█████░░░░░]" filled to fraction, width cells between the brackets. */
static void bar(const struct tui *t, int row, int col, int width, double fraction) {
  int full = (int)(fraction * width + 0.5);
  if (full > width) full = width;
  mvaddch(row, col, '[');
  color_on(t, level_pair(fraction));
  for (int i = 0; i < width; i++)
    addstr(i < full ? (t->utf8 ? "\u2588" : "#") : (t->utf8 ? "\u2591" : "."));
  color_off(t, level_pair(fraction));
  addch(']');
}

static void draw_title(const struct tui *t, const struct watch *w) {
  char line[256], age[32];
  watch_duration(w->now, age, sizeof age);
  snprintf(line, sizeof line, " vramfit watch | GPU %u of %u | every %.2g s | %s%s",
           t->gpu, w->ngpus, w->o.interval, age, w->o.cmd ? " | watching a command" : "");
  attron(A_REVERSE);
  mvhline(0, 0, ' ', COLS);
  mvaddnstr(0, 0, line, COLS);
  const char *keys = " <-/-> GPU   q quit ";
  if (COLS > (int)(strlen(line) + strlen(keys))) mvaddstr(0, COLS - (int)strlen(keys), keys);
  attroff(A_REVERSE);
}

static int draw_gauges(const struct tui *t, const struct wgpu *g, int row) {
  const struct vf_gpu_sample *s = &g->s;
  char text[256];
  mvprintw(row++, 0, "%s  %s", s->name[0] ? s->name : "(unnamed)", s->uuid);
  if (g->err) {
    mvaddstr(row++, 0, "the GPU does not answer");
    return row;
  }
  int width = COLS > 60 ? COLS - 44 : 16;
  if (s->fields & VF_FIELD_MEMORY) {
    char used[32], total[32];
    gpu_view_bytes(s->used_bytes, used, sizeof used);
    gpu_view_bytes(s->total_bytes, total, sizeof total);
    double frac = s->total_bytes ? (double)s->used_bytes / (double)s->total_bytes : 0;
    mvaddstr(row, 0, "mem  ");
    bar(t, row, 5, width, frac);
    snprintf(text, sizeof text, "  %s / %s (%.0f%%)", used, total, frac * 100);
    addnstr(text, COLS - getcurx(stdscr));
  } else {
    mvaddstr(row, 0, "mem  not reported by the driver");
  }
  row++;
  mvaddstr(row, 0, "util ");
  if (s->fields & VF_FIELD_UTIL) bar(t, row, 5, width, s->util_gpu / 100.0);
  text[0] = '\0';
  if (s->fields & VF_FIELD_UTIL) snprintf(text, sizeof text, "  %u%%", s->util_gpu);
  if (s->fields & VF_FIELD_POWER)
    snprintf(text + strlen(text), sizeof text - strlen(text), "  %.0f W", s->power_mw / 1000.0);
  if (s->fields & VF_FIELD_TEMP)
    snprintf(text + strlen(text), sizeof text - strlen(text), "  %uC", s->temperature_c);
  addnstr(text, COLS - getcurx(stdscr));
  return row + 2;
}

/* The memory history, one column per sample, in eighths of a cell. */
static int draw_graph(const struct tui *t, const struct wgpu *g, int row) {
  static const char *const eighths[] = {" ", "\u2581", "\u2582", "\u2583", "\u2584",
                                        "\u2585", "\u2586", "\u2587", "\u2588"};
  mvaddstr(row++, 0, "memory history");
  double total = (double)g->s.total_bytes;
  int width = COLS - 1;
  size_t n = g->used.n, first = n > (size_t)width ? n - (size_t)width : 0;
  color_on(t, PAIR_GRAPH);
  for (size_t i = first; i < n && total > 0; i++) {
    int col = (int)(i - first), level = (int)(g->used.v[i] / total * GRAPH_ROWS * 8 + 0.5);
    for (int r = 0; r < GRAPH_ROWS; r++) {
      int cell = level - (GRAPH_ROWS - 1 - r) * 8;
      cell = cell < 0 ? 0 : cell > 8 ? 8 : cell;
      mvaddstr(row + r, col, t->utf8 ? eighths[cell] : cell >= 4 ? "#" : " ");
    }
  }
  color_off(t, PAIR_GRAPH);
  return row + GRAPH_ROWS + 1;
}

static void trend_text(const struct wproc *p, char *buf, size_t size) {
  char eta[32];
  if (!p->watched) snprintf(buf, size, "-");
  else if (p->trend.state == VF_TREND_WARMUP) snprintf(buf, size, "warming up");
  else if (p->trend.state == VF_TREND_STEADY) snprintf(buf, size, "steady");
  else {
    watch_duration(p->trend.seconds_to_full, eta, sizeof eta);
    snprintf(buf, size, "GROWING %+.1f MiB/min, full in ~%s", p->trend.slope_bps * 60 / 1048576.0,
             eta);
  }
}

static int draw_procs(const struct tui *t, const struct watch *w, int row, int last) {
  attron(A_BOLD);
  mvprintw(row++, 0, "%-8s %-20s %12s  %s", "PID", "PROCESS", "MEMORY", "TREND");
  attroff(A_BOLD);
  for (size_t i = 0; i < w->nprocs && row < last; i++) {
    const struct wproc *p = &w->procs[i];
    if (p->gpu != t->gpu || !p->seen) continue;
    char mem[32], trend[96];
    const struct vf_gpu_sample *s = &w->gpus[p->gpu].s;
    uint64_t used = VF_BYTES_UNKNOWN;
    for (size_t k = 0; k < s->nprocs; k++)
      if (s->procs[k].pid == p->pid) used = s->procs[k].used_bytes;
    gpu_view_bytes(used, mem, sizeof mem);
    trend_text(p, trend, sizeof trend);
    bool growing = p->trend.state == VF_TREND_GROWING;
    if (growing) color_on(t, PAIR_FULL);
    mvprintw(row++, 0, "%-8u %-20.20s %12s  %.*s", p->pid, p->name, mem, COLS > 46 ? COLS - 46 : 0,
             trend);
    if (growing) color_off(t, PAIR_FULL);
  }
  return row + 1;
}

static void keep_warnings(struct tui *t, const struct watch *w) {
  if (t->warned_at == w->samples) return;
  t->warned_at = w->samples;
  for (size_t i = 0; i < w->nwarn; i++) {
    snprintf(t->warnings[t->warn_next], sizeof t->warnings[0], "%s", w->warn[i]);
    t->warn_next = (t->warn_next + 1) % KEPT_WARNINGS;
    if (t->warn_count < KEPT_WARNINGS) t->warn_count++;
  }
}

static int draw_warnings(const struct tui *t, int row) {
  color_on(t, PAIR_WARN);
  for (size_t i = 0; i < t->warn_count && row < LINES; i++) {
    size_t k = (t->warn_next + KEPT_WARNINGS - t->warn_count + i) % KEPT_WARNINGS;
    mvprintw(row++, 0, "! %.*s", COLS - 2, t->warnings[k]);
  }
  color_off(t, PAIR_WARN);
  return row + (t->warn_count > 0);
}

static void draw_output(const struct tui *t, int row) {
  if (t->out_count == 0 || row >= LINES - 1) return;
  attron(A_BOLD);
  mvaddstr(row++, 0, "command output");
  attroff(A_BOLD);
  size_t room = (size_t)(LINES - row), n = t->out_count < room ? t->out_count : room;
  for (size_t i = 0; i < n; i++) {
    size_t k = (t->out_next + OUT_LINES - n + i) % OUT_LINES;
    mvaddnstr(row++, 0, t->out[k], COLS);
  }
}

void tui_draw(struct tui *t, const struct watch *w) {
  if (t->gpu >= w->ngpus) t->gpu = 0;
  keep_warnings(t, w);
  erase();
  draw_title(t, w);
  if (w->ngpus == 0) {
    mvaddstr(2, 0, "the driver reports no GPU");
    refresh();
    return;
  }
  const struct wgpu *g = &w->gpus[t->gpu];
  int row = draw_gauges(t, g, 2);
  if (!g->err && LINES > 24) row = draw_graph(t, g, row);
  int out_rows = t->out_count ? LINES / 4 : 0;
  row = draw_procs(t, w, row, LINES - out_rows - (int)t->warn_count - 1);
  row = draw_warnings(t, row);
  draw_output(t, row);
  refresh();
}

/* Switches the selected GPU for a key; whether the view must be redrawn. */
static bool select_gpu(struct tui *t, const struct watch *w, int c) {
  if (c == KEY_RESIZE) return true;
  if (w->ngpus == 0) return false;
  unsigned before = t->gpu;
  if (c == KEY_RIGHT || c == '\t' || c == 'n') t->gpu = (t->gpu + 1) % w->ngpus;
  else if (c == KEY_LEFT || c == KEY_BTAB || c == 'p') t->gpu = (t->gpu + w->ngpus - 1) % w->ngpus;
  else if (c >= '0' && c <= '9' && (unsigned)(c - '0') < w->ngpus) t->gpu = (unsigned)(c - '0');
  return t->gpu != before;
}

bool tui_keys(struct tui *t, const struct watch *w) {
  bool redraw = false;
  for (int c; (c = getch()) != ERR;) {
    if (c == 'q' || c == 'Q' || c == 27) return false;
    redraw |= select_gpu(t, w, c);
  }
  if (redraw) tui_draw(t, w);
  return true;
}

/* Keeps the last OUT_LINES complete lines; a carriage return (progress bars) restarts the
 * line. */
void tui_output(struct tui *t, const char *bytes, size_t len) {
  for (size_t i = 0; i < len; i++) {
    char *line = t->out[t->out_next];
    if (bytes[i] == '\n') {
      line[t->partial] = '\0';
      t->out_next = (t->out_next + 1) % OUT_LINES;
      if (t->out_count < OUT_LINES) t->out_count++;
      t->partial = 0;
    } else if (bytes[i] == '\r') {
      t->partial = 0;
    } else if (t->partial + 1 < OUT_WIDTH) {
      line[t->partial++] = bytes[i] == '\t' ? ' ' : bytes[i];
    }
  }
}

void tui_close(struct tui *t) {
  if (!t) return;
  endwin();
  delscreen(t->screen);
  size_t n = t->out_count < 40 ? t->out_count : 40;
  if (n) printf("last %zu lines of the command's output:\n", n);
  for (size_t i = 0; i < n; i++) printf("%s\n", t->out[(t->out_next + OUT_LINES - n + i) % OUT_LINES]);
  free(t);
}
