/* signames.c -- signal names as Python's signal.Signals spells them. */
#include "signames.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

/* Python's signal.Signals names; the macros keep numbers per-platform. */
static const struct {
  int num;
  const char *name;
} sig_names[] = {
  { SIGHUP, "SIGHUP" },   { SIGINT, "SIGINT" },     { SIGQUIT, "SIGQUIT" },
  { SIGILL, "SIGILL" },   { SIGTRAP, "SIGTRAP" },   { SIGABRT, "SIGABRT" },
  { SIGBUS, "SIGBUS" },   { SIGFPE, "SIGFPE" },     { SIGKILL, "SIGKILL" },
  { SIGUSR1, "SIGUSR1" }, { SIGSEGV, "SIGSEGV" },   { SIGUSR2, "SIGUSR2" },
  { SIGPIPE, "SIGPIPE" }, { SIGALRM, "SIGALRM" },   { SIGTERM, "SIGTERM" },
  { SIGCHLD, "SIGCHLD" }, { SIGCONT, "SIGCONT" },   { SIGSTOP, "SIGSTOP" },
  { SIGTSTP, "SIGTSTP" }, { SIGTTIN, "SIGTTIN" },   { SIGTTOU, "SIGTTOU" },
  { SIGURG, "SIGURG" },   { SIGXCPU, "SIGXCPU" },   { SIGXFSZ, "SIGXFSZ" },
  { SIGVTALRM, "SIGVTALRM" }, { SIGPROF, "SIGPROF" },
  { SIGWINCH, "SIGWINCH" }, { SIGIO, "SIGIO" },     { SIGSYS, "SIGSYS" },
};

int sig_number(const char *name, size_t len)
{
  for (size_t i = 0; i < sizeof(sig_names) / sizeof(sig_names[0]); i++)
    if (strlen(sig_names[i].name) == len &&
        strncmp(sig_names[i].name, name, len) == 0)
      return sig_names[i].num;
  return -1;
}

const char *sig_name(int signum, char *buf, size_t buflen)
{
  for (size_t i = 0; i < sizeof(sig_names) / sizeof(sig_names[0]); i++)
    if (sig_names[i].num == signum)
      return sig_names[i].name;
  if (!buf || buflen == 0)
    return "SIG?";
#if defined(__GLIBC__) && \
    (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
  {
    /* glibc knows the rarer ones (SIGSTKFLT, SIGPWR, ...) */
    const char *abbrev = sigabbrev_np(signum);

    if (abbrev) {
      snprintf(buf, buflen, "SIG%s", abbrev);
      return buf;
    }
  }
#endif
  snprintf(buf, buflen, "SIG%d", signum);
  return buf;
}
