/* peer_text.h -- bytes a peer sent, made safe to print.  The one escaper
 * behind every sink that may show them: rdzvd's log (log_file.c), its
 * --status table and JSON (status_client.c), cdrun's messages (say.c)
 * and failure summary (summary.c).  Escaping at the sink means no caller
 * can forget it.
 *
 * Printable ASCII and well-formed UTF-8 pass unchanged; "\n", "\r", "\t"
 * become those two-character escapes, a backslash "\\", and every other
 * byte that a terminal could act on (control bytes, DEL, C1 controls,
 * malformed UTF-8) "\xNN".  One line in is one line out: a peer can
 * neither forge a log line nor send a terminal escape sequence. */
#ifndef PEER_TEXT_H
#define PEER_TEXT_H

#include <stddef.h>
#include <stdio.h>

/* Multi-line text (a worker's traceback): "\n" and "\t" pass, and so
 * does a backslash (its escape would garble a traceback's paths). */
#define PEER_TEXT_LINES 1u

/* Escapes src[0..srclen) into dst (dstlen bytes; NUL-terminated when
 * dstlen > 0).  What does not fit is dropped, never half an escape.
 * Returns the length written. */
size_t peer_text_escape(char *dst, size_t dstlen, const char *src,
                        size_t srclen, unsigned flags);

/* The same, written to f. */
void peer_text_fwrite(const char *s, size_t len, unsigned flags, FILE *f);

/* The same for a C string. */
void peer_text_fputs(const char *s, unsigned flags, FILE *f);

/* JSON text (cJSON's output): the bytes that JSON printers leave raw and
 * a terminal could act on (control bytes, DEL, C1 controls, malformed
 * UTF-8) become "\u00XX", so the text stays JSON. */
void peer_text_fputs_json(const char *s, FILE *f);

#endif
