/* main.c -- cdrun: parse, resolve the single-node job, run the agent. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/mempolicy.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agent.h"
#include "args.h"
#include "live_store.h"
#include "logdir.h"
#include "logs.h"
#include "multihost.h"
#include "nproc.h"
#include "num.h"
#include "numa.h"
#include "port.h"
#include "print_config.h"
#include "rdzv.h"
#include "rdzv_config.h"
#include "slurm_env.h"
#include "say.h"
#include "signames.h"
#include "stdin_watchdog.h"

#define EXIT_USAGE 2

/* What main resolved from the arguments; freed by job_free. */
struct job {
  int nproc;
  char **cmd;
  char run_id[RDZV_PROTO_MAX_ID + 1];
  struct rdzv_config rdzv;
  int port;                   /* reserved port, or 0 */
  int port_fd;                /* Note [port reservation], -1 if none */
  int store_port_fd;          /* live recovery's store port, or -1 */
  char log_base[PATH_MAX];    /* --log_dir or a temporary one */
  bool log_base_is_temp;
  bool error_files_read;         /* the agent's summary used them */
  char run_log_dir[PATH_MAX + 160];
  unsigned char *redirects;
  unsigned char *tee;
  bool *console;
  struct numa_binding *numa;  /* per local rank, NULL without binding */
  bool numa_memory;
  char **stdout_filters;      /* --duplicate_*_filters, NULL if none */
  char **stderr_filters;
  int signals[16];
  int nsignals;
  char timer_file[PATH_MAX + 200];  /* torch's file timer FIFO */
};

/* A user error: "cdrun: error: ..." (say.h), exit status 2. */
#define die_usage(...) (say_error(__VA_ARGS__), exit(EXIT_USAGE))

/* "SIGTERM,SIGUSR1" -> signal numbers (args.c validated the names). */
static void parse_signals(const char *list, struct job *j)
{
  const char *p = list;
  size_t len;
  int sig;

  j->nsignals = 0;
  while (*p) {
    len = strcspn(p, ",");
    sig = sig_number(p, len);
    if (sig < 0)
      die_usage("--signals_to_handle: unknown signal '%.*s'", (int)len, p);
    if (j->nsignals < (int)(sizeof j->signals / sizeof j->signals[0]))
      j->signals[j->nsignals++] = sig;
    p += len;
    if (*p == ',')
      p++;
  }
}

static bool is_python_source(const char *target)
{
  size_t n = strlen(target);
  struct stat st;

  if (n > 3 && strcmp(target + n - 3, ".py") == 0)
    return true;
  /* An existing file that is not executable can only be a script for the
   * interpreter (torchrun runs everything through python). */
  return stat(target, &st) == 0 && S_ISREG(st.st_mode) &&
         access(target, X_OK) != 0;
}

/* The worker command line: see "TARGETS" in man/cdrun.1. */
static char **build_command(const struct cdrun_args *a)
{
  const char *python = getenv("PYTHON_EXEC");
  bool use_python;
  char **cmd;
  int n = 0, i;

  if (!python || !*python)
    python = "python3";
  use_python = !a->no_python &&
               (a->module || a->run_path ||
                is_python_source(a->target_argv[0]));
  cmd = calloc((size_t)a->target_argc + 4, sizeof *cmd);
  if (!cmd)
    return NULL;
  if (use_python) {
    cmd[n++] = (char *)python;
    cmd[n++] = "-u";
    if (a->module)
      cmd[n++] = "-m";
  }
  for (i = 0; i < a->target_argc; i++)
    cmd[n++] = a->target_argv[i];
  cmd[n] = NULL;
  return cmd;
}

static void make_run_id(const struct cdrun_args *a, char *out, size_t len)
{
  unsigned char b[16];
  int i;
  size_t n = 0;

  if (!a->standalone) {
    snprintf(out, len, "%s", a->rdzv_id);
    return;
  }
  /* torchrun's standalone id: a random UUID (version 4). */
  if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
    for (i = 0; i < 16; i++)
      b[i] = (unsigned char)(rand() ^ getpid() ^ i);
  }
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  for (i = 0; i < 16 && n + 3 < len; i++) {
    n += (size_t)snprintf(out + n, len - n, "%02x", b[i]);
    if ((i == 3 || i == 5 || i == 7 || i == 9) && n + 2 < len)
      out[n++] = '-';
  }
  out[n] = '\0';
}

static int setup_logs(const struct cdrun_args *a, struct job *j)
{
  const char *tmp = getenv("TMPDIR");
  char tmpl[sizeof j->run_log_dir];
  int err;

  if (a->log_dir) {
    snprintf(j->log_base, sizeof j->log_base, "%s", a->log_dir);
    err = logdir_mkdirs(j->log_base);
    if (err) {
      say_error("--log_dir: cannot create '%s': %s", a->log_dir,
                say_strerror(err));
      return err;
    }
  } else {
    snprintf(tmpl, sizeof j->log_base, "%s/cdrun_XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(tmpl)) {
      say_error("cannot create a log directory in %s: %s",
                tmp && *tmp ? tmp : "/tmp", say_strerror(-errno));
      return -errno;
    }
    memcpy(j->log_base, tmpl, sizeof j->log_base);
    j->log_base_is_temp = true;
  }
  /* torchrun: tempfile.mkdtemp(prefix=f"{run_id}_", dir=log_dir). */
  snprintf(tmpl, sizeof tmpl, "%s/%s_XXXXXX", j->log_base, j->run_id);
  if (strlen(tmpl) >= PATH_MAX - 64) {
    say_error("--log_dir: path too long");
    return -ENAMETOOLONG;
  }
  if (!mkdtemp(tmpl)) {
    say_error("cannot create '%s': %s", tmpl, say_strerror(-errno));
    return -errno;
  }
  snprintf(j->run_log_dir, sizeof j->run_log_dir, "%s", tmpl);
  return 0;
}

static void resolve_streams(const struct cdrun_args *a, struct job *j)
{
  char err[256];
  int rc;

  j->redirects = calloc((size_t)j->nproc, 1);
  j->tee = calloc((size_t)j->nproc, 1);
  j->console = calloc((size_t)j->nproc, sizeof *j->console);
  if (!j->redirects || !j->tee || !j->console)
    die_usage("out of memory");
  if (logs_parse_std_spec(a->redirects, j->nproc, j->redirects, err,
                          sizeof err))
    die_usage("--redirects: %s", err);
  if (logs_parse_std_spec(a->tee, j->nproc, j->tee, err, sizeof err))
    die_usage("--tee: %s", err);
  if (logs_parse_ranks_filter(a->local_ranks_filter, j->nproc, j->console,
                              err, sizeof err))
    die_usage("--local_ranks_filter: %s", err);
  j->stdout_filters = logs_parse_filters(a->duplicate_stdout_filters, &rc);
  if (!rc)
    j->stderr_filters = logs_parse_filters(a->duplicate_stderr_filters, &rc);
  if (rc)
    die_usage("out of memory");
}

/* The device index local rank lr uses: its entry of CUDA_VISIBLE_DEVICES
 * when that is a list of indexes, else lr. */
static int gpu_index(int lr)
{
  const char *p = getenv("CUDA_VISIBLE_DEVICES");
  long index;

  for (int i = 0; p && *p; i++) {
    size_t len = strcspn(p, ",");

    if (i == lr)
      return strspn(p, "0123456789") >= len &&
             !num_parse_long_n(p, len, 0, INT_MAX, &index) ? (int)index : lr;
    p += len;
    if (*p == ',')
      p++;
  }
  return lr;
}

/* --virtual_local_rank takes local rank i's device from the i-th entry
 * of CUDA_VISIBLE_DEVICES when that is set; like torch, refuse a list
 * too short for every worker. */
static void check_virtual_devices(int nproc)
{
  const char *p = getenv("CUDA_VISIBLE_DEVICES");
  int n = 1;

  if (!p || !*p)
    return;
  for (; *p; p++)
    n += *p == ',';
  if (nproc > n)
    die_usage("--virtual_local_rank: local rank %d exceeds the %d "
              "device%s in CUDA_VISIBLE_DEVICES", n, n, n == 1 ? "" : "s");
}

/* --numa_binding: see numa.h.  Exits with a message when the topology
 * cannot be read. */
static void resolve_numa(const struct cdrun_args *a, struct job *j)
{
  struct numa_topo topo;
  cpu_set_t allowed;
  int mode = numa_mode_parse(a->numa_binding), gpus[256], ngpu, err;
  int *home = NULL;
  char line[1024], cpus[256];
  size_t used = 0;

  if (sched_getaffinity(0, sizeof allowed, &allowed) < 0)
    die_usage("--numa_binding: cannot read cdrun's CPU affinity: %s",
              strerror(errno));
  err = numa_topo_read("/sys", &allowed, &topo);
  if (err)
    die_usage("--numa_binding: cannot read the CPU topology under "
              "/sys/devices/system: %s", strerror(-err));
  j->numa = calloc((size_t)j->nproc, sizeof *j->numa);
  if (!j->numa)
    die_usage("out of memory");
  /* GPU workers are bound near their GPU; CPU workers share the nodes. */
  ngpu = numa_gpu_nodes("/sys", gpus, 256);
  if (ngpu > 0) {
    home = calloc((size_t)j->nproc, sizeof *home);
    if (!home)
      die_usage("out of memory");
    for (int i = 0; i < j->nproc; i++)
      home[i] = gpus[gpu_index(i) % ngpu];
  }
  numa_plan(&topo, (enum numa_mode)mode, j->nproc, home, j->numa);
  free(home);
  numa_topo_free(&topo);
  /* Memory policy needs set_mempolicy(2), which seccomp may forbid
   * (containers): then bind CPUs only, and say so. */
  j->numa_memory = syscall(SYS_set_mempolicy, MPOL_DEFAULT, NULL, 0) == 0;
  if (!j->numa_memory)
    fprintf(stderr, "cdrun: warning: --numa_binding: set_mempolicy: %s; "
            "binding CPUs only\n", strerror(errno));
  used = (size_t)snprintf(line, sizeof line, "--numa_binding=%s (%s "
                          "workers):", a->numa_binding,
                          ngpu > 0 ? "GPU" : "CPU");
  for (int i = 0; i < j->nproc && used < sizeof line; i++) {
    numa_format_list(&j->numa[i].cpus, cpus, sizeof cpus);
    used += (size_t)snprintf(line + used, sizeof line - used,
                             " %s%d:%s", i ? "| " : "", i, cpus);
  }
  fprintf(stderr, "cdrun: %s\n", line);
}

static int create_rdzv(void *arg, uv_loop_t *loop,
                       const struct rdzv_callbacks *cb, struct rdzv **out)
{
  struct job *j = arg;

  return rdzv_config_create(&j->rdzv, j->nproc, j->port, loop, cb, out);
}

/* True when any rank writes a log file the user may want to read. */
static bool logs_written(const struct job *j)
{
  int i;

  for (i = 0; i < j->nproc; i++)
    if (j->redirects[i] || j->tee[i])
      return true;
  return false;
}

/* Under a Slurm step, re-reads the arguments with Slurm's facts as
 * PET_* defaults (below the command line and the real PET_* variables);
 * *penv becomes the environment that was read. */
static void apply_slurm(struct cdrun_args *a, int argc, char **argv,
                        struct slurm_env *se, char ***penv)
{
  char err[512];

  *penv = environ;
  memset(se, 0, sizeof *se);
  if (a->standalone || a->hostfile || a->hosts || a->help || a->version)
    return;
  if (slurm_env_derive(environ, se, err, sizeof err))
    die_usage("%s", err);
  if (!se->active)
    return;
  *penv = slurm_env_augment(environ, se);
  if (!*penv)
    die_usage("out of memory");
  args_free(a);
  if (args_parse(a, argc, argv, *penv, err, sizeof err) != 0)
    die_usage("%s", err);
}

/* Started with a standard fd closed (`cdrun ... <&- >&-`), the next
 * open() -- libuv's own sockets included -- would land on 0..2 and be
 * taken for a console.  /dev/null holds those slots instead. */
static void fill_std_fds(void)
{
  int fd;

  for (fd = 0; fd <= 2; fd++) {
    if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
      continue;
    if (open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) < 0)
      exit(AGENT_EXIT_INTERNAL);
  }
}

/* Parses the command line (then again with Slurm's facts, apply_slurm);
 * a bad one ends cdrun with a usage error. */
static void parse_args(struct cdrun_args *a, int argc, char **argv,
                       struct slurm_env *se, char ***penv)
{
  char err[512];
  int rc = args_parse(a, argc, argv, environ, err, sizeof err);

  if (rc) {
    /* An option it does not know: argparse's usage line first. */
    if (rc == -ENOENT)
      fprintf(stderr, "%s\n", args_usage_line());
    die_usage("%s", err);
  }
  apply_slurm(a, argc, argv, se, penv);
}

/* --help, --version, --print_completion: answered at once.  True when
 * one was. */
static bool answer_at_once(const struct cdrun_args *a)
{
  if (a->help) {
    fputs(args_usage(), stdout);
    return true;
  }
  if (a->version) {
    printf("cdrun %s\n", CDRUN_VERSION);
    return true;
  }
  if (a->print_completion) {
    args_print_completion(stdout, a->print_completion);
    return true;
  }
  return false;
}

/* The rendezvous configuration and, under Slurm, who serves it. */
static void resolve_rdzv(const struct cdrun_args *a,
                         const struct slurm_env *se, struct job *j)
{
  char err[512], warn[256];

  if (rdzv_config_resolve(a, j->run_id, &j->rdzv, err, sizeof err, warn,
                          sizeof warn))
    die_usage("%s", err);
  if (warn[0])
    say("warning: --rdzv_conf: unknown key%s %s ignored",
        strchr(warn, ',') ? "s" : "", warn);
  /* The first node of a Slurm step serves the rendezvous the others
   * were told about (unless rdzv_conf says otherwise). */
  if (se->active && j->rdzv.backend == BACKEND_RDZVD &&
      j->rdzv.host_mode == RDZV_HOST_AUTO &&
      slurm_env_source(se, environ, "PET_RDZV_ENDPOINT") &&
      args_origin_of(a, "rdzv_endpoint") == ARGS_ENV)
    j->rdzv.host_mode = se->node_rank == 0 ? RDZV_HOST_ALWAYS
                                           : RDZV_HOST_NEVER;
}

/* The number of workers on this node; returns where it came from (for
 * --print_config). */
static const char *resolve_nproc(const struct cdrun_args *a,
                                 const struct slurm_env *se, struct job *j)
{
  const char *from = "--nproc_per_node";
  char err[512];

  if (se->active && se->gpus_on_node > 0 &&
      (!strcmp(a->nproc_per_node, "gpu") || !strcmp(a->nproc_per_node,
                                                    "auto"))) {
    j->nproc = se->gpus_on_node;
    from = "Slurm (SLURM_GPUS_ON_NODE)";
  } else {
    j->nproc = nproc_resolve(a->nproc_per_node, err, sizeof err);
    if (j->nproc < 0)
      die_usage("%s", err);
    if (strcmp(a->nproc_per_node, "gpu") == 0 ||
        strcmp(a->nproc_per_node, "auto") == 0)
      from = "the CUDA devices visible";
  }
  /* RANK and WORLD_SIZE are ints, here and in every worker. */
  if ((long long)a->nnodes_max * j->nproc > INT_MAX)
    die_usage("--nnodes=%d with --nproc_per_node=%d: the world size %lld "
              "exceeds %d", a->nnodes_max, j->nproc,
              (long long)a->nnodes_max * j->nproc, INT_MAX);
  return from;
}

/* What every worker gets: its streams, NUMA binding, the handled
 * signals, the restart backoff and the command. */
static void resolve_workers(const struct cdrun_args *a, struct job *j,
                            struct backoff_conf *backoff)
{
  const char *env;
  char err[512];

  resolve_streams(a, j);
  if (a->numa_binding)
    resolve_numa(a, j);
  if (a->virtual_local_rank)
    check_virtual_devices(j->nproc);
  parse_signals(a->signals_to_handle, j);
  env = getenv(BACKOFF_ENV);
  if (env && backoff_conf_parse(env, backoff, err, sizeof err))
    die_usage("%s", err);
  j->cmd = build_command(a);
  if (!j->cmd)
    die_usage("out of memory");
}

/* A free port for MASTER_PORT, unless the static back end was given
 * one: the rdzvd back end offers it in case this node gets rank 0.
 * Returns 0 or a negative errno (said). */
static int reserve_master_port(struct job *j, bool live)
{
  int tries;

  if (j->rdzv.backend != BACKEND_STATIC || j->rdzv.master_port == 0) {
    /* Live recovery's store port is held too (Note [live store
     * port]). */
    for (tries = 0; live && tries < 64; tries++) {
      j->port_fd = port_reserve(&j->port);
      if (j->port_fd < 0)
        break;
      j->store_port_fd = port_reserve_at(j->port + LIVE_STORE_PORT_OFFSET);
      if (j->store_port_fd >= 0)
        return 0;
      close(j->port_fd);
    }
    j->port_fd = port_reserve(&j->port);
    if (j->port_fd < 0) {
      say_error("cannot find a free port for MASTER_PORT: %s",
                say_strerror(j->port_fd));
      return j->port_fd;
    }
  }
  return 0;
}

/* Note [taken master port] (port.h): node 0 of a static job whose
 * MASTER_PORT (--master_port, the endpoint's) another process listens on
 * fails before any worker starts.  A cdrun holding it is another node 0
 * of this job on this host, which the static barrier names. */
static int check_master_port(const struct job *j)
{
  char comm[64];
  long pid;
  int r;

  if (j->rdzv.backend != BACKEND_STATIC || j->rdzv.master_port == 0 ||
      j->rdzv.node_rank != 0)
    return 0;
  r = port_listener(j->rdzv.master_port, &pid, comm, sizeof comm);
  if (r <= 0 || strcmp(comm, "cdrun") == 0)
    return 0;                   /* free, or /proc cannot say */
  if (pid)
    say_error("MASTER_PORT %d is already in use: process %ld (%s) listens "
              "on it; rank 0's store could not bind it (choose another "
              "--master_port)", j->rdzv.master_port, pid, comm);
  else
    say_error("MASTER_PORT %d is already in use: another process listens on "
              "it (/proc does not say which: another user's); rank 0's store "
              "could not bind it (choose another --master_port)",
              j->rdzv.master_port);
  return -EADDRINUSE;
}

/* The agent process itself: torchrun's OMP banner, its environment for
 * the workers, and the signals it must survive. */
static void prepare_agent_process(const struct cdrun_args *a,
                                  const struct job *j,
                                  const struct slurm_env *se)
{
  /* torchrun's banner, once, when several workers would each start a
   * full OpenMP pool. */
  if (j->nproc > 1 && !getenv("OMP_NUM_THREADS"))
    fprintf(stderr,
            "*****************************************\n"
            "Setting OMP_NUM_THREADS environment variable for each process "
            "to be 1 in default, to avoid your system being overloaded, "
            "please further tune the variable for optimal performance in "
            "your application as needed. \n"
            "*****************************************\n");

  /* torchrun exports the handled signals to its workers' environment. */
  setenv("TORCHELASTIC_SIGNALS_TO_HANDLE", a->signals_to_handle, 1);

  /* Writing to a closed console must not kill the agent (and with it the
   * supervision of the workers); workers get the default back. */
  signal(SIGPIPE, SIG_IGN);
  /* Slurm signals every process of a step (scancel -s USR1 for a
   * checkpoint before preemption): the workers get it from Slurm; the
   * agent must not die of it unless told to handle it. */
  if (se->active) {
    int extra[] = { SIGUSR1, SIGUSR2 }, k, m;
    bool handled;

    for (k = 0; k < 2; k++) {
      handled = false;
      for (m = 0; m < j->nsignals; m++)
        handled |= j->signals[m] == extra[k];
      if (!handled)
        signal(extra[k], SIG_IGN);
    }
  }
}

/* The agent's options from the arguments and the resolved job (o borrows
 * from both, and from j->timer_file). */
/* A temporary log dir goes away unless it holds what the user needs:
 * worker logs, or the error files the failure summary points to (a run
 * that failed, not one that recovered after a restart). */
static bool logs_disposable(void *arg, int status)
{
  const struct job *j = arg;

  if (!j->log_base_is_temp)
    return false;
  if (logs_written(j)) {
    say("worker logs are in %s", j->run_log_dir);
    return false;
  }
  if (j->error_files_read && status != 0) {
    say("error files are in %s", j->run_log_dir);
    return false;
  }
  return true;
}

static void fill_agent_opts(const struct cdrun_args *a,
                            const struct slurm_env *se, struct job *j,
                            const struct backoff_conf *backoff,
                            struct agent_opts *o)
{
  const char *env;

  memset(o, 0, sizeof *o);
  o->nproc = j->nproc;
  o->cmd = j->cmd;
  o->target = a->target_argv[0];
  o->role = a->role;
  o->output.role = a->role;
  o->run_id = j->run_id;
  o->token_secret = j->rdzv.secret.key;
  o->token_secret_len = j->rdzv.secret.len;
  o->run_log_dir = j->run_log_dir;
  o->temp_log_base = j->log_base_is_temp ? j->log_base : NULL;
  o->output.redirects = j->redirects;
  o->output.tee = j->tee;
  o->output.console = j->console;
  o->output.prefix_template =
      a->log_line_prefix_template
          ? a->log_line_prefix_template
          : getenv("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");
  o->output.stdout_filters = j->stdout_filters;
  o->output.stderr_filters = j->stderr_filters;
  o->virtual_local_rank = a->virtual_local_rank;
  o->heartbeat_timeout = a->worker_heartbeat_timeout;
  o->numa = j->numa;
  o->numa_memory = j->numa_memory;
  /* torch's agent serves its file timer when asked in its environment. */
  if ((env = getenv("TORCHELASTIC_ENABLE_FILE_TIMER")) &&
      strcmp(env, "1") == 0) {
    env = getenv("TORCHELASTIC_TIMER_FILE");
    if (env && *env)
      snprintf(j->timer_file, sizeof j->timer_file, "%s", env);
    else
      snprintf(j->timer_file, sizeof j->timer_file, "%s/watchdog_timer",
               j->run_log_dir);
    o->timer_file = j->timer_file;
  }
  o->max_restarts = a->max_restarts;
  o->backoff = *backoff;
  o->grace_s = a->shutdown_timeout;
  o->cofailure_s = a->monitor_interval;
  o->signals = j->signals;
  o->nsignals = j->nsignals;
  o->default_omp_threads = j->nproc > 1;
  o->log_events = strcmp(a->event_log_handler, "console") == 0;
  o->rdzv_create = create_rdzv;
  o->error_files_read = &j->error_files_read;
  o->logs_disposable = logs_disposable;
  o->rdzv_arg = j;
  /* Note [fixed membership] (agent.h): srun or the head node started
   * every node, and neither can start a lost one again. */
  if (j->rdzv.backend != BACKEND_STATIC && a->nnodes_min == a->nnodes_max &&
      a->nnodes_max > 1 && (se->active || a->stdin_watchdog))
    o->fixed_source = se->active ? "Slurm's step" : "the hostfile";
  o->lost_grace_s = j->rdzv.lost_node_grace;
  o->live = strcmp(a->recovery, "live") == 0;
}

static void job_free(struct job *j)
{
  if (j->port_fd >= 0)
    close(j->port_fd);
  if (j->store_port_fd >= 0)
    close(j->store_port_fd);
  free(j->cmd);
  free(j->redirects);
  free(j->tee);
  free(j->console);
  free(j->numa);
  logs_filters_free(j->stdout_filters);
  logs_filters_free(j->stderr_filters);
}

int main(int argc, char **argv)
{
  struct cdrun_args a;
  struct agent_opts o;
  struct slurm_env se;
  struct job j;
  struct backoff_conf backoff = BACKOFF_CONF_DEFAULT;
  const char *nproc_from;
  char **penv;
  int status;

  fill_std_fds();
  parse_args(&a, argc, argv, &se, &penv);
  if (answer_at_once(&a)) {
    args_free(&a);
    return 0;
  }
  if ((a.hostfile || a.hosts) && !a.print_config) {
    status = multihost_run(&a, argc, argv);
    args_free(&a);
    if (se.active)
      free(penv);
    return status;
  }

  memset(&j, 0, sizeof j);
  j.port_fd = j.store_port_fd = -1;
  make_run_id(&a, j.run_id, sizeof j.run_id);
  resolve_rdzv(&a, &se, &j);
  nproc_from = resolve_nproc(&a, &se, &j);
  if (a.print_config) {
    print_config(stdout, &a, environ, &se, &j.rdzv, j.nproc, nproc_from);
    args_free(&a);
    if (se.active)
      free(penv);
    return 0;
  }
  if (a.stdin_watchdog && stdin_watchdog_start() != 0)
    return AGENT_EXIT_INTERNAL;
  resolve_workers(&a, &j, &backoff);
  if (check_master_port(&j) ||
      reserve_master_port(&j, strcmp(a.recovery, "live") == 0) ||
      setup_logs(&a, &j)) {
    job_free(&j);
    args_free(&a);
    if (se.active)
      free(penv);
    return AGENT_EXIT_INTERNAL;
  }
  prepare_agent_process(&a, &j, &se);
  fill_agent_opts(&a, &se, &j, &backoff, &o);
  status = agent_run(&o);   /* the log folder is settled meanwhile */
  job_free(&j);
  args_free(&a);
  if (se.active)
    free(penv);
  return status;
}
