/* The memory timeline as SVG (include/vramfit/plot.h). One fixed page: title, legend, the
 * phases' labels, the plot, and the breakdown bar on the plot's right drawn on the same byte
 * scale, so the allocated part of the bar ends level with the marked peak.
 *
 * Numbers are written with integer arithmetic, never printf's %f: a process whose
 * LC_NUMERIC has a decimal comma would otherwise write an SVG no one can read. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/diag.h"
#include "base/sbuf.h"
#include "vramfit/plot.h"

enum {
  WIDTH = 1060, HEIGHT = 526,
  PLOT_X = 72, PLOT_Y = 116, PLOT_W = 720, PLOT_H = 370,
  BAR_X = 822, BAR_W = 28,
  /* Phases are drawn at least this wide: the loss is a handful of events among thousands
   * and would otherwise be a hairline no one could find. */
  MIN_BAND = 18,
  LABEL_GAP = 13, /* px between the baselines of two breakdown labels */
};
#define GIB 1073741824.0
#define ALLOCATED_COLOR "#1f77b4"
#define RESERVED_COLOR "#ff7f0e"
#define CAPACITY_COLOR "#d62728"
#define PEAK_COLOR "#7b1fa2"
#define HALO "paint-order=\"stroke\" stroke=\"#fff\" stroke-width=\"3\" stroke-linejoin=\"round\""

/* Phases are numbered by the estimator: colours cycle, so phases added later need no edit. */
static const char *const band_colors[] = {"#e3e3e3", "#d6e6f5", "#fbe3c6", "#dcefd5",
                                          "#f1d9e8", "#e6ddf3", "#fff1bf", "#d3eeee"};
static const char *const part_colors[] = {"#4e79a7", "#f28e2b", "#edc948", "#76b7b2",
                                          "#b07aa1", "#bab0ac", "#9c755f", "#59a14f"};
#define CYCLE(table, i) (table)[(i) % (sizeof(table) / sizeof *(table))]

/* A stretch of consecutive events in one phase, and where it lies on the plot. */
struct run {
  uint32_t phase;
  size_t first, count;
  double x, w; /* px from the plot's left edge */
};

/* The first, lowest, highest and last values in one pixel column, and when the lowest and
 * highest came. */
struct envelope {
  bool used;
  uint64_t first, lo, hi, last;
  size_t lo_at, hi_at;
};

/* A line's corners, in pixels. */
struct corner {
  double x, y;
};

struct page {
  struct sbuf b;
  const struct vf_plot *p;
  struct run *runs;
  size_t n_runs;
  struct envelope *env[2]; /* [0] allocated, [1] reserved: PLOT_W columns each */
  double top;              /* bytes at the plot's top edge */
  double step;             /* GiB between two grid lines */
  size_t peak;             /* the first event at the allocated peak */
};

/* ---- writing numbers and text ---- */

/* v to the given number of decimals. */
static void format_fixed(char *buf, size_t size, double v, int decimals) {
  long long scale = 1;
  for (int i = 0; i < decimals; i++) scale *= 10;
  long long n = llround(fabs(v) * (double)scale);
  const char *sign = v < 0 && n ? "-" : "";
  if (decimals) snprintf(buf, size, "%s%lld.%0*lld", sign, n / scale, decimals, n % scale);
  else snprintf(buf, size, "%s%lld", sign, n);
}

static void put_fixed(struct sbuf *b, double v, int decimals) {
  char text[32];
  format_fixed(text, sizeof text, v, decimals);
  sb_puts(b, text);
}

/* A coordinate: one decimal, none when it is whole. */
static void put_num(struct sbuf *b, double v) {
  put_fixed(b, v, llround(v * 10) % 10 ? 1 : 0);
}

/* "22.01 GiB": the plot's one unit, as on its axis. */
static void format_gib(char *buf, size_t size, uint64_t bytes) {
  char number[32];
  format_fixed(number, sizeof number, (double)bytes / GIB, 2);
  snprintf(buf, size, "%s GiB", number);
}

/* Length of the UTF-8 sequence at s (n bytes left) if it is a valid character XML allows,
 * else 0. */
static size_t utf8_char(const unsigned char *s, size_t n) {
  size_t len = s[0] < 0x80 ? 1 : s[0] >= 0xc2 && s[0] < 0xe0 ? 2 : s[0] >= 0xe0 && s[0] < 0xf0 ? 3
             : s[0] >= 0xf0 && s[0] < 0xf5 ? 4 : 0;
  if (!len || len > n) return 0;
  uint32_t cp = len == 1 ? s[0] : s[0] & (0x7f >> len);
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (s[i] & 0x3f);
  }
  static const uint32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
  bool allowed = cp >= 0x20 || cp == '\t' || cp == '\n';
  bool surrogate = cp >= 0xd800 && cp < 0xe000;
  return cp >= smallest[len] && cp <= 0x10ffff && allowed && !surrogate && cp != 0xfffe && cp != 0xffff
             ? len
             : 0;
}

/* Text as XML character data: markup escaped, anything XML cannot carry replaced by U+FFFD. */
static void put_text(struct sbuf *b, const char *text) {
  const unsigned char *s = (const unsigned char *)(text ? text : "");
  for (size_t n = strlen((const char *)s); n;) {
    size_t len = utf8_char(s, n);
    if (!len) sb_puts(b, "\xef\xbf\xbd");
    else if (*s == '&') sb_puts(b, "&amp;");
    else if (*s == '<') sb_puts(b, "&lt;");
    else if (*s == '>') sb_puts(b, "&gt;");
    else if (*s == '"') sb_puts(b, "&quot;");
    else sb_add(b, (const char *)s, len);
    len = len ? len : 1;
    s += len;
    n -= len;
  }
}

/* Roughly how wide text is drawn: a sans-serif character is about 0.6 em on average. */
static double text_width(const char *s, double font) {
  size_t chars = 0;
  for (; *s; s++) chars += ((unsigned char)*s & 0xc0) != 0x80;
  return 0.6 * font * (double)chars;
}

/* <text x y [attrs]>TEXT</text>, TEXT from a printf format. */
static void put_label(struct sbuf *b, double x, double y, const char *attrs, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void put_label(struct sbuf *b, double x, double y, const char *attrs, const char *fmt, ...) {
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  sb_puts(b, "<text x=\"");
  put_num(b, x);
  sb_puts(b, "\" y=\"");
  put_num(b, y);
  sb_printf(b, "\"%s%s>", *attrs ? " " : "", attrs);
  put_text(b, text);
  sb_puts(b, "</text>\n");
}

/* ---- the layout ---- */

static double y_of(const struct page *pg, double bytes) {
  return PLOT_Y + PLOT_H - bytes / pg->top * PLOT_H;
}

/* Splits the run into its phases and gives each its share of the width, after the minimum
 * every phase gets (when there are few enough phases for it to matter). */
static int find_runs(struct page *pg) {
  const struct vf_plot_point *pts = pg->p->points;
  size_t n = pg->p->n_points;
  for (size_t i = 0; i < n; i++) pg->n_runs += i == 0 || pts[i].phase != pts[i - 1].phase;
  if (!(pg->runs = calloc(pg->n_runs ? pg->n_runs : 1, sizeof *pg->runs))) return VF_ENOMEM;
  size_t r = 0;
  for (size_t i = 0; i < n; i++) {
    if (i > 0 && pts[i].phase != pts[i - 1].phase) r++;
    if (!pg->runs[r].count) pg->runs[r] = (struct run){.phase = pts[i].phase, .first = i};
    pg->runs[r].count++;
  }
  double least = pg->n_runs * MIN_BAND * 2 <= PLOT_W ? MIN_BAND : 0;
  double share = PLOT_W - least * (double)pg->n_runs, x = 0;
  for (r = 0; r < pg->n_runs; r++) {
    pg->runs[r].x = x;
    pg->runs[r].w = least + share * (double)pg->runs[r].count / (double)n;
    x += pg->runs[r].w;
  }
  return 0;
}

static int column_of(const struct run *r, size_t i) {
  double x = r->x + ((double)(i - r->first) + 0.5) * r->w / (double)r->count;
  return x < 0 ? 0 : x >= PLOT_W ? PLOT_W - 1 : (int)x;
}

static void envelope_add(struct envelope *e, uint64_t v, size_t i) {
  if (!e->used) e->first = v;
  if (!e->used || v < e->lo) e->lo = v, e->lo_at = i;
  if (!e->used || v > e->hi) e->hi = v, e->hi_at = i;
  e->last = v;
  e->used = true;
}

static int build_envelopes(struct page *pg) {
  for (int s = 0; s < 2; s++)
    if (!(pg->env[s] = calloc(PLOT_W, sizeof *pg->env[s]))) return VF_ENOMEM;
  const struct vf_plot_point *pts = pg->p->points;
  for (size_t r = 0; r < pg->n_runs; r++)
    for (size_t i = pg->runs[r].first; i < pg->runs[r].first + pg->runs[r].count; i++) {
      int c = column_of(&pg->runs[r], i);
      envelope_add(&pg->env[0][c], pts[i].allocated, i);
      envelope_add(&pg->env[1][c], pts[i].reserved, i);
      if (pts[i].allocated > pts[pg->peak].allocated) pg->peak = i;
    }
  return 0;
}

/* The scale: grid lines 1, 2, 2.5 or 5 times a power of ten GiB apart, about six of them,
 * high enough for the reserved bytes, the device's total and the GPU. */
static void choose_scale(struct page *pg) {
  double most = pg->p->capacity;
  for (int c = 0; c < PLOT_W; c++)
    if (pg->env[1][c].used && pg->env[1][c].hi > most) most = (double)pg->env[1][c].hi;
  if (pg->p->estimate && pg->p->estimate->device_peak > most) most = (double)pg->p->estimate->device_peak;
  double gib = most > 0 ? most * 1.04 / GIB : 1, raw = gib / 6, mag = pow(10, floor(log10(raw)));
  static const double nice[] = {1, 2, 2.5, 5, 10};
  size_t i = 0;
  while (i + 1 < sizeof nice / sizeof *nice && raw > nice[i] * mag) i++;
  pg->step = nice[i] * mag;
  pg->top = ceil(gib / pg->step) * pg->step * GIB;
}

/* Decimals a grid label needs to show the step exactly (2.5 GiB: 1; 0.25: 2). */
static int step_decimals(double step) {
  int d = 0;
  for (double v = step; d < 4 && fabs(v - round(v)) > 1e-6 * v; v *= 10) d++;
  return d;
}

/* ---- drawing ---- */

static void draw_head(struct page *pg) {
  struct sbuf *b = &pg->b;
  sb_printf(b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"DejaVu Sans,Verdana,Arial,sans-serif\" font-size=\"12\" fill=\"#222\">\n<title>",
            WIDTH, HEIGHT, WIDTH, HEIGHT);
  put_text(b, pg->p->title);
  sb_printf(b, "</title>\n<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n", WIDTH, HEIGHT);
  put_label(b, PLOT_X, 26, "font-size=\"17\" font-weight=\"bold\"", "%s", pg->p->title ? pg->p->title : "");
  put_label(b, PLOT_X, 46, "fill=\"#555\"", "%s", pg->p->subtitle ? pg->p->subtitle : "");
}

/* One legend entry at *x: a swatch (SVG drawn at the origin) and its words. */
static void legend_item(struct sbuf *b, double *x, const char *swatch, const char *words) {
  sb_puts(b, "<g transform=\"translate(");
  put_num(b, *x);
  sb_printf(b, " 72)\">%s</g>\n", swatch);
  put_label(b, *x + 24, 76, "", "%s", words);
  *x += 24 + text_width(words, 12) + 18;
}

static void draw_legend(struct page *pg) {
  double x = PLOT_X;
  legend_item(&pg->b, &x, "<line x2=\"18\" stroke=\"" ALLOCATED_COLOR "\" stroke-width=\"2.5\"/>",
              "allocated (max_memory_allocated)");
  legend_item(&pg->b, &x, "<line x2=\"18\" stroke=\"" RESERVED_COLOR "\" stroke-width=\"2.5\"/>",
              "reserved (max_memory_reserved)");
  if (pg->p->capacity)
    legend_item(&pg->b, &x, "<line x2=\"18\" stroke=\"" CAPACITY_COLOR "\" stroke-width=\"2\"/>", "GPU capacity");
  if (pg->p->n_points)
    legend_item(&pg->b, &x, "<circle cx=\"9\" r=\"5\" fill=\"" PEAK_COLOR "\"/>", "allocated peak");
}

static const struct run *run_at(const struct page *pg, double x, size_t *r) {
  while (*r + 1 < pg->n_runs && pg->runs[*r + 1].x <= x) ++*r;
  return &pg->runs[*r];
}

/* Bands snap to whole pixels and a pixel takes the phase of the run at its centre, so a
 * run of thousands of phase changes still draws at most one band a pixel. */
static void draw_bands(struct page *pg) {
  struct sbuf *b = &pg->b;
  sb_puts(b, "<g id=\"phases\">\n");
  size_t r = 0;
  int start = 0;
  uint32_t phase = pg->n_runs ? run_at(pg, 0.5, &r)->phase : 0;
  for (int c = 1; c <= PLOT_W && pg->n_runs; c++) {
    uint32_t next = c < PLOT_W ? run_at(pg, c + 0.5, &r)->phase : phase;
    if (c < PLOT_W && next == phase) continue;
    sb_printf(b, "<rect class=\"band\" data-phase=\"");
    put_text(b, vf_phase_name((enum vf_phase)phase));
    sb_printf(b, "\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"/>\n", PLOT_X + start, PLOT_Y,
              c - start, PLOT_H, CYCLE(band_colors, phase));
    start = c;
    phase = next;
  }
  sb_puts(b, "</g>\n");
}

/* Each phase's name above its band, on the first of two rows where it overlaps nothing;
 * names that fit nowhere are left out (the legend has every phase). */
static void draw_band_labels(struct page *pg) {
  double row_end[2] = {-1e9, -1e9};
  for (size_t r = 0; r < pg->n_runs; r++) {
    const char *name = vf_phase_name((enum vf_phase)pg->runs[r].phase);
    double w = text_width(name, 11), x = pg->runs[r].x + pg->runs[r].w / 2 - w / 2;
    if (x < 0) x = 0;
    if (x + w > PLOT_W) x = PLOT_W - w;
    for (int row = 0; row < 2; row++) {
      if (x < row_end[row] + 6) continue;
      put_label(&pg->b, PLOT_X + x, PLOT_Y - 20 + 13 * row, "class=\"band-label\" font-size=\"11\" fill=\"#444\"",
                "%s", name);
      row_end[row] = x + w;
      break;
    }
  }
}

static void draw_grid(struct page *pg) {
  struct sbuf *b = &pg->b;
  int decimals = step_decimals(pg->step);
  int lines = (int)llround(pg->top / GIB / pg->step);
  sb_puts(b, "<g id=\"grid\" stroke=\"#000\" stroke-opacity=\"0.12\">\n");
  for (int k = 0; k <= lines; k++) {
    /* Half-pixel positions keep a one-pixel line sharp. */
    double y = floor(y_of(pg, k * pg->step * GIB)) + 0.5;
    sb_printf(b, "<line x1=\"%d\" x2=\"%d\" y1=\"", PLOT_X, PLOT_X + PLOT_W);
    put_num(b, y);
    sb_puts(b, "\" y2=\"");
    put_num(b, y);
    sb_puts(b, "\"/>\n");
  }
  sb_puts(b, "</g>\n");
  for (int k = 0; k <= lines; k++) {
    sb_printf(b, "<text x=\"%d\" y=\"", PLOT_X - 6);
    put_num(b, y_of(pg, k * pg->step * GIB) + 4);
    sb_puts(b, "\" text-anchor=\"end\" font-size=\"11\">");
    put_fixed(b, k * pg->step, decimals);
    sb_puts(b, "</text>\n");
  }
  sb_printf(b, "<text transform=\"translate(22 %d) rotate(-90)\" text-anchor=\"middle\">GiB</text>\n",
            PLOT_Y + PLOT_H / 2);
  put_label(b, PLOT_X + PLOT_W / 2.0, PLOT_Y + PLOT_H + 24, "text-anchor=\"middle\"",
            "the run, event by event: %zu allocations and frees (short phases widened to stay visible)",
            pg->p->n_points);
  sb_printf(b, "<rect id=\"plot-area\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
               "stroke=\"#888\"/>\n", PLOT_X, PLOT_Y, PLOT_W, PLOT_H);
}

/* Adds a corner unless it repeats the last one; a corner on a level stretch moves the
 * stretch's end instead, so flat parts of a run cost two corners however long they are. */
static void add_corner(struct corner *c, size_t *n, double x, double y) {
  y = round(y * 10) / 10;
  if (*n && c[*n - 1].x == x && c[*n - 1].y == y) return;
  if (*n >= 2 && c[*n - 1].y == y && c[*n - 2].y == y) {
    c[*n - 1].x = x;
    return;
  }
  c[(*n)++] = (struct corner){x, y};
}

/* The series as steps (a value holds until the next event): in each column, the first,
 * lowest, highest and last values in the order they happened. */
static size_t series_corners(const struct page *pg, const struct envelope *env, struct corner *out) {
  size_t n = 0;
  const struct envelope *before = NULL;
  for (int c = 0; c < PLOT_W; c++) {
    const struct envelope *e = &env[c];
    if (!e->used) continue;
    double x = PLOT_X + c + 0.5;
    add_corner(out, &n, x, before ? y_of(pg, (double)before->last) : PLOT_Y + PLOT_H);
    bool low_first = e->lo_at < e->hi_at;
    uint64_t order[] = {e->first, low_first ? e->lo : e->hi, low_first ? e->hi : e->lo, e->last};
    for (size_t k = 0; k < sizeof order / sizeof *order; k++) add_corner(out, &n, x, y_of(pg, (double)order[k]));
    before = e;
  }
  if (before) add_corner(out, &n, out[n - 1].x, PLOT_Y + PLOT_H);
  return n;
}

static void put_corners(struct sbuf *b, const struct corner *c, size_t n) {
  for (size_t i = 0; i < n; i++) {
    put_num(b, c[i].x);
    sb_puts(b, ",");
    put_num(b, c[i].y);
    sb_puts(b, i + 1 < n ? " " : "");
  }
}

/* A series: a line and the area under it. The line leaves out the first and last corners,
 * which take the area down to the axis. */
static int draw_series(struct page *pg, int s, const char *id, const char *color) {
  struct corner *c = malloc((5 * PLOT_W + 2) * sizeof *c);
  if (!c) return VF_ENOMEM;
  size_t n = series_corners(pg, pg->env[s], c);
  if (n > 2) {
    struct sbuf *b = &pg->b;
    sb_printf(b, "<polygon fill=\"%s\" fill-opacity=\"%s\" points=\"", color, s ? "0.16" : "0.22");
    put_corners(b, c, n);
    sb_printf(b, "\"/>\n<polyline id=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\" "
                 "stroke-linejoin=\"round\" points=\"", id, color);
    put_corners(b, c + 1, n - 2);
    sb_puts(b, "\"/>\n");
  }
  free(c);
  return 0;
}

/* Spans the plot and the bar (both are on the one scale), over them, so that what
 * crosses it shows. */
static void draw_capacity(struct page *pg) {
  if (!pg->p->capacity) return;
  struct sbuf *b = &pg->b;
  double y = round(y_of(pg, (double)pg->p->capacity));
  sb_printf(b, "<line id=\"capacity\" x1=\"%d\" x2=\"%d\" y1=\"", PLOT_X, BAR_X + BAR_W);
  put_num(b, y);
  sb_puts(b, "\" y2=\"");
  put_num(b, y);
  sb_puts(b, "\" stroke=\"" CAPACITY_COLOR "\" stroke-width=\"2\"/>\n");
  char size[48];
  format_gib(size, sizeof size, pg->p->capacity);
  const char *gpu = pg->p->gpu && *pg->p->gpu ? pg->p->gpu : NULL;
  put_label(b, PLOT_X + 6, y - 6, "fill=\"" CAPACITY_COLOR "\" " HALO, "GPU capacity %s%s%s%s", size,
            gpu ? " (" : "", gpu ? gpu : "", gpu ? ")" : "");
}

static void draw_peak(struct page *pg) {
  if (!pg->p->n_points) return;
  struct sbuf *b = &pg->b;
  const struct vf_plot_point *pt = &pg->p->points[pg->peak];
  size_t r = 0;
  while (r + 1 < pg->n_runs && pg->runs[r + 1].first <= pg->peak) r++;
  double x = PLOT_X + column_of(&pg->runs[r], pg->peak) + 0.5, y = y_of(pg, (double)pt->allocated);
  sb_puts(b, "<line x1=\"");
  put_num(b, x);
  sb_printf(b, "\" x2=\"%d\" y1=\"", BAR_X);
  put_num(b, y);
  sb_puts(b, "\" y2=\"");
  put_num(b, y);
  sb_puts(b, "\" stroke=\"" PEAK_COLOR "\" stroke-dasharray=\"2 3\"/>\n<circle id=\"peak\" cx=\"");
  put_num(b, x);
  sb_puts(b, "\" cy=\"");
  put_num(b, y);
  sb_puts(b, "\" r=\"5\" fill=\"" PEAK_COLOR "\" stroke=\"#fff\" stroke-width=\"1.5\"/>\n");
  char size[48], text[128];
  format_gib(size, sizeof size, pt->allocated);
  snprintf(text, sizeof text, "allocated peak %s (%s)", size, vf_phase_name((enum vf_phase)pt->phase));
  /* Right of the marker when it fits there, else left of it. */
  bool right = x + 8 + text_width(text, 12) <= PLOT_X + PLOT_W;
  put_label(b, right ? x + 8 : x - 8, y - 9, right ? "id=\"peak-label\" " HALO : "id=\"peak-label\" "
            "text-anchor=\"end\" " HALO, "%s", text);
}

struct part {
  char label[40];
  uint64_t bytes;
};

/* What the estimate's breakdown holds, in the order of the text output. */
static size_t breakdown_parts(const struct vf_estimate *e, struct part *out) {
  size_t n = 0;
  for (int c = 0; c < VF_CAT_RUNTIME; c++) {
    snprintf(out[n].label, sizeof out[n].label, "%s", vf_category_name((enum vf_category)c));
    out[n++].bytes = e->by_category[c];
  }
  out[n++] = (struct part){"allocator slack", e->allocator_slack};
  out[n++] = (struct part){"CUDA, cuBLAS, NCCL", e->by_category[VF_CAT_RUNTIME] + e->context};
  return n;
}

/* Labels sit level with their parts, moved apart just enough not to overlap: upwards from
 * the bottom, then down from the top when that ran past the plot's top. */
static void spread_labels(double *y, size_t n) {
  for (size_t i = 1; i < n; i++)
    if (y[i] > y[i - 1] - LABEL_GAP) y[i] = y[i - 1] - LABEL_GAP;
  if (n && y[n - 1] < PLOT_Y + 4) y[n - 1] = PLOT_Y + 4;
  for (size_t i = n - 1; i-- > 0;)
    if (y[i] < y[i + 1] + LABEL_GAP) y[i] = y[i + 1] + LABEL_GAP;
}

static void draw_breakdown(struct page *pg) {
  if (!pg->p->estimate) return;
  struct sbuf *b = &pg->b;
  struct part parts[VF_CAT_COUNT + 2];
  size_t n = breakdown_parts(pg->p->estimate, parts), shown = 0, index[VF_CAT_COUNT + 2];
  double bottom[VF_CAT_COUNT + 2], top[VF_CAT_COUNT + 2], label_y[VF_CAT_COUNT + 2];
  uint64_t sum = 0;
  for (size_t i = 0; i < n; i++) {
    if (!parts[i].bytes) continue;
    bottom[shown] = y_of(pg, (double)sum);
    sum += parts[i].bytes;
    top[shown] = y_of(pg, (double)sum);
    label_y[shown] = (bottom[shown] + top[shown]) / 2 + 4;
    index[shown++] = i;
  }
  spread_labels(label_y, shown);
  char total[48];
  format_gib(total, sizeof total, pg->p->estimate->device_peak);
  put_label(b, BAR_X, PLOT_Y - 7, "font-weight=\"bold\"", "at the peak: %s", total);
  sb_puts(b, "<g id=\"breakdown\">\n");
  for (size_t k = 0; k < shown; k++) {
    size_t i = index[k];
    sb_printf(b, "<rect class=\"part\" data-part=\"%s\" x=\"%d\" width=\"%d\" y=\"", parts[i].label, BAR_X, BAR_W);
    put_num(b, top[k]);
    sb_puts(b, "\" height=\"");
    put_num(b, bottom[k] - top[k]);
    sb_printf(b, "\" fill=\"%s\"/>\n", CYCLE(part_colors, i));
    char size[48];
    format_gib(size, sizeof size, parts[i].bytes);
    sb_printf(b, "<polyline fill=\"none\" stroke=\"#999\" points=\"%d,", BAR_X + BAR_W);
    put_num(b, (top[k] + bottom[k]) / 2);
    sb_printf(b, " %d,", BAR_X + BAR_W + 6);
    put_num(b, label_y[k] - 4);
    sb_puts(b, "\"/>\n");
    put_label(b, BAR_X + BAR_W + 9, label_y[k], "font-size=\"11\"", "%s %s", parts[i].label, size);
  }
  sb_puts(b, "</g>\n");
}

static void page_free(struct page *pg) {
  free(pg->runs);
  free(pg->env[0]);
  free(pg->env[1]);
}

int vf_plot_svg(const struct vf_plot *p, char **svg, size_t *len) {
  struct page pg = {.p = p};
  int rc = find_runs(&pg);
  if (!rc) rc = build_envelopes(&pg);
  if (rc) {
    page_free(&pg);
    return rc;
  }
  choose_scale(&pg);
  draw_head(&pg);
  draw_legend(&pg);
  draw_bands(&pg);
  draw_band_labels(&pg);
  draw_grid(&pg);
  rc = draw_series(&pg, 1, "reserved", RESERVED_COLOR);
  if (!rc) rc = draw_series(&pg, 0, "allocated", ALLOCATED_COLOR);
  draw_breakdown(&pg);
  draw_capacity(&pg);
  draw_peak(&pg);
  sb_puts(&pg.b, "</svg>\n");
  page_free(&pg);
  *svg = sb_take(&pg.b, len);
  if (!rc && !*svg) rc = VF_ENOMEM;
  if (rc) {
    free(*svg);
    *svg = NULL;
  }
  return rc;
}

/* ---- the file ---- */

static int write_error(struct vf_diag *d, const char *path, const char *what) {
  return diag_at(d, VF_EIO, path, UINT64_MAX, "%s: %s", what, strerror(errno));
}

/* The folder path is in and path's last component, as "DIR/.NAME.vramfit-XXXXXX". */
static char *temp_name(const char *path) {
  const char *slash = strrchr(path, '/');
  struct sbuf b = {0};
  if (slash) sb_add(&b, path, (size_t)(slash - path) + 1);
  sb_printf(&b, ".%s.vramfit-XXXXXX", slash ? slash + 1 : path);
  return sb_take(&b, NULL);
}

static int write_temp(int fd, const char *svg, size_t len) {
  mode_t mask = umask(0);
  umask(mask);
  FILE *f = fdopen(fd, "w");
  if (!f) return close(fd), -1;
  bool ok = fchmod(fd, 0666 & ~mask) == 0 && fwrite(svg, 1, len, f) == len && fflush(f) == 0 && fsync(fd) == 0;
  return fclose(f) == 0 && ok ? 0 : -1;
}

/* An existing path is followed to the file it names, so that a link still leads to the new
 * plot; only a regular file is replaced, never a device, a pipe or a folder. */
static int target_of(const char *path, char **target, struct vf_diag *d) {
  struct stat st;
  *target = NULL;
  if (stat(path, &st) != 0) {
    if (errno == ENOENT) *target = strdup(path);
  } else if (!S_ISREG(st.st_mode)) {
    return diag_at(d, VF_EIO, path, UINT64_MAX, S_ISDIR(st.st_mode) ? "is a directory" : "is not a regular file");
  } else {
    *target = realpath(path, NULL);
  }
  return *target ? 0 : write_error(d, path, "cannot write it");
}

int vf_plot_svg_write(const struct vf_plot *p, const char *path, struct vf_diag *d) {
  char *svg = NULL, *target, *tmp;
  size_t len;
  int rc = target_of(path, &target, d);
  if (rc) return rc;
  rc = (tmp = temp_name(target)) ? vf_plot_svg(p, &svg, &len) : VF_ENOMEM;
  if (rc) {
    diag_at(d, rc, path, UINT64_MAX, "%s", vf_strerror(rc));
  } else {
    int fd = mkstemp(tmp);
    if (fd < 0) rc = write_error(d, path, "cannot create a file next to it");
    else if (write_temp(fd, svg, len)) rc = write_error(d, path, "cannot write it");
    else if (rename(tmp, target)) rc = write_error(d, path, "cannot replace it");
    if (rc && fd >= 0) unlink(tmp);
  }
  free(tmp);
  free(target);
  free(svg);
  return rc;
}
