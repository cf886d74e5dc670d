/* Shared by apply and plan --write (which applies a plan to the configs it read): the
 * result of vf_apply_prepare and vf_apply_commit shown. */
#ifndef VF_CLI_APPLY_VIEW_H
#define VF_CLI_APPLY_VIEW_H

#include "cli/cli.h"

/* {"dry_run", "files": [{"file", "target", "format", "backup", "changes": [...], "diff"}], "notes"}. */
json_t *apply_view_json(const struct vf_apply *r, bool dry_run);
/* The unified diffs on stdout, the notes on stderr. */
void apply_view_diffs(const struct vf_apply *r);
/* What was written, one line per value, on stderr (a dry run prints the diff only). */
void apply_view_summary(const struct vf_apply *r);

#endif
