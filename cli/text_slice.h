/* text_slice.h: parsing `--text [NAME=]FILE` (evidence on llama.cpp, sensitivity). */
#ifndef TM_CLI_TEXT_SLICE_H
#define TM_CLI_TEXT_SLICE_H

#include "cli.h"
#include "tensormorph/evidence_llm.h"

/* Parse one --text value S into T (t->path points into S, t->name = *name_out). A bare FILE is the
** slice named after its base name without the extension ("eval/wiki.txt" -> "wiki"); NAME=FILE
** names it, unless S itself names an existing file. *name_out is malloc'd (the caller frees it).
** Returns 0, or cli_usage_error's exit code for an empty name or path. */
int cli_parse_text_slice(const cli_cmd *cmd, const char *s, tm_evidence_llm_text *t, char **name_out);

#endif
