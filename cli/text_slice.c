/* text_slice.c: the --text [NAME=]FILE argument of `evidence` (LLM) and `sensitivity`: one
** evaluation text and the slice name it is reported under. */
#include "text_slice.h"

#include <string.h>
#include <sys/stat.h>

int cli_parse_text_slice(const cli_cmd *cmd, const char *s, tm_evidence_llm_text *t, char **name_out) {
    const char *eq = strchr(s, '=');
    struct stat st;
    if (eq && eq > s && stat(s, &st) != 0) { /* NAME=FILE, unless a file is literally called so */
        *name_out = strndup(s, (size_t)(eq - s));
        t->path = eq + 1;
    } else {
        const char *base = strrchr(s, '/');
        base = base ? base + 1 : s;
        const char *dot = strrchr(base, '.');
        *name_out = strndup(base, dot && dot > base ? (size_t)(dot - base) : strlen(base));
        t->path = s;
    }
    t->name = *name_out;
    if (!*name_out || !**name_out || !*t->path)
        return cli_usage_error(cmd, "--text must be FILE or NAME=FILE, got '%s'", s);
    return 0;
}
