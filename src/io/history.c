/* The run history store (include/vramfit/history.h): one SQLite database. */
#include <errno.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/diag.h"
#include "base/fileio.h"
#include "vramfit/history.h"

#define BUSY_MS 10000 /* how long a writer waits for another to finish its transaction */
#define SCHEMA_VERSION 2 /* PRAGMA user_version: what a later vramfit migrates from */

struct vf_history {
  sqlite3 *db;
  char path[1024];
  int version; /* the store's schema: 1 kept plans without projects */
};

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS runs ("
    " id INTEGER PRIMARY KEY, started REAL NOT NULL, source TEXT NOT NULL,"
    " command TEXT NOT NULL, setup TEXT, batch INTEGER, outcome TEXT NOT NULL,"
    " exit_code INTEGER, peak_device_bytes INTEGER NOT NULL DEFAULT 0,"
    " gpu TEXT, gpu_uuid TEXT, driver TEXT, seconds REAL);"
    "CREATE INDEX IF NOT EXISTS runs_by_setup ON runs (setup, started);"
    "CREATE TABLE IF NOT EXISTS plans ("
    " id INTEGER PRIMARY KEY, saved REAL NOT NULL, label TEXT NOT NULL, json TEXT NOT NULL,"
    " made_in TEXT, config_project TEXT);";

/* Version 1 kept plans without their projects: they stay, belonging to none. */
static const char *const plan_columns_since_2[] = {"made_in", "config_project"};

int vf_history_dir(char *buf, size_t size) {
  const char *state = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
  int n;
  /* The XDG specification says a relative path is to be ignored. */
  if (state && state[0] == '/') n = snprintf(buf, size, "%s/vramfit", state);
  else if (home && home[0]) n = snprintf(buf, size, "%s/.local/state/vramfit", home);
  else return VF_ENOTFOUND;
  return n > 0 && (size_t)n < size ? 0 : VF_ERANGE;
}

static int db_error(struct vf_history *h, struct vf_diag *d) {
  return diag_at(d, VF_EIO, h->path, UINT64_MAX, "%s", sqlite3_errmsg(h->db));
}

/* mkdir -p, private to the user: commands and setups can say what they are working on. */
static int make_dirs(const char *dir, struct vf_diag *d) {
  char path[1024];
  snprintf(path, sizeof path, "%s", dir);
  for (char *p = path + 1;; p++) {
    bool end = *p == '\0';
    if (*p != '/' && !end) continue;
    *p = '\0';
    if (mkdir(path, 0700) && errno != EEXIST)
      return diag_at(d, VF_EIO, path, UINT64_MAX, "cannot make the folder: %s", strerror(errno));
    if (end) return 0;
    *p = '/';
  }
}

/* Switching a new store to WAL needs a lock SQLite takes without calling the busy handler, so
 * writers that start together on a new store (probe's and watch's, say) meet SQLITE_BUSY
 * there at once: they retry for as long as the busy timeout would have waited. */
static int exec_retrying_busy(sqlite3 *db, const char *sql) {
  int rc, waited = 0;
  while ((rc = sqlite3_exec(db, sql, NULL, NULL, NULL)) == SQLITE_BUSY && waited < BUSY_MS) waited += sqlite3_sleep(10);
  return rc;
}

/* The store's schema version (PRAGMA user_version; 0 for a store without tables yet). */
static int read_version(sqlite3 *db) {
  sqlite3_stmt *st;
  int v = 0;
  if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK) return 0;
  if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  return v;
}

/* Whether table has the column (PRAGMA table_info): a store marked with an older version
 * may have it already (a development build's), and adding it twice fails. */
static bool has_column(sqlite3 *db, const char *table, const char *column) {
  char sql[96];
  sqlite3_stmt *st;
  bool found = false;
  snprintf(sql, sizeof sql, "PRAGMA table_info(%s)", table);
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return false;
  while (!found && sqlite3_step(st) == SQLITE_ROW)
    found = strcmp((const char *)sqlite3_column_text(st, 1), column) == 0;
  sqlite3_finalize(st);
  return found;
}

/* The plans' columns a version-1 store lacks. */
static int migrate_from_1(sqlite3 *db) {
  int rc = SQLITE_OK;
  for (size_t i = 0; rc == SQLITE_OK && i < sizeof plan_columns_since_2 / sizeof *plan_columns_since_2; i++) {
    if (has_column(db, "plans", plan_columns_since_2[i])) continue;
    char sql[96];
    snprintf(sql, sizeof sql, "ALTER TABLE plans ADD COLUMN %s TEXT", plan_columns_since_2[i]);
    rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
  }
  return rc;
}

/* Inside the writer's transaction: the tables a fresh store lacks, the columns an older one
 * lacks, then the version. */
static int make_schema(struct vf_history *h) {
  int was = read_version(h->db);
  int rc = sqlite3_exec(h->db, schema, NULL, NULL, NULL);
  if (rc == SQLITE_OK && was == 1) rc = migrate_from_1(h->db);
  char sql[64];
  snprintf(sql, sizeof sql, "PRAGMA user_version=%d", SCHEMA_VERSION);
  if (rc == SQLITE_OK) rc = sqlite3_exec(h->db, sql, NULL, NULL, NULL);
  return rc;
}

/* A writer brings the store to this version. */
static int prepare(struct vf_history *h, struct vf_diag *d) {
  /* WAL: readers never block the writer, and a crash mid-write leaves the last commit. Its
   * NORMAL sync keeps the database whole on power loss too, at the risk of the last run. */
  if (exec_retrying_busy(h->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL") != SQLITE_OK ||
      sqlite3_exec(h->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
    return db_error(h, d);
  int rc = make_schema(h);
  if (rc == SQLITE_OK) rc = sqlite3_exec(h->db, "COMMIT", NULL, NULL, NULL);
  if (rc == SQLITE_OK) return 0;
  int err = db_error(h, d);
  sqlite3_exec(h->db, "ROLLBACK", NULL, NULL, NULL);
  return err;
}

int vf_history_open(const char *dir, bool create, struct vf_history **out, struct vf_diag *d) {
  *out = NULL;
  struct vf_history *h = calloc(1, sizeof *h);
  if (!h) return VF_ENOMEM;
  int n = snprintf(h->path, sizeof h->path, "%s/" VF_HISTORY_FILE, dir);
  struct stat st;
  int rc = n < 0 || (size_t)n >= sizeof h->path ? diag_at(d, VF_ERANGE, dir, UINT64_MAX, "path too long")
           : !create && stat(h->path, &st) ? VF_ENOTFOUND
           : create ? make_dirs(dir, d) : 0;
  if (!rc && sqlite3_open_v2(h->path, &h->db, SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0),
                             NULL) != SQLITE_OK)
    rc = db_error(h, d);
  if (!rc) sqlite3_busy_timeout(h->db, BUSY_MS);
  if (!rc && create) rc = prepare(h, d);
  if (!rc) h->version = read_version(h->db);
  if (rc) return vf_history_close(h), rc;
  *out = h;
  return 0;
}

void vf_history_close(struct vf_history *h) {
  if (!h) return;
  sqlite3_close(h->db);
  free(h);
}

static int bind_text(sqlite3_stmt *st, int i, const char *v) {
  return v && v[0] ? sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(st, i);
}

static int bind_run(sqlite3_stmt *st, const struct vf_run *r) {
  int rc = sqlite3_bind_double(st, 1, r->when);
  if (!rc) rc = sqlite3_bind_text(st, 2, r->source, -1, SQLITE_TRANSIENT);
  if (!rc) rc = sqlite3_bind_text(st, 3, r->command ? r->command : "", -1, SQLITE_TRANSIENT);
  if (!rc) rc = bind_text(st, 4, r->setup);
  if (!rc) rc = r->batch ? sqlite3_bind_int64(st, 5, (sqlite3_int64)r->batch) : sqlite3_bind_null(st, 5);
  if (!rc) rc = sqlite3_bind_text(st, 6, r->outcome, -1, SQLITE_TRANSIENT);
  if (!rc) rc = r->exit_code >= 0 ? sqlite3_bind_int(st, 7, r->exit_code) : sqlite3_bind_null(st, 7);
  if (!rc) rc = sqlite3_bind_int64(st, 8, (sqlite3_int64)r->peak_device_bytes);
  if (!rc) rc = bind_text(st, 9, r->gpu);
  if (!rc) rc = bind_text(st, 10, r->gpu_uuid);
  if (!rc) rc = bind_text(st, 11, r->driver);
  if (!rc) rc = sqlite3_bind_double(st, 12, r->seconds);
  return rc;
}

static int prepare_statement(struct vf_history *h, const char *sql, sqlite3_stmt **st, struct vf_diag *d) {
  return sqlite3_prepare_v2(h->db, sql, -1, st, NULL) == SQLITE_OK ? 0 : db_error(h, d);
}

/* Steps a write to its end; on its own, it is one transaction. */
static int finish_write(struct vf_history *h, sqlite3_stmt *st, int bound, struct vf_diag *d) {
  int rc = bound == SQLITE_OK && sqlite3_step(st) == SQLITE_DONE ? 0 : db_error(h, d);
  sqlite3_finalize(st);
  return rc;
}

int vf_history_add(struct vf_history *h, const struct vf_run *r, struct vf_diag *d) {
  sqlite3_stmt *st;
  int rc = prepare_statement(h,
                             "INSERT INTO runs (started, source, command, setup, batch, outcome, exit_code,"
                             " peak_device_bytes, gpu, gpu_uuid, driver, seconds)"
                             " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             &st, d);
  return rc ? rc : finish_write(h, st, bind_run(st, r), d);
}

#define RUN_COLUMNS                                                                              \
  "id, started, source, command, setup, batch, outcome, exit_code, peak_device_bytes, gpu,"    \
  " gpu_uuid, driver, seconds"

static char *text_copy(sqlite3_stmt *st, int i) {
  const unsigned char *v = sqlite3_column_text(st, i);
  return v ? strdup((const char *)v) : NULL;
}

static void text_into(sqlite3_stmt *st, int i, char *buf, size_t size) {
  const unsigned char *v = sqlite3_column_text(st, i);
  snprintf(buf, size, "%s", v ? (const char *)v : "");
}

static int64_t int_or(sqlite3_stmt *st, int i, int64_t none) {
  return sqlite3_column_type(st, i) == SQLITE_NULL ? none : sqlite3_column_int64(st, i);
}

void vf_run_cleanup(struct vf_run *r) {
  free(r->command);
  free(r->setup);
  r->command = r->setup = NULL;
}

/* One row of RUN_COLUMNS. VF_ENOMEM when a string cannot be copied. */
static int read_run(sqlite3_stmt *st, struct vf_run *r) {
  memset(r, 0, sizeof *r);
  r->id = sqlite3_column_int64(st, 0);
  r->when = sqlite3_column_double(st, 1);
  text_into(st, 2, r->source, sizeof r->source);
  r->command = text_copy(st, 3);
  r->setup = text_copy(st, 4);
  int64_t batch = int_or(st, 5, 0), peak = int_or(st, 8, 0);
  r->batch = batch > 0 ? (uint64_t)batch : 0;
  text_into(st, 6, r->outcome, sizeof r->outcome);
  r->exit_code = (int)int_or(st, 7, -1);
  r->peak_device_bytes = peak > 0 ? (uint64_t)peak : 0;
  text_into(st, 9, r->gpu, sizeof r->gpu);
  text_into(st, 10, r->gpu_uuid, sizeof r->gpu_uuid);
  text_into(st, 11, r->driver, sizeof r->driver);
  r->seconds = sqlite3_column_double(st, 12);
  if (r->command && (r->setup || sqlite3_column_type(st, 4) == SQLITE_NULL)) return 0;
  vf_run_cleanup(r);
  return VF_ENOMEM;
}

void vf_history_runs_free(struct vf_run *runs, size_t n) {
  for (size_t i = 0; runs && i < n; i++) vf_run_cleanup(&runs[i]);
  free(runs);
}

static int step_error(struct vf_history *h, int rc, struct vf_diag *d) {
  return rc == SQLITE_DONE ? 0 : rc == SQLITE_ROW ? VF_ENOMEM : db_error(h, d);
}

int vf_history_list(struct vf_history *h, size_t limit, struct vf_run **out, size_t *n,
                    struct vf_diag *d) {
  *out = NULL;
  *n = 0;
  sqlite3_stmt *st;
  int rc = prepare_statement(h, "SELECT * FROM (SELECT " RUN_COLUMNS " FROM runs ORDER BY id DESC LIMIT ?)"
                                " ORDER BY id", &st, d);
  if (rc) return rc;
  sqlite3_bind_int64(st, 1, limit ? (sqlite3_int64)limit : -1);
  size_t cap = 0;
  int step;
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    if (*n == cap) {
      size_t grown = cap ? cap * 2 : 64;
      struct vf_run *more = realloc(*out, grown * sizeof *more);
      if (!more) break;
      *out = more;
      cap = grown;
    }
    if (read_run(st, &(*out)[*n])) break;
    (*n)++;
  }
  rc = step_error(h, step, d);
  sqlite3_finalize(st);
  if (rc) {
    vf_history_runs_free(*out, *n);
    *out = NULL;
    *n = 0;
  }
  return rc;
}

int vf_history_measured(struct vf_history *h, const char *setup, struct vf_run *out,
                        struct vf_diag *d) {
  sqlite3_stmt *st;
  int rc = prepare_statement(h, "SELECT " RUN_COLUMNS " FROM runs WHERE setup = ? AND peak_device_bytes > 0"
                                " AND outcome IN ('ok', 'timeout') ORDER BY started DESC, id DESC LIMIT 1",
                             &st, d);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, setup, -1, SQLITE_TRANSIENT);
  int step = sqlite3_step(st);
  rc = step == SQLITE_ROW ? read_run(st, out) : step == SQLITE_DONE ? VF_ENOTFOUND : db_error(h, d);
  sqlite3_finalize(st);
  return rc;
}

static int copy_out(const char *s, char *buf, size_t size) {
  int n = snprintf(buf, size, "%s", s);
  return n >= 0 && (size_t)n < size ? 0 : VF_ERANGE;
}

/* Whether dir holds a .git: a folder, or the file a git worktree has instead. */
static bool work_tree_root(const char *dir) {
  char at[PATH_MAX + 8];
  struct stat st;
  snprintf(at, sizeof at, "%s/.git", strcmp(dir, "/") ? dir : "");
  return stat(at, &st) == 0;
}

int vf_history_project(const char *path, char *buf, size_t size) {
  char real[PATH_MAX], dir[PATH_MAX], at[PATH_MAX];
  struct stat st;
  if (!realpath(path, real) || stat(real, &st)) return VF_EIO;
  if (S_ISDIR(st.st_mode)) snprintf(dir, sizeof dir, "%s", real);
  else path_folder(real, dir, sizeof dir);
  for (snprintf(at, sizeof at, "%s", dir); !work_tree_root(at);) {
    if (strcmp(at, "/") == 0) return copy_out(dir, buf, size);
    path_folder(at, real, sizeof real);
    snprintf(at, sizeof at, "%s", real);
  }
  return copy_out(at, buf, size);
}

int vf_history_save_plan(struct vf_history *h, const char *label, const char *json, const char *made_in,
                         const char *config, struct vf_diag *d) {
  sqlite3_stmt *st;
  int rc = prepare_statement(h, "INSERT INTO plans (saved, label, json, made_in, config_project)"
                                " VALUES (?, ?, ?, ?, ?)", &st, d);
  if (rc) return rc;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  int bound = sqlite3_bind_double(st, 1, (double)now.tv_sec + (double)now.tv_nsec / 1e9);
  if (bound == SQLITE_OK) bound = sqlite3_bind_text(st, 2, label, -1, SQLITE_TRANSIENT);
  if (bound == SQLITE_OK) bound = sqlite3_bind_text(st, 3, json, -1, SQLITE_TRANSIENT);
  if (bound == SQLITE_OK) bound = bind_text(st, 4, made_in);
  if (bound == SQLITE_OK) bound = bind_text(st, 5, config);
  return finish_write(h, st, bound, d);
}

static int read_plan(sqlite3_stmt *st, char **json, char **label, double *when) {
  *when = sqlite3_column_double(st, 0);
  *label = text_copy(st, 1);
  *json = text_copy(st, 2);
  return *label && *json ? 0 : VF_ENOMEM;
}

int vf_history_last_plan(struct vf_history *h, const char *project, char **json, char **label,
                         double *when, struct vf_diag *d) {
  *json = *label = NULL;
  if (h->version < 2) return VF_ENOTFOUND;
  sqlite3_stmt *st;
  int rc = prepare_statement(h, "SELECT saved, label, json FROM plans WHERE made_in = ?1 OR config_project = ?1"
                                " ORDER BY id DESC LIMIT 1", &st, d);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, project, -1, SQLITE_TRANSIENT);
  int step = sqlite3_step(st);
  rc = step == SQLITE_ROW ? read_plan(st, json, label, when) : step == SQLITE_DONE ? VF_ENOTFOUND : db_error(h, d);
  sqlite3_finalize(st);
  if (rc) {
    free(*json);
    free(*label);
    *json = *label = NULL;
  }
  return rc;
}
