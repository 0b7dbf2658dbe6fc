/* errfile.h -- the JSON error file a failing worker writes
 * (TORCHELASTIC_ERROR_FILE), read with cJSON. */
#ifndef CDRUN_ERRFILE_H
#define CDRUN_ERRFILE_H

#include <stddef.h>

/* What an error file says.  Strings are heap copies (errfile_free). */
struct errfile_info {
  char *message;      /* "ValueError: boom"; never NULL after success */
  char *traceback;    /* extraInfo.py_callstack, or NULL */
  double timestamp;   /* epoch seconds, 0 when absent */
  int error_code;     /* message.errorCode when present, else 0 */
};

/* Reads and parses path.  Both torchrun formats are accepted:
 *   {"message": {"message": "...", "extraInfo": {"py_callstack": "...",
 *                "timestamp": "1714000000"}}}
 *   {"message": "...", "timestamp": 1714000000}
 * Returns 0 and fills *out; -ENOENT when the file does not exist; -EINVAL
 * (with a reason in err) when it is not such JSON; another negative errno
 * when it cannot be read.  Files over 4 MiB are -EFBIG. */
int errfile_read(const char *path, struct errfile_info *out,
                 char *err, size_t errlen);

void errfile_free(struct errfile_info *e);

#endif
