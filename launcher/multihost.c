/* multihost.c -- the head node: one cdrun agent per host over OpenSSH
 * (see multihost.h).
 *
 * Note [remote lifetime]: killing a local ssh client leaves the remote
 * command running.  Every remote agent therefore runs with
 * --stdin_watchdog, and the head keeps the write end of each ssh's stdin.
 * When that end closes -- the head stops the job (Ctrl-C, SIGTERM, a lost
 * host), or the head or its ssh dies in any way -- ssh sends EOF, the
 * remote agent reads it and stops its workers as on SIGTERM (grace period,
 * then SIGKILL), and its exit status comes back through ssh.
 *
 * Note [dead links]: a host whose link or machine dies sends nothing, not
 * even an EOF.  The head's ssh asks the server for a sign of life every
 * keepalive interval (ServerAliveInterval x ServerAliveCountMax, from the
 * job's keepalive_interval x keepalive_misses: the keepalive window,
 * rdzv_rules_keepalive_window) and exits 255 when none comes; the head
 * names the host at once.  The other way, the head writes a byte to each
 * ssh's stdin every interval, and the remote watchdog
 * (told the window in CDRUN_HEAD_BEAT) stops its agent when nothing came
 * within it.  A lost host is cdrun's exit status 75, never ssh's 255. */
#include "multihost.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <uv.h>

#include "conqueue.h"
#include "hostfile.h"
#include "num.h"
#include "output.h"
#include "rdzv_proto.h"
#include "rdzv_rules.h"
#include "say.h"
#include "slurm_env.h"
#include "stdin_watchdog.h"

#define LINE_MAX_OUT 65536      /* longer lines are cut into pieces */
#define CONSOLE_STALL_S 0.5     /* Note [console queue]: at the end */
#define SSH_FAILED 255          /* ssh's own failure, or a killed remote */
#define EXIT_HOST_LOST 75       /* agent.h's AGENT_EXIT_NODE_LOST */
#define BEAT_MARGIN 2.0         /* seconds on top of the remote's window */

/* ---- the remote command -------------------------------------------------- */

struct strbuf {
  char *s;
  size_t len, cap;
  bool oom;
};

static void sb_add(struct strbuf *b, const char *s, size_t n)
{
  if (b->oom)
    return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 256;
    char *p;

    while (cap < b->len + n + 1)
      cap *= 2;
    p = realloc(b->s, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->s = p;
    b->cap = cap;
  }
  memcpy(b->s + b->len, s, n);
  b->len += n;
  b->s[b->len] = '\0';
}

/* Appends ' arg' quoted for a POSIX shell. */
static void sb_arg(struct strbuf *b, const char *arg)
{
  const char *p;

  sb_add(b, " '", 2);
  for (p = arg; *p; p++) {
    if (*p == '\'')
      sb_add(b, "'\\''", 4);
    else
      sb_add(b, p, 1);
  }
  sb_add(b, "'", 1);
}

__attribute__((format(printf, 2, 3)))
static void sb_argf(struct strbuf *b, const char *fmt, ...)
{
  char buf[1024];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  sb_arg(b, buf);
}

/* True for the head-only options and their "--opt VALUE" form. */
static int head_only(const char *arg)
{
  static const char *const names[] = { "hostfile", "hosts" };
  size_t i, n;
  const char *s;

  if (strncmp(arg, "--", 2) != 0)
    return 0;
  for (i = 0; i < sizeof names / sizeof names[0]; i++) {
    n = strlen(names[i]);
    s = arg + 2;
    if (strncmp(s, names[i], n) == 0 && (s[n] == '=' || s[n] == '\0'))
      return s[n] == '=' ? 1 : 2;   /* args taken */
  }
  return 0;
}

/* The cdrun a remote host runs: $CDRUN_SSH_CDRUN, else this program's
 * absolute path when it was started by path, else "cdrun" from PATH. */
static void remote_cdrun(const char *argv0, char *out, size_t len)
{
  const char *v = getenv("CDRUN_SSH_CDRUN");
  char buf[PATH_MAX];

  if (v && *v)
    snprintf(out, len, "%s", v);
  else if (strchr(argv0, '/') && realpath(argv0, buf))
    snprintf(out, len, "%s", buf);
  else
    snprintf(out, len, "cdrun");
}

struct job_plan {
  char id[128];
  char endpoint[300];
  bool derived_endpoint;        /* the first host serves the rendezvous */
  char nnodes[32];
  bool elastic;
  char cdrun[PATH_MAX];
  char cwd[PATH_MAX];
  /* Note [dead links]: ssh's ServerAliveInterval (whole seconds) and
   * ServerAliveCountMax, the window they make (the keepalive window in
   * whole seconds), and the head's beat to the remote watchdogs. */
  int alive_interval, alive_count, alive_window;
  double beat;
};

static char *remote_command(const struct cdrun_args *a, int argc,
                            char **argv, const struct job_plan *p,
                            const struct hostfile_host *h, int node_rank,
                            bool nproc_given)
{
  struct strbuf b = { 0 };
  int ti = a->target_argv ? (int)(a->target_argv - argv) : argc, i, skip;

  /* The working directory, like DeepSpeed's runner; a host without it
   * starts in the login directory. */
  if (p->cwd[0]) {
    sb_add(&b, "cd", 2);
    sb_arg(&b, p->cwd);
    sb_add(&b, " 2>/dev/null;", 13);
  }
  /* Note [dead links]: how long the watchdog waits for the head's beat
   * (an older cdrun there ignores it). */
  sb_add(&b, " exec env", 9);
  sb_argf(&b, STDIN_WATCHDOG_BEAT_ENV "=%g",
          p->alive_window + BEAT_MARGIN);
  sb_arg(&b, p->cdrun);
  for (i = 1; i < ti; i++) {
    if (strcmp(argv[i], "--") == 0)
      break;
    skip = head_only(argv[i]);
    if (skip) {
      i += skip - 1;
      continue;
    }
    sb_arg(&b, argv[i]);
  }
  /* Later flags win: the head's plan comes last, before the target. */
  sb_argf(&b, "--nnodes=%s", p->nnodes);
  sb_argf(&b, "--node_rank=%d", node_rank);
  sb_arg(&b, "--rdzv_backend=c10d");
  sb_argf(&b, "--rdzv_endpoint=%s", p->endpoint);
  sb_argf(&b, "--rdzv_id=%s", p->id);
  if (p->derived_endpoint)
    sb_argf(&b, "--rdzv_conf=%s%sis_host=%d", a->rdzv_conf,
            a->rdzv_conf[0] ? "," : "", node_rank == 0);
  if (h->slots && !nproc_given)
    sb_argf(&b, "--nproc_per_node=%d", h->slots);
  sb_arg(&b, "--stdin_watchdog");
  sb_arg(&b, "--");
  for (i = ti; i < argc; i++)
    sb_arg(&b, argv[i]);
  if (b.oom) {
    free(b.s);
    return NULL;
  }
  return b.s;
}

/* ---- the plan ------------------------------------------------------------ */

/* Note [dead links]: the job's keepalive (--rdzv_conf keepalive_interval
 * and keepalive_misses, torch's names too; the remote agents check the
 * values) as ssh's whole-second ServerAlive options. */
static void plan_keepalive(const struct cdrun_args *a, struct job_plan *p)
{
  struct rdzv_proto_conf dflt;
  double interval, misses;
  const char *e, *c = a->rdzv_conf ? a->rdzv_conf : "";
  char key[64], val[64];
  size_t kn, vn;

  rdzv_proto_conf_default(&dflt);
  interval = dflt.keepalive_interval;
  misses = dflt.keepalive_misses;
  while (*c) {
    e = c + strcspn(c, ",");
    kn = strcspn(c, "=");
    if (c + kn < e && kn < sizeof key && (size_t)(e - c - kn - 1) <
                                         sizeof val) {
      memcpy(key, c, kn);
      key[kn] = '\0';
      vn = (size_t)(e - c) - kn - 1;
      memcpy(val, c + kn + 1, vn);
      val[vn] = '\0';
      if (!strcmp(key, "keepalive_interval") ||
          !strcmp(key, "keep_alive_interval") || !strcmp(key, "heartbeat"))
        num_parse_double(val, RDZV_PROTO_MIN_KEEPALIVE, 3600, &interval);
      else if (!strcmp(key, "keepalive_misses") ||
               !strcmp(key, "keep_alive_max_attempt"))
        num_parse_double(val, 1, 1000, &misses);
    }
    c = *e ? e + 1 : e;
  }
  p->alive_interval = (int)ceil(interval);
  if (p->alive_interval < 1)
    p->alive_interval = 1;
  p->alive_count = (int)misses;
  p->alive_window = (int)rdzv_rules_keepalive_window(p->alive_interval,
                                                     p->alive_count);
  p->beat = interval;
}

static void plan_job(const struct cdrun_args *a,
                     const struct hostfile_host *hosts, int nhosts,
                     const char *argv0, struct job_plan *p,
                     bool nnodes_given, bool endpoint_given)
{
  unsigned char b[8];
  int fd;

  memset(p, 0, sizeof p[0]);
  if (strcmp(a->rdzv_id, "none") != 0) {
    snprintf(p->id, sizeof p->id, "%s", a->rdzv_id);
  } else {
    fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, b, sizeof b) != (ssize_t)sizeof b)
      for (size_t i = 0; i < sizeof b; i++)
        b[i] = (unsigned char)(rand() ^ getpid() ^ (int)time(NULL));
    if (fd >= 0)
      close(fd);
    snprintf(p->id, sizeof p->id, "hosts-%02x%02x%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]);
  }
  if (nnodes_given)
    snprintf(p->nnodes, sizeof p->nnodes, "%d:%d", a->nnodes_min,
             a->nnodes_max);
  else
    snprintf(p->nnodes, sizeof p->nnodes, "%d", nhosts);
  p->elastic = nnodes_given && a->nnodes_min < a->nnodes_max;
  if (endpoint_given) {
    snprintf(p->endpoint, sizeof p->endpoint, "%s", a->rdzv_endpoint);
  } else {
    /* The first host serves the rendezvous on a port agreed from the
     * job id; "user@host" reaches it as "host". */
    const char *h = strrchr(hosts[0].name, '@');

    h = h ? h + 1 : hosts[0].name;
    snprintf(p->endpoint, sizeof p->endpoint, "%s%s%s:%d",
             strchr(h, ':') && h[0] != '[' ? "[" : "", h,
             strchr(h, ':') && h[0] != '[' ? "]" : "",
             slurm_env_port(p->id, "hosts"));
    p->derived_endpoint = true;
  }
  remote_cdrun(argv0, p->cdrun, sizeof p->cdrun);
  plan_keepalive(a, p);
  if (!getcwd(p->cwd, sizeof p->cwd))
    p->cwd[0] = '\0';
}

/* Whether option name was given (flag or PET_*), not defaulted. */
static bool given(const struct cdrun_args *a, const char *name)
{
  return args_origin_of(a, name) != ARGS_DEFAULT;
}

/* ---- the ssh clients ----------------------------------------------------- */

/* One of ssh's output pipes.  Read with read(2) when its uv_poll_t says
 * so, not with uv_read_start: an ssh that exited is drained at once, so
 * its last lines come before the head's report on it. */
/* One of an ssh client's output streams: read as it comes, cut into
 * prefixed lines by output.h's line assembler, and queued for the console
 * (Note [console queue], conqueue.h), so that a console that stops
 * reading never stops the head. */
struct stream {
  struct remote *r;
  int fd;
  uv_poll_t poll;
  bool polling;                 /* poll started and not yet closed */
  struct output_liner *liner;
  struct conqueue *to;          /* NULL: written in place */
  int to_fd;
};

struct remote {
  struct head *head;
  const struct hostfile_host *host;
  char prefix[300];
  pid_t pid;
  int in_fd;                    /* the write end of ssh's stdin */
  struct stream out, err;
  char last_err[512];           /* ssh's last message, for the report */
  bool exited;
  int status;
};

/* The head's supervision, on its own libuv loop (the head runs no agent):
 * the ssh clients' exits (SIGCHLD) and output, the user's signals, the
 * beat to the remote watchdogs and the deadline after a stop. */
struct head {
  uv_loop_t loop;
  const struct cdrun_args *a;
  struct job_plan plan;
  struct remote *rs;
  int n;
  int running;                  /* ssh clients not yet reaped */
  int first_fail;               /* the job's status so far */
  int sigs;                     /* the user's signals received */
  bool any_ok, stopping, killed;
  uv_signal_t sigchld;
  uv_signal_t sig[3];           /* SIGINT, SIGTERM, SIGHUP */
  uv_timer_t beat;              /* Note [dead links] */
  uv_timer_t deadline;          /* stop_wait after a stop */
  struct conqueue *console[2];  /* the head's stdout and stderr */
};

static const int head_signals[3] = { SIGINT, SIGTERM, SIGHUP };

/* The liner's sink: "<prefix><line>\n", one whole line. */
static void emit(void *ctx, const char *line, size_t n)
{
  struct stream *s = ctx;
  struct remote *r = s->r;
  size_t plen = strlen(r->prefix);

  if (s == &r->err && n > plen + 1) {
    size_t k = n - plen - 1;

    if (k > sizeof r->last_err - 1)
      k = sizeof r->last_err - 1;
    memcpy(r->last_err, line + plen, k);
    r->last_err[k] = '\0';
  }
  /* One write per line: lines of different hosts never interleave. */
  if (s->to)
    conqueue_put(s->to, line, n);
  else if (write(s->to_fd, line, n) < 0) {
    /* the console is gone; keep supervising */
  }
}

/* Flushes a partial line and closes the stream (its poll first: libuv
 * must let go of the fd before it is closed). */
static void finish(struct remote *r, struct stream *s)
{
  (void)r;
  if (s->liner) {
    output_liner_flush(s->liner);
    output_liner_free(s->liner);
    s->liner = NULL;
  }
  if (s->polling)
    uv_close((uv_handle_t *)&s->poll, NULL);
  s->polling = false;
  if (s->fd >= 0)
    close(s->fd);
  s->fd = -1;
}

/* Reads what is there: 1 read something, 0 EOF (closed), -1 nothing now. */
static int pump(struct remote *r, struct stream *s)
{
  char buf[65536];
  ssize_t n;

  if (s->fd < 0)
    return 0;
  n = read(s->fd, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN))
    return -1;
  if (n <= 0) {
    finish(r, s);
    return 0;
  }
  if (s->liner)
    output_liner_feed(s->liner, buf, (size_t)n);
  return 1;
}

/* Everything the stream holds now. */
static void drain(struct remote *r, struct stream *s)
{
  while (pump(r, s) == 1)
    ;
}

static void on_readable(uv_poll_t *p, int status, int events)
{
  struct remote *r = p->data;
  struct stream *s = p == &r->out.poll ? &r->out : &r->err;

  (void)status;
  (void)events;
  pump(r, s);
}

static int stream_open(struct remote *r, struct stream *s, int fd, int to)
{
  int err;

  s->r = r;
  s->fd = fd;
  s->to_fd = to;
  s->to = r->head->console[to == 1 ? 0 : 1];
  /* A line too long is cut into LINE_MAX_OUT pieces. */
  s->liner = output_liner_new(r->prefix, LINE_MAX_OUT, emit, s);
  if (!s->liner)
    return UV_ENOMEM;
  fcntl(fd, F_SETFL, O_NONBLOCK);
  err = uv_poll_init(&r->head->loop, &s->poll, fd);
  if (err)
    return err;
  s->poll.data = r;
  s->polling = true;
  return uv_poll_start(&s->poll, UV_READABLE, on_readable);
}

/* Splits $CDRUN_SSH ("ssh -F cfg", default "ssh") into argv words. */
static int ssh_words(char *spec, char **words, int max)
{
  int n = 0;
  char *save = NULL, *w;

  for (w = strtok_r(spec, " \t", &save); w && n < max;
       w = strtok_r(NULL, " \t", &save))
    words[n++] = w;
  return n;
}

static int start_remote(struct remote *r, const char *cmd,
                        char alive_opts[2][64])
{
  int in[2], out[2], err[2];
  char spec[1024], *words[48];
  const char *env = getenv("CDRUN_SSH");
  int n, i, rc;
  pid_t pid;

  snprintf(spec, sizeof spec, "%s", env && *env ? env : "ssh");
  n = ssh_words(spec, words, 40);
  if (n == 0)
    return -EINVAL;
  words[n++] = "-o";
  words[n++] = "BatchMode=yes";
  words[n++] = "-o";
  words[n++] = alive_opts[0];
  words[n++] = "-o";
  words[n++] = alive_opts[1];
  words[n++] = "-T";
  words[n++] = (char *)r->host->name;
  words[n++] = (char *)cmd;
  words[n] = NULL;
  if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) ||
      pipe2(err, O_CLOEXEC))
    return -errno;
  pid = fork();
  if (pid < 0)
    return -errno;
  if (pid == 0) {
    /* Its own process group: a Ctrl-C on the terminal reaches the head
     * alone, which then stops every host the same way. */
    setpgid(0, 0);
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    for (i = 1; i < NSIG; i++)
      signal(i, SIG_DFL);
    execvp(words[0], words);
    fprintf(stderr, "cannot run %s: %s\n", words[0], strerror(errno));
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  close(err[1]);
  r->pid = pid;
  r->in_fd = in[1];
  fcntl(in[1], F_SETFL, O_NONBLOCK);  /* a beat never blocks the head */
  rc = stream_open(r, &r->out, out[0], 1);
  if (rc == 0)
    rc = stream_open(r, &r->err, err[0], 2);
  return rc;
}

/* Stops every remote agent: Note [remote lifetime]. */
static void stop_all(struct remote *rs, int n)
{
  for (int i = 0; i < n; i++)
    if (rs[i].in_fd >= 0) {
      close(rs[i].in_fd);
      rs[i].in_fd = -1;
    }
}

/* Sends sig to every ssh client still running. */
static void kill_all(struct remote *rs, int n, int sig)
{
  for (int i = 0; i < n; i++)
    if (!rs[i].exited && rs[i].pid > 0)
      kill(rs[i].pid, sig);
}

static int exit_code(int status)
{
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  return 1;
}

static void report_exit(struct remote *r, int code, bool elastic,
                        int alive_window, int alive_count)
{
  if (code == 0)
    return;
  if (code == SSH_FAILED && (strstr(r->last_err, "not responding") ||
                             strstr(r->last_err, "Timeout")))
    say("host %s: lost: no answer over ssh within %d s (ServerAliveInterval "
        "%d x ServerAliveCountMax %d): its machine or its link is down%s",
        r->host->name, alive_window,
        alive_window / (alive_count ? alive_count : 1), alive_count,
        elastic ? "; the job goes on without it (elastic)" : "");
  else if (code == SSH_FAILED)
    say("host %s: ssh failed or the remote agent was killed (exit 255)%s%s"
        "%s", r->host->name, r->last_err[0] ? ": " : "", r->last_err,
        elastic ? "; the job goes on without it (elastic)" : "");
  else if (code == 127)
    say("host %s: exit 127: cdrun or the training script was not found "
        "there%s%s", r->host->name, r->last_err[0] ? ": " : "",
        r->last_err);
  else
    say("host %s: the agent exited %d", r->host->name, code);
}

/* How long the head waits for the agents after it stopped them. */
static double stop_wait(const struct cdrun_args *a)
{
  return a->shutdown_timeout + 15;
}

/* "cdrun: <what> host(s) h1, h2": the hosts whose ssh still runs. */
static void say_waiting(const struct remote *rs, int n, const char *what,
                        ...) __attribute__((format(printf, 3, 4)));

static void say_waiting(const struct remote *rs, int n, const char *what,
                        ...)
{
  char head[256], list[1024] = "";
  size_t len = 0;
  int k = 0;
  va_list ap;

  for (int i = 0; i < n; i++) {
    if (rs[i].exited || rs[i].pid <= 0)
      continue;
    k++;
    if (len < sizeof list - 16)
      len += (size_t)snprintf(list + len, sizeof list - len, "%s%s",
                              len ? ", " : "", rs[i].host->name);
    else if (len < sizeof list - 1)
      len += (size_t)snprintf(list + len, sizeof list - len, "...");
  }
  if (!k)
    return;
  va_start(ap, what);
  vsnprintf(head, sizeof head, what, ap);
  va_end(ap);
  say("%s host%s %s", head, k == 1 ? "" : "s", list);
}

/* ---- supervision --------------------------------------------------------- */

static void on_deadline(uv_timer_t *t)
{
  struct head *h = t->data;

  say_waiting(h->rs, h->n, "did not stop within %.0f s: ending the ssh "
              "connection to", stop_wait(h->a));
  h->killed = true;
  kill_all(h->rs, h->n, SIGKILL);
}

/* Stops the agents on every host (Note [remote lifetime]); after their
 * grace period (stop_wait) the ssh clients are ended. */
static void begin_stop(struct head *h)
{
  stop_all(h->rs, h->n);
  h->stopping = true;
  uv_timer_stop(&h->beat);
  uv_timer_start(&h->deadline, on_deadline,
                 (uint64_t)(stop_wait(h->a) * 1000), 0);
}

/* Note [dead links]: a beat to every remote watchdog. */
static void on_beat(uv_timer_t *t)
{
  struct head *h = t->data;

  for (int i = 0; i < h->n; i++)
    if (!h->rs[i].exited && h->rs[i].in_fd >= 0 &&
        write(h->rs[i].in_fd, "\n", 1) < 0) {
      /* full or gone: ssh's own keepalive decides */
    }
}

static void on_signal(uv_signal_t *s, int sig)
{
  struct head *h = s->data;

  h->sigs++;
  if (h->sigs == 1) {
    say("got %s: stopping the agents on every host", strsignal(sig));
    begin_stop(h);
    say_waiting(h->rs, h->n, "waiting up to %.0f s (the agents' grace "
                "period and 15 s; %s again: at once) for", stop_wait(h->a),
                strsignal(sig));
    if (!h->first_fail)
      h->first_fail = 128 + sig;
  } else {
    say("got %s again: ending the ssh connections now", strsignal(sig));
    kill_all(h->rs, h->n, SIGTERM);
  }
}

/* Closes the loop's handles: uv_run returns once they are closed. */
static void head_close(struct head *h)
{
  uv_close((uv_handle_t *)&h->sigchld, NULL);
  for (int i = 0; i < 3; i++)
    uv_close((uv_handle_t *)&h->sig[i], NULL);
  uv_close((uv_handle_t *)&h->beat, NULL);
  uv_close((uv_handle_t *)&h->deadline, NULL);
  for (int i = 0; i < h->n; i++) {
    struct stream *ss[2] = { &h->rs[i].out, &h->rs[i].err };

    for (int k = 0; k < 2; k++)
      if (ss[k]->polling) {
        uv_close((uv_handle_t *)&ss[k]->poll, NULL);
        ss[k]->polling = false;
      }
  }
}

/* r's ssh client exited with wait status st. */
static void remote_exited(struct head *h, struct remote *r, int st)
{
  int code;

  /* What is still in its pipes belongs before the report. */
  drain(r, &r->out);
  drain(r, &r->err);
  r->exited = true;
  r->status = code = exit_code(st);
  h->running--;
  if (code == 0) {
    h->any_ok = true;
    return;
  }
  /* The ssh client itself killed: that host is cut off. */
  if (WIFSIGNALED(st)) {
    if (!h->stopping)
      say("host %s: the ssh client was killed by signal %d%s",
          r->host->name, WTERMSIG(st), h->plan.elastic
          ? "; the job goes on without it (elastic)" : "");
    code = SSH_FAILED;
  } else if (!h->stopping) {
    report_exit(r, code, h->plan.elastic,
                h->plan.alive_window, h->plan.alive_count);
  }
  if (!h->first_fail)
    h->first_fail = code;
  /* A lost host in a fixed-size job: nobody else can go on.  (An agent
   * that failed otherwise told the rendezvous; the others stop by
   * themselves and report.) */
  if (!h->plan.elastic && !h->stopping && code == SSH_FAILED) {
    say("stopping the agents on every host");
    begin_stop(h);
  }
}

static void on_sigchld(uv_signal_t *s, int sig)
{
  struct head *h = s->data;
  pid_t pid;
  int st;

  (void)sig;
  while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
    for (int i = 0; i < h->n; i++)
      if (h->rs[i].pid == pid)
        remote_exited(h, &h->rs[i], st);
  if (h->running == 0)
    head_close(h);
}

/* Sets up the loop and its handles; the user's signals are the head's
 * from here on.  Returns 0 or a negative libuv error (the handles are
 * closed then, the loop too). */
static int head_init(struct head *h)
{
  int err = uv_loop_init(&h->loop);

  if (err)
    return err;
  uv_signal_init(&h->loop, &h->sigchld);
  h->sigchld.data = h;
  err = uv_signal_start(&h->sigchld, on_sigchld, SIGCHLD);
  for (int i = 0; i < 3; i++) {
    uv_signal_init(&h->loop, &h->sig[i]);
    h->sig[i].data = h;
    if (!err)
      err = uv_signal_start(&h->sig[i], on_signal, head_signals[i]);
  }
  uv_timer_init(&h->loop, &h->beat);
  uv_timer_init(&h->loop, &h->deadline);
  h->beat.data = h->deadline.data = h;
  if (err) {
    head_close(h);
    uv_run(&h->loop, UV_RUN_DEFAULT);
    uv_loop_close(&h->loop);
    return err;
  }
  signal(SIGPIPE, SIG_IGN);
  return 0;
}

/* Starts one ssh per host, the first beat at once (Note [dead links]).
 * A host whose ssh cannot start stops the others. */
static void start_all(struct head *h, int argc, char **argv,
                      struct hostfile_host *hosts)
{
  char alive_opts[2][64];
  uint64_t beat_ms = (uint64_t)(h->plan.beat * 1000);

  snprintf(alive_opts[0], sizeof alive_opts[0], "ServerAliveInterval=%d",
           h->plan.alive_interval);
  snprintf(alive_opts[1], sizeof alive_opts[1], "ServerAliveCountMax=%d",
           h->plan.alive_count);
  say("starting %d agent%s over ssh: rendezvous %s, id %s", h->n,
      h->n == 1 ? "" : "s", h->plan.endpoint, h->plan.id);
  for (int i = 0; i < h->n; i++) {
    struct remote *r = &h->rs[i];
    char *cmd = remote_command(h->a, argc, argv, &h->plan, &hosts[i], i,
                               given(h->a, "nproc_per_node"));
    int rc;

    r->head = h;
    r->host = &hosts[i];
    snprintf(r->prefix, sizeof r->prefix, "[%s] ", hosts[i].name);
    r->in_fd = r->out.fd = r->err.fd = -1;
    rc = cmd ? start_remote(r, cmd, alive_opts) : -ENOMEM;
    free(cmd);
    if (r->pid > 0)
      h->running++;
    if (rc) {
      say_error("host %s: cannot start ssh: %s", hosts[i].name,
                say_strerror(rc));
      if (r->pid <= 0) {
        r->exited = true;
        r->status = 1;
      }
      h->first_fail = h->first_fail ? h->first_fail : 1;
      begin_stop(h);
      break;
    }
  }
  if (!h->stopping)
    uv_timer_start(&h->beat, on_beat, 0, beat_ms ? beat_ms : 1);
}

/* The head's status once every ssh client is reaped, and what they left
 * in their pipes on the console. */
static int head_finish(struct head *h)
{
  int status;

  for (int i = 0; i < h->n; i++) {
    drain(&h->rs[i], &h->rs[i].out);
    drain(&h->rs[i], &h->rs[i].err);
    finish(&h->rs[i], &h->rs[i].out);
    finish(&h->rs[i], &h->rs[i].err);
    if (h->rs[i].in_fd >= 0)
      close(h->rs[i].in_fd);
    h->rs[i].in_fd = -1;
  }
  if (h->sigs > 0)
    status = h->first_fail;
  else if (h->plan.elastic && h->any_ok)
    status = 0;
  else
    status = h->first_fail;
  /* cdrun's own status for a lost host, not ssh's (cdrun(1)). */
  return status == SSH_FAILED ? EXIT_HOST_LOST : status;
}

/* The hosts of --hostfile or --hosts, or -1 when they cannot be had (the
 * problem said). */
static int load_hosts(const struct cdrun_args *a,
                      struct hostfile_host **hosts)
{
  char err[512], *text;
  int n;

  if (a->hostfile && a->hosts) {
    say_error("--hostfile and --hosts are mutually exclusive");
    return -1;
  }
  if (a->hostfile) {
    text = hostfile_read(a->hostfile, err, sizeof err);
    if (!text) {
      say_error("%s", err);
      return -1;
    }
    n = hostfile_parse(text, 0, hosts, err, sizeof err);
    free(text);
  } else {
    n = hostfile_parse(a->hosts, 1, hosts, err, sizeof err);
  }
  if (n < 0) {
    say_error("%s", err);
    return -1;
  }
  if (a->standalone) {
    say_error("--standalone runs one node; --hostfile/--hosts start one "
              "agent per host");
    free(*hosts);
    *hosts = NULL;
    return -1;
  }
  return n;
}

/* Lets the console queues drain while their console reads, and says
 * what a console that stalled never got. */
static void close_consoles(struct head *h)
{
  uint64_t dropped[2];
  int k;

  for (k = 1; k >= 0; k--) {
    dropped[k] = conqueue_close(h->console[k], CONSOLE_STALL_S);
    h->console[k] = NULL;
  }
  for (k = 0; k < 2; k++)
    if (dropped[k] && (!dropped[1] || k == 0))
      say("%llu line%s of the hosts' %s did not reach the console (it did "
          "not keep up)", (unsigned long long)dropped[k],
          dropped[k] == 1 ? "" : "s", k ? "stderr" : "stdout");
}

int multihost_run(const struct cdrun_args *a, int argc, char **argv)
{
  struct hostfile_host *hosts = NULL;
  struct head *h;
  int n, status;

  n = load_hosts(a, &hosts);
  if (n < 0)
    return 2;
  h = calloc(1, sizeof *h);
  if (h)
    h->rs = calloc((size_t)n, sizeof *h->rs);
  if (!h || !h->rs || head_init(h)) {
    say_error("out of memory or file descriptors");
    if (h)
      free(h->rs);
    free(h);
    free(hosts);
    return 1;
  }
  h->a = a;
  h->n = n;
  plan_job(a, hosts, n, argv[0], &h->plan, given(a, "nnodes"),
           given(a, "rdzv_endpoint"));
  /* Note [console queue]: without one, lines are written in place. */
  if (conqueue_create(1, 0, &h->console[0]) ||
      conqueue_create(2, 0, &h->console[1]))
    say("cannot queue the console's lines: writing them in place");
  start_all(h, argc, argv, hosts);
  if (h->running == 0)
    head_close(h);
  uv_run(&h->loop, UV_RUN_DEFAULT);
  close_consoles(h);
  status = head_finish(h);
  if (uv_loop_close(&h->loop) != 0)
    say("warning: the head's loop still had handles at exit");
  free(h->rs);
  free(h);
  free(hosts);
  return status;
}
