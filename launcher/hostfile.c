/* hostfile.c -- the head node's host list: --hostfile (mpirun/DeepSpeed
 * style) or --hosts (see hostfile.h). */
#include "hostfile.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "num.h"

#define HOSTFILE_MAX_BYTES (1 << 20)

static bool valid_host(const char *s, size_t n)
{
  size_t i;

  if (n == 0 || n >= sizeof ((struct hostfile_host *)0)->name || s[0] == '-')
    return false;
  for (i = 0; i < n; i++)
    if (!isalnum((unsigned char)s[i]) && !strchr("._-@:[]%", s[i]))
      return false;
  return true;
}

static int add_host(struct hostfile_host **hosts, int *n, const char *name,
                    size_t len, int slots)
{
  struct hostfile_host *h;

  if (*n >= HOSTFILE_MAX_HOSTS)
    return -E2BIG;
  h = realloc(*hosts, (size_t)(*n + 1) * sizeof *h);
  if (!h)
    return -ENOMEM;
  *hosts = h;
  memcpy(h[*n].name, name, len);
  h[*n].name[len] = '\0';
  h[*n].slots = slots;
  (*n)++;
  return 0;
}

int hostfile_parse(const char *text, int is_list, struct hostfile_host **out,
                   char *err, size_t errlen)
{
  struct hostfile_host *hosts = NULL;
  const char *p = text, *end, *tok, *tend;
  int n = 0, line = 0, rc = 0;
  char sep = is_list ? ',' : '\n';

  *out = NULL;
  while (*p) {
    long slots = 0;

    end = p + strcspn(p, is_list ? "," : "\n");
    line++;
    /* One line: "host [slots=N] [max_slots=M]  # comment". */
    tend = memchr(p, '#', (size_t)(end - p));
    if (!tend || is_list)
      tend = end;
    tok = p;
    while (tok < tend && isspace((unsigned char)*tok))
      tok++;
    if (tok < tend) {
      const char *hend = tok;

      while (hend < tend && !isspace((unsigned char)*hend))
        hend++;
      if (!valid_host(tok, (size_t)(hend - tok))) {
        rc = err_set(err, errlen, -EINVAL,
                     "%s %d: invalid host name '%.*s'",
                     is_list ? "--hosts: entry" : "--hostfile: line", line,
                     (int)(hend - tok), tok);
        goto out;
      }
      for (const char *q = hend; q < tend;) {
        const char *w;

        while (q < tend && isspace((unsigned char)*q))
          q++;
        if (q >= tend)
          break;
        w = q;
        while (q < tend && !isspace((unsigned char)*q))
          q++;
        if ((size_t)(q - w) > 6 && strncmp(w, "slots=", 6) == 0) {
          if (num_parse_long_n(w + 6, (size_t)(q - w) - 6, 1,
                               NUM_NPROC_MAX, &slots)) {
            rc = err_set(err, errlen, -EINVAL, "--hostfile: line %d: "
                         "invalid '%.*s' (expected slots=N, 1 <= N <= %d)",
                         line, (int)(q - w), w, NUM_NPROC_MAX);
            goto out;
          }
        } else if ((size_t)(q - w) > 10 &&
                   strncmp(w, "max_slots=", 10) == 0) {
          /* mpirun's: accepted, nothing to limit here. */
        } else {
          rc = err_set(err, errlen, -EINVAL, "--hostfile: line %d: "
                       "unknown '%.*s' (expected host [slots=N])", line,
                       (int)(q - w), w);
          goto out;
        }
      }
      rc = add_host(&hosts, &n, tok, (size_t)(hend - tok), (int)slots);
      if (rc == -E2BIG)
        rc = err_set(err, errlen, -EINVAL, "%s: more than %d hosts",
                     is_list ? "--hosts" : "--hostfile",
                     HOSTFILE_MAX_HOSTS);
      else if (rc)
        rc = err_set(err, errlen, -EINVAL, "out of memory");
      if (rc)
        goto out;
    }
    p = *end == sep ? end + 1 : end;
  }
  if (n == 0)
    rc = err_set(err, errlen, -EINVAL, "%s: no host",
                 is_list ? "--hosts" : "--hostfile");
out:
  if (rc) {
    free(hosts);
    return rc;
  }
  *out = hosts;
  return n;
}

char *hostfile_read(const char *path, char *err, size_t errlen)
{
  struct stat st;
  char *buf;
  size_t n = 0;
  ssize_t r;
  int fd;

  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    err_set(err, errlen, -EINVAL, "--hostfile: cannot open '%s': %s",
            path, strerror(errno));
    return NULL;
  }
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    close(fd);
    err_set(err, errlen, -EINVAL, "--hostfile: '%s' is a directory", path);
    return NULL;
  }
  buf = malloc(HOSTFILE_MAX_BYTES + 1);
  if (!buf) {
    close(fd);
    err_set(err, errlen, -EINVAL, "out of memory");
    return NULL;
  }
  while (n < HOSTFILE_MAX_BYTES &&
         (r = read(fd, buf + n, HOSTFILE_MAX_BYTES - n)) != 0) {
    if (r < 0) {
      if (errno == EINTR)
        continue;
      err_set(err, errlen, -EINVAL, "--hostfile: cannot read '%s': %s",
              path, strerror(errno));
      goto bad;
    }
    n += (size_t)r;
  }
  if (n == HOSTFILE_MAX_BYTES) {
    err_set(err, errlen, -EINVAL,
            "--hostfile: '%s' is larger than %d bytes", path,
            HOSTFILE_MAX_BYTES);
    goto bad;
  }
  close(fd);
  buf[n] = '\0';
  if (strlen(buf) != n) {
    err_set(err, errlen, -EINVAL, "--hostfile: '%s' holds a NUL byte", path);
    free(buf);
    return NULL;
  }
  return buf;
bad:
  close(fd);
  free(buf);
  return NULL;
}
