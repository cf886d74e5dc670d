/* The timeline's SVG writer (src/io/plot_svg.c) on synthetic runs: well-formed XML (libxml2)
 * with the phase bands, the peak and the capacity line where the data puts them, the same
 * bytes every time, small for long runs; and, rendered by rsvg-convert (librsvg2-bin, which
 * must be installed: `make deps`) and decoded with libpng, pixels of the right colours where
 * the document says the peak, the line, the bands and the bar are. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <libxml/parser.h>
#include <libxml/xpath.h>
#include <libxml/xpathInternals.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "tmpdir.h"
#include "vramfit.h"

#define GiB 1073741824ull

static const char *const phases_in_order[] = {"load", "forward", "loss", "backward", "optimizer",
                                              "forward", "loss", "backward"};

/* ---- a synthetic run ---- */

struct run_data {
  struct vf_plot_point *pts;
  size_t n;
  struct vf_estimate e;
  struct vf_plot plot;
};

static void push(struct run_data *r, enum vf_phase phase, double gib) {
  uint64_t bytes = (uint64_t)(gib * (double)GiB);
  r->pts[r->n++] = (struct vf_plot_point){bytes, bytes + GiB, (uint32_t)phase};
}

/* Two steps like the estimator's: a load, then forward, loss, backward, optimizer, forward,
 * loss, backward, with phases of very different lengths (the loss: 5 events of 1,310). The
 * allocated peak, 14 GiB, is the 10th event of the second backward; the GPU has 16 GiB. */
static struct run_data *synthetic_run(const char *title, const char *gpu) {
  struct run_data *r = calloc(1, sizeof *r);
  r->pts = calloc(2000, sizeof *r->pts);
  assert_non_null(r->pts);
  for (int i = 0; i < 100; i++) push(r, VF_PHASE_LOAD, 4.0 * i / 99);
  for (int step = 0; step < 2; step++) {
    for (int i = 0; i < 300; i++) push(r, VF_PHASE_FORWARD, 4 + 6.0 * i / 299 + (i % 2) * 0.1);
    for (int i = 0; i < 5; i++) push(r, VF_PHASE_LOSS, 10 + i * 0.5);
    for (int i = 0; i < 300; i++) push(r, VF_PHASE_BACKWARD, step && i == 9 ? 14 : 12 - 6.0 * i / 299);
    if (!step)
      for (int i = 0; i < 50; i++) push(r, VF_PHASE_OPTIMIZER, 6 + 2.0 * i / 49);
  }
  r->e.allocated_peak = 14 * GiB;
  r->e.peak_phase = VF_PHASE_BACKWARD;
  uint64_t parts[] = {4, 2, 2, 5, 1};
  for (int c = 0; c < 5; c++) r->e.by_category[c] = parts[c] * GiB;
  r->e.allocator_slack = 3 * GiB / 2;
  r->e.context = GiB / 2;
  r->e.device_peak = 16 * GiB;
  r->plot = (struct vf_plot){.title = title, .subtitle = "hf, bf16 weights, full, adamw", .points = r->pts,
                             .n_points = r->n, .estimate = &r->e, .capacity = 16 * GiB, .gpu = gpu};
  return r;
}

static void free_run(struct run_data *r) {
  free(r->pts);
  free(r);
}

static char *render(const struct vf_plot *p, size_t *len) {
  char *svg = NULL;
  assert_int_equal(vf_plot_svg(p, &svg, len), 0);
  assert_non_null(svg);
  assert_int_equal(strlen(svg), *len);
  return svg;
}

/* ---- reading the document back ---- */

/* A drawn plot, parsed. */
struct doc {
  char *svg;
  size_t len;
  xmlDocPtr xml;
  xmlXPathContextPtr xpath;
};

/* Draws p and parses it, refusing anything but well-formed XML whose root is an SVG element. */
static void draw(struct doc *d, const struct vf_plot *p) {
  d->svg = render(p, &d->len);
  d->xml = xmlReadMemory(d->svg, (int)d->len, "plot.svg", NULL, XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
  assert_non_null(d->xml);
  xmlNodePtr root = xmlDocGetRootElement(d->xml);
  assert_string_equal((const char *)root->name, "svg");
  assert_string_equal((const char *)root->ns->href, "http://www.w3.org/2000/svg");
  d->xpath = xmlXPathNewContext(d->xml);
  xmlXPathRegisterNs(d->xpath, (const xmlChar *)"s", (const xmlChar *)"http://www.w3.org/2000/svg");
}

static void undraw(struct doc *d) {
  xmlXPathFreeContext(d->xpath);
  xmlFreeDoc(d->xml);
  free(d->svg);
}

/* The nodes an XPath expression selects; free with xmlXPathFreeObject. */
static xmlXPathObjectPtr select_all(const struct doc *d, const char *expr) {
  xmlXPathObjectPtr o = xmlXPathEvalExpression((const xmlChar *)expr, d->xpath);
  assert_non_null(o);
  assert_int_equal(o->type, XPATH_NODESET);
  return o;
}

static int count(const struct doc *d, const char *expr) {
  xmlXPathObjectPtr o = select_all(d, expr);
  int n = o->nodesetval ? o->nodesetval->nodeNr : 0;
  xmlXPathFreeObject(o);
  return n;
}

static xmlNodePtr the(const struct doc *d, const char *expr) {
  xmlXPathObjectPtr o = select_all(d, expr);
  if (!o->nodesetval || o->nodesetval->nodeNr != 1) fail_msg("%s: not exactly one element", expr);
  xmlNodePtr n = o->nodesetval->nodeTab[0];
  xmlXPathFreeObject(o);
  return n;
}

static double num(xmlNodePtr n, const char *attr) {
  xmlChar *v = xmlGetProp(n, (const xmlChar *)attr);
  if (!v) fail_msg("<%s> has no %s", (const char *)n->name, attr);
  char *end;
  double x = strtod((const char *)v, &end);
  assert_true(*end == 0 && end != (char *)v);
  xmlFree(v);
  return x;
}

/* An attribute or the text inside, copied into buf. */
static const char *text_of(xmlNodePtr n, const char *attr, char *buf, size_t size) {
  xmlChar *v = attr ? xmlGetProp(n, (const xmlChar *)attr) : xmlNodeGetContent(n);
  assert_non_null(v);
  snprintf(buf, size, "%s", (const char *)v);
  xmlFree(v);
  return buf;
}

struct rect {
  double x, y, w, h;
};

static struct rect rect_of(xmlNodePtr n) {
  return (struct rect){num(n, "x"), num(n, "y"), num(n, "width"), num(n, "height")};
}

/* ---- the document ---- */

static void bands_follow_the_phases(void **state) {
  (void)state;
  struct run_data *r = synthetic_run("llama", "gpu");
  struct doc d;
  draw(&d, &r->plot);
  struct rect area = rect_of(the(&d, "//s:rect[@id='plot-area']"));
  xmlXPathObjectPtr bands = select_all(&d, "//s:rect[@class='band']");
  size_t n = sizeof phases_in_order / sizeof *phases_in_order;
  assert_int_equal(bands->nodesetval->nodeNr, (int)n);
  double x = area.x;
  for (size_t i = 0; i < n; i++) {
    char phase[32];
    xmlNodePtr b = bands->nodesetval->nodeTab[i];
    assert_string_equal(text_of(b, "data-phase", phase, sizeof phase), phases_in_order[i]);
    struct rect band = rect_of(b);
    /* Side by side, covering the plot; even the 5-event loss is wide enough to see. */
    assert_true(band.x == x && band.y == area.y && band.h == area.h);
    assert_true(band.w >= 18);
    x += band.w;
  }
  assert_true(x == area.x + area.w);
  xmlXPathFreeObject(bands);
  /* Every band is named above the plot. */
  assert_int_equal(count(&d, "//s:text[@class='band-label']"), (int)n);
  undraw(&d);
  free_run(r);
}

/* The marker sits on the 14 GiB event in the second backward, 14/16 of the capacity line's
 * height, and the bar's allocated part (the first five) ends level with it. */
static void peak_capacity_and_breakdown_where_the_data_says(void **state) {
  (void)state;
  struct run_data *r = synthetic_run("llama", "h100 <&> \"80\"");
  struct doc d;
  draw(&d, &r->plot);
  struct rect area = rect_of(the(&d, "//s:rect[@id='plot-area']"));
  double bottom = area.y + area.h;
  xmlNodePtr peak = the(&d, "//s:circle[@id='peak']");
  struct rect backward = rect_of(the(&d, "(//s:rect[@class='band'])[8]"));
  double cx = num(peak, "cx"), cy = num(peak, "cy");
  assert_true(cx >= backward.x && cx <= backward.x + 20); /* the 10th of 300 events */
  xmlNodePtr cap = the(&d, "//s:line[@id='capacity']");
  double cap_y = num(cap, "y1");
  assert_true(num(cap, "y2") == cap_y && num(cap, "x1") == area.x && num(cap, "x2") > area.x + area.w);
  assert_true(fabs((bottom - cy) - (bottom - cap_y) * 14 / 16) < 1.0);
  char text[200];
  assert_string_equal(text_of(the(&d, "//s:text[@id='peak-label']"), NULL, text, sizeof text),
                      "allocated peak 14.00 GiB (backward)");
  assert_non_null(strstr(d.svg, "GPU capacity 16.00 GiB (h100 &lt;&amp;&gt; &quot;80&quot;)"));

  static const char *const parts[] = {"weights", "gradients", "optimizer", "activations", "temporaries",
                                      "allocator slack", "CUDA, cuBLAS, NCCL"};
  static const double gib[] = {4, 2, 2, 5, 1, 1.5, 0.5};
  xmlXPathObjectPtr bar = select_all(&d, "//s:rect[@class='part']");
  assert_int_equal(bar->nodesetval->nodeNr, 7);
  double top = bottom;
  for (int i = 0; i < 7; i++) {
    struct rect part = rect_of(bar->nodesetval->nodeTab[i]);
    assert_string_equal(text_of(bar->nodesetval->nodeTab[i], "data-part", text, sizeof text), parts[i]);
    assert_true(fabs(part.y + part.h - top) < 0.11);               /* stacked */
    assert_true(fabs(part.h - (bottom - cap_y) * gib[i] / 16) < 0.6); /* to scale */
    top = part.y;
    if (i == 4) assert_true(fabs(top - cy) < 0.6);
  }
  xmlXPathFreeObject(bar);
  undraw(&d);
  free_run(r);
}

/* Titles are the user's bytes (a model's folder name): markup and invalid UTF-8 must not
 * break the document. */
static void text_is_escaped(void **state) {
  (void)state;
  struct run_data *r = synthetic_run("<b>a&b</b> \"q\" 'x' \xff\xfe bad \xc3\x28 and \xe2\x82\xac", NULL);
  r->plot.subtitle = "tab\there \x01 control";
  struct doc d;
  draw(&d, &r->plot);
  char text[200];
  assert_string_equal(text_of(the(&d, "/s:svg/s:title"), NULL, text, sizeof text),
                      "<b>a&b</b> \"q\" 'x' \xef\xbf\xbd\xef\xbf\xbd bad \xef\xbf\xbd( and \xe2\x82\xac");
  assert_null(strstr(d.svg, "\x01"));
  /* No GPU name: the capacity alone. */
  assert_non_null(strstr(d.svg, ">GPU capacity 16.00 GiB</text>"));
  undraw(&d);
  free_run(r);
}

static void same_plot_same_bytes(void **state) {
  (void)state;
  struct run_data *r = synthetic_run("llama", "gpu");
  size_t a_len, b_len;
  char *a = render(&r->plot, &a_len), *b = render(&r->plot, &b_len);
  assert_int_equal(a_len, b_len);
  assert_memory_equal(a, b, a_len);
  free(a);
  free(b);
  free_run(r);
}

/* Without a GPU there is no line; without events, no peak; neither breaks the document. */
static void no_gpu_no_events(void **state) {
  (void)state;
  struct run_data *r = synthetic_run("llama", "gpu");
  r->plot.capacity = 0;
  struct doc d;
  draw(&d, &r->plot);
  assert_int_equal(count(&d, "//s:line[@id='capacity']"), 0);
  assert_int_equal(count(&d, "//s:circle[@id='peak']"), 1);
  undraw(&d);
  r->plot.n_points = 0;
  r->plot.estimate = NULL;
  draw(&d, &r->plot);
  assert_int_equal(count(&d, "//s:circle[@id='peak']") + count(&d, "//s:rect[@class='band']") +
                       count(&d, "//s:rect[@class='part']"),
                   0);
  undraw(&d);
  free_run(r);
}

static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

/* A million noisy events, once in one phase and once changing phase every 3 events: the
 * document stays under 300 KB, the bands under one a pixel, and the exact peak is kept. */
static void long_runs_stay_small_and_keep_the_peak(void **state) {
  (void)state;
  enum { N = 1000000, PEAK_AT = 777777 };
  struct run_data *r = synthetic_run("big", "gpu");
  free(r->pts);
  r->pts = calloc(N, sizeof *r->pts);
  assert_non_null(r->pts);
  for (int alternate = 0; alternate < 2; alternate++) {
    uint64_t seed = 42;
    for (size_t i = 0; i < N; i++) {
      uint64_t a = 2 * GiB + lcg(&seed) % (8 * GiB);
      r->pts[i] = (struct vf_plot_point){a, a + lcg(&seed) % GiB,
                                         alternate ? (uint32_t)(i / 3 % VF_PHASE_COUNT) : VF_PHASE_FORWARD};
    }
    r->pts[PEAK_AT].allocated = 12 * GiB + 12345678;
    r->plot.points = r->pts;
    r->plot.n_points = N;
    struct doc d;
    draw(&d, &r->plot);
    assert_true(d.len < 300000);
    struct rect area = rect_of(the(&d, "//s:rect[@id='plot-area']"));
    assert_true(count(&d, "//s:rect[@class='band']") <= (int)area.w);
    char text[200], want[200];
    snprintf(want, sizeof want, "allocated peak 12.01 GiB (%s)", vf_phase_name(r->pts[PEAK_AT].phase));
    assert_string_equal(text_of(the(&d, "//s:text[@id='peak-label']"), NULL, text, sizeof text), want);
    if (!alternate)
      assert_true(num(the(&d, "//s:circle[@id='peak']"), "cx") == area.x + floor((PEAK_AT + 0.5) / N * area.w) + 0.5);
    undraw(&d);
  }
  free_run(r);
}

/* ---- the rendering ---- */

struct image {
  png_image png;
  unsigned char *rgb;
};

static void rasterize(const char *svg_path, const char *png_path, struct image *img) {
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "rsvg-convert -o '%s' '%s' 2>&1", png_path, svg_path);
  int status = system(cmd);
  if (!WIFEXITED(status) || WEXITSTATUS(status) == 127)
    fail_msg("rsvg-convert did not run: install librsvg2-bin ('make deps' does)");
  assert_int_equal(WEXITSTATUS(status), 0);
  memset(&img->png, 0, sizeof img->png);
  img->png.version = PNG_IMAGE_VERSION;
  assert_true(png_image_begin_read_from_file(&img->png, png_path));
  img->png.format = PNG_FORMAT_RGB;
  img->rgb = malloc(PNG_IMAGE_SIZE(img->png));
  assert_non_null(img->rgb);
  assert_true(png_image_finish_read(&img->png, NULL, img->rgb, 0, NULL));
}

static unsigned long parse_color(const char *hex) {
  assert_true(hex[0] == '#' && strlen(hex) == 7);
  return strtoul(hex + 1, NULL, 16);
}

/* Whether the pixel at (x, y) is within 12 of color on every channel. */
static bool pixel_is(const struct image *img, double x, double y, unsigned long color) {
  int px = (int)floor(x), py = (int)floor(y);
  if (px < 0 || py < 0 || px >= (int)img->png.width || py >= (int)img->png.height) return false;
  const unsigned char *p = img->rgb + 3 * ((size_t)py * img->png.width + (size_t)px);
  for (int ch = 0; ch < 3; ch++)
    if (abs((int)p[ch] - (int)((color >> (16 - 8 * ch)) & 0xff)) > 12) return false;
  return true;
}

static void rendered_pixels_show_it(void **state) {
  (void)state;
  struct run_data *r = synthetic_run("llama-3.1-8b: GPU memory over the run", "h100");
  char dir[512], svg_path[600], png_path[600];
  vf_test_tmpdir("plot_svg", dir, sizeof dir);
  snprintf(svg_path, sizeof svg_path, "%s/plot.svg", dir);
  snprintf(png_path, sizeof png_path, "%s/plot.png", dir);
  struct vf_diag diag;
  assert_int_equal(vf_plot_svg_write(&r->plot, svg_path, &diag), 0);
  struct image img;
  rasterize(svg_path, png_path, &img);

  struct doc d;
  draw(&d, &r->plot);
  xmlNodePtr root = xmlDocGetRootElement(d.xml);
  assert_int_equal(img.png.width, (unsigned)num(root, "width"));
  assert_int_equal(img.png.height, (unsigned)num(root, "height"));

  /* The marker's colour at its centre. */
  xmlNodePtr peak = the(&d, "//s:circle[@id='peak']");
  char color[16];
  assert_true(pixel_is(&img, num(peak, "cx"), num(peak, "cy"), parse_color(text_of(peak, "fill", color, sizeof color))));

  /* The capacity line's colour all the way across the plot and the bar. */
  xmlNodePtr cap = the(&d, "//s:line[@id='capacity']");
  unsigned long red = parse_color(text_of(cap, "stroke", color, sizeof color));
  int x1 = (int)num(cap, "x1"), x2 = (int)num(cap, "x2"), red_columns = 0;
  for (int x = x1; x < x2; x++) red_columns += pixel_is(&img, x + 0.5, num(cap, "y1") + 0.5, red);
  assert_true(red_columns >= (x2 - x1) * 99 / 100);

  /* Each band's colour at the top of the plot, above the data. */
  xmlXPathObjectPtr bands = select_all(&d, "//s:rect[@class='band']");
  for (int i = 0; i < bands->nodesetval->nodeNr; i++) {
    xmlNodePtr b = bands->nodesetval->nodeTab[i];
    struct rect band = rect_of(b);
    assert_true(pixel_is(&img, band.x + band.w / 2, band.y + 4, parse_color(text_of(b, "fill", color, sizeof color))));
  }
  xmlXPathFreeObject(bands);

  /* The bar's weights, and a page that is not blank: a fifth of it drawn on. */
  xmlNodePtr weights = the(&d, "//s:rect[@data-part='weights']");
  struct rect w = rect_of(weights);
  assert_true(pixel_is(&img, w.x + w.w / 2, w.y + w.h / 2, parse_color(text_of(weights, "fill", color, sizeof color))));
  size_t drawn = 0, pixels = (size_t)img.png.width * img.png.height;
  for (size_t i = 0; i < pixels; i++) drawn += img.rgb[3 * i] + img.rgb[3 * i + 1] + img.rgb[3 * i + 2] < 3 * 250;
  assert_true(drawn > pixels / 5);

  undraw(&d);
  free(img.rgb);
  free_run(r);
}

/* A path that cannot be written: the error names it, and nothing is left behind. */
static void unwritable_path_leaves_nothing(void **state) {
  (void)state;
  struct run_data *r = synthetic_run("llama", "gpu");
  char dir[512], path[600];
  vf_test_tmpdir("plot_svg_bad", dir, sizeof dir);
  snprintf(path, sizeof path, "%s/missing/plot.svg", dir);
  struct vf_diag diag;
  vf_diag_clear(&diag);
  assert_int_equal(vf_plot_svg_write(&r->plot, path, &diag), VF_EIO);
  assert_string_equal(diag.file, path);
  /* A folder in the way is refused, and nothing is made beside it. */
  snprintf(path, sizeof path, "%s/taken", dir);
  assert_int_equal(mkdir(path, 0755), 0);
  assert_int_equal(vf_plot_svg_write(&r->plot, path, &diag), VF_EIO);
  assert_string_equal(diag.msg, "is a directory");
  char cmd[700];
  snprintf(cmd, sizeof cmd, "test \"$(ls -A '%s')\" = taken", dir);
  assert_int_equal(system(cmd), 0);
  free_run(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bands_follow_the_phases),
      cmocka_unit_test(peak_capacity_and_breakdown_where_the_data_says),
      cmocka_unit_test(text_is_escaped),
      cmocka_unit_test(same_plot_same_bytes),
      cmocka_unit_test(no_gpu_no_events),
      cmocka_unit_test(long_runs_stay_small_and_keep_the_peak),
      cmocka_unit_test(rendered_pixels_show_it),
      cmocka_unit_test(unwritable_path_leaves_nothing),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  xmlCleanupParser();
  return rc;
}
