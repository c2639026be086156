/* heatmap_text.h: text and decorations of the heatmap PNG (cmd_heatmap.c): a 5x7 bitmap font
** (heatmap_font.c) drawn at an integer scale into an RGB buffer. */
#ifndef TM_CLI_HEATMAP_TEXT_H
#define TM_CLI_HEATMAP_TEXT_H

#include <stdint.h>

/* The 7 rows of 5 bits (high bit leftmost) of character c, or NULL (drawn blank). */
const unsigned char *cli_glyph(char c);
/* Pixels across of s at scale k (6k per character, the last column of space left out). */
int cli_text_width(const char *s, int k);
/* Draw s with its top-left at (x, y) in rgb (w x h, 3 bytes a pixel), clipped to the buffer. */
void cli_text_draw(uint8_t *rgb, int w, int h, int x, int y, const char *s, int k, const uint8_t colour[3]);

#endif
