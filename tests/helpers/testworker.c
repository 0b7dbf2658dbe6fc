/* testworker.c -- the worker program integration tests run under cdrun.
 * Each mode does one observable thing and records it in files under a
 * directory the test reads afterwards.
 *
 *   testworker env DIR              write DIR/env.<RANK> (torchrun vars)
 *   testworker fail DIR RANK CODE N like env, then rank RANK exits CODE
 *                                   while TORCHELASTIC_RESTART_COUNT < N,
 *                                   once every rank wrote its env file;
 *                                   the others wait to be stopped
 *   testworker kill RANK SIG        rank RANK kills itself with SIG
 *   testworker failall DIR CODE     every rank exits CODE at once, once
 *                                   all LOCAL_WORLD_SIZE ranks ignore
 *                                   SIGTERM (they meet through DIR)
 *   testworker errfile MSG [N]      writes TORCHELASTIC_ERROR_FILE, exits 1
 *                                   (with N: only while
 *                                   TORCHELASTIC_RESTART_COUNT < N, else 0)
 *   testworker errat MSG TS CODE    error file with timestamp TS, exits CODE
 *   testworker codes DIR TS,.. C,.. local rank i writes an error file with
 *                                   timestamp TS[i] ('-': no file) and
 *                                   exits C[i] once every failing rank is
 *                                   ready (SIGTERM ignored); C[i] 's':
 *                                   sleeps until stopped instead
 *   testworker failon DIR           DIR/pid.<RANK>, DIR/ppid.<RANK> (its
 *                                   agent), DIR/ready.<RANK>; then waits
 *                                   for DIR/fail.<RANK>, which holds an
 *                                   exit code C: with "C e", first writes
 *                                   an error file stamped with the time
 *                                   (microseconds); writes DIR/exited.
 *                                   <RANK> and exits C
 *   testworker errfifo              a FIFO at TORCHELASTIC_ERROR_FILE, exit 1
 *   testworker errbad               a malformed error file, exits 1
 *   testworker sleep DIR SECS [GSECS]
 *                                   DIR/pid.<RANK>, a grandchild's pid in
 *                                   DIR/gpid.<RANK>, then sleeps SECS (the
 *                                   grandchild GSECS, default SECS)
 *   testworker setsid DIR SECS      like sleep, but the grandchild calls
 *                                   setsid() and sleeps 600 s
 *   testworker daemon DIR SECS      like sleep, but the grandchild is a
 *                                   double-forked daemon (setsid, parent
 *                                   gone), sleeping 600 s
 *   testworker trap DIR SECS        on SIGTERM/SIGUSR1/...: DIR/sig.<RANK>
 *                                   holds the signal number, exit 0
 *   testworker ckpt DIR HSECS       a checkpointing worker: DIR/pid.<RANK>;
 *                                   on a signal N (TERM/INT/HUP/QUIT/USR1/
 *                                   USR2, others blocked meanwhile) writes
 *                                   DIR/sig<N>.<RANK>, sleeps HSECS, writes
 *                                   DIR/ckpt<N>.<RANK>; then exits 0 (on
 *                                   USR1/USR2 keeps running)
 *   testworker ignore DIR SECS      ignores SIGTERM/INT/HUP, DIR/pid.<RANK>,
 *                                   sleeps
 *   testworker print N              N lines on stdout, N on stderr
 *   testworker elastic DIR SECS     DIR/ws<WORLD_SIZE>.<RANK> holds the env,
 *                                   DIR/pid.<RANK> the pid, then sleeps
 *   testworker listen DIR           binds+listens MASTER_PORT (rank 0),
 *                                   DIR/port.<RANK> on success, waits
 *   testworker timer RANK SCOPE     torch's file timer protocol on
 *                                   TORCHELASTIC_TIMER_FILE: rank RANK
 *                                   sends junk, then a 1 s deadline for
 *                                   SCOPE and hangs; the others take a
 *                                   600 s one, release it, exit 0
 *   testworker hang DIR STEPS       pg_heartbeat() STEPS times (DIR/pid.<RANK>
 *                                   after the first), then hangs;
 *                                   STEPS < 0: -STEPS beats, exit 0
 *   testworker gate DIR             DIR/env.<RANK>.<RESTART_COUNT>.<WORLD_SIZE>
 *                                   and DIR/pid.<RANK>.<RESTART_COUNT>.
 *                                   <WORLD_SIZE>, then waits for DIR/go
 *                                   and exits 0 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/time.h>
#include <unistd.h>

#include "pg.h"

static const char *const torchrun_vars[] = {
  "RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME",
  "LOCAL_WORLD_SIZE", "WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE",
  "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
  "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
  "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE",
  "TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING",
  "OMP_NUM_THREADS", "CDRUN_TEST_INHERITED",
  "TORCHELASTIC_SIGNALS_TO_HANDLE", "NODE_RANK", NULL,
};

static const char *trap_dir;

static int env_int(const char *name)
{
  const char *v = getenv(name);

  return v ? (int)strtol(v, NULL, 10) : -1;
}

static void write_file(const char *dir, const char *what, const char *text)
{
  char path[4096], tmp[4200];
  FILE *f;

  snprintf(path, sizeof path, "%s/%s.%d", dir, what, env_int("RANK"));
  snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
  f = fopen(tmp, "w");
  if (!f) {
    perror(tmp);
    exit(3);
  }
  fputs(text, f);
  fclose(f);
  rename(tmp, path);    /* the test never sees a half-written file */
}

static void write_pid(const char *dir, const char *what, pid_t pid)
{
  char buf[32];

  snprintf(buf, sizeof buf, "%d\n", (int)pid);
  write_file(dir, what, buf);
}

/* The i-th entry of a comma list ("" past its end). */
static const char *pick(const char *list, int i)
{
  while (i-- > 0 && *list) {
    list += strcspn(list, ",");
    if (*list == ',')
      list++;
  }
  return list;
}

static void sleep_s(double s)
{
  struct timespec ts = { (time_t)s, (long)((s - (time_t)s) * 1e9) };

  while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
    ;
}

static void on_trap(int sig)
{
  char buf[16];

  snprintf(buf, sizeof buf, "%d\n", sig);
  write_file(trap_dir, "sig", buf);
  _exit(0);
}

static double ckpt_secs;

/* A checkpoint in a signal handler, as training scripts write one on
 * Slurm's warning signal or on SIGTERM. */
static void on_ckpt(int sig)
{
  char what[16];

  snprintf(what, sizeof what, "sig%d", sig);
  write_file(trap_dir, what, "1\n");
  sleep_s(ckpt_secs);
  snprintf(what, sizeof what, "ckpt%d", sig);
  write_file(trap_dir, what, "1\n");
  if (sig != SIGUSR1 && sig != SIGUSR2)
    _exit(0);
}

static __attribute__((noreturn)) void mode_ckpt(const char *dir, double secs)
{
  int sigs[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };
  struct sigaction sa;
  size_t i;

  trap_dir = dir;
  ckpt_secs = secs;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_ckpt;
  sigfillset(&sa.sa_mask);
  for (i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
    sigaction(sigs[i], &sa, NULL);
  write_pid(dir, "pid", getpid());
  for (;;)
    pause();
}

static int mode_env(const char *dir)
{
  char text[16384];
  size_t n = 0;
  int i;

  for (i = 0; torchrun_vars[i]; i++) {
    const char *v = getenv(torchrun_vars[i]);

    n += (size_t)snprintf(text + n, sizeof text - n, "%s=%s\n",
                          torchrun_vars[i], v ? v : "<unset>");
  }
  write_file(dir, "env", text);
  return 0;
}

static int mode_listen(const char *dir)
{
  struct sockaddr_in sa;
  int fd, one = 1;

  if (env_int("RANK") != 0)
    return 0;
  fd = socket(AF_INET, SOCK_STREAM, 0);
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((unsigned short)env_int("MASTER_PORT"));
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 8) < 0) {
    perror("bind MASTER_PORT");
    return 1;
  }
  {
    char line[32];

    snprintf(line, sizeof line, "%s\n", getenv("MASTER_PORT"));
    write_file(dir, "port", line);
  }
  sleep_s(2);
  close(fd);
  return 0;
}

/* One line to the file timer FIFO, as torch's FileTimerClient writes it:
 * opened O_WRONLY|O_NONBLOCK, one write of at most PIPE_BUF bytes. */
static void timer_send(const char *line)
{
  const char *path = getenv("TORCHELASTIC_TIMER_FILE");
  int fd = path ? open(path, O_WRONLY | O_NONBLOCK) : -1;

  if (fd < 0 || write(fd, line, strlen(line)) != (ssize_t)strlen(line)) {
    perror("file timer");
    exit(5);
  }
  close(fd);
}

static int mode_timer(int hang_rank, const char *scope)
{
  char line[1024];
  struct timeval tv;
  double now;

  gettimeofday(&tv, NULL);
  now = (double)tv.tv_sec + tv.tv_usec / 1e6;
  if (env_int("RANK") == hang_rank) {
    timer_send("not json\n");
    timer_send("{\"version\": 1, \"pid\": 0, \"scope_id\": \"x\", "
               "\"expiration_time\": 1, \"signal\": 9}\n");
    snprintf(line, sizeof line, "{\"version\": 1, \"pid\": %d, "
             "\"scope_id\": \"%s\", \"expiration_time\": %.6f, "
             "\"signal\": 9}\n", (int)getpid(), scope, now + 1);
    timer_send(line);
    sleep_s(600);
    return 0;
  }
  snprintf(line, sizeof line, "{\"version\": 1, \"pid\": %d, \"scope_id\": "
           "\"ok\", \"expiration_time\": %.6f, \"signal\": 9}\n",
           (int)getpid(), now + 600);
  timer_send(line);
  snprintf(line, sizeof line, "{\"version\": 1, \"pid\": %d, \"scope_id\": "
           "\"ok\", \"expiration_time\": -1, \"signal\": 0}\n",
           (int)getpid());
  timer_send(line);
  return 0;
}

static int mode_hang(const char *dir, int steps)
{
  int n = steps < 0 ? -steps : steps, i, err;

  for (i = 0; i < n; i++) {
    err = pg_heartbeat();
    if (err) {
      fprintf(stderr, "pg_heartbeat: %s\n", strerror(-err));
      return 6;
    }
    if (i == 0)
      write_pid(dir, "pid", getpid());
    sleep_s(0.01);
  }
  if (steps < 0)
    return 0;
  sleep_s(600);
  return 0;
}

/* One piece on purpose: a flat table of the worker's modes, each a few
 * lines that a scenario names by its first argument; split, a reader
 * would hunt for a mode across functions. */
int main(int argc, char **argv)
{
  const char *mode = argc > 1 ? argv[1] : "";
  int rank = env_int("RANK"), i;

  if (strcmp(mode, "env") == 0 && argc == 3)
    return mode_env(argv[2]);
  if (strcmp(mode, "fail") == 0 && argc == 6) {
    int attempt = env_int("TORCHELASTIC_RESTART_COUNT");
    int world = env_int("WORLD_SIZE"), ready, r, k;
    char what[32], path[4096];

    mode_env(argv[2]);
    snprintf(what, sizeof what, "att%d", attempt);
    write_file(argv[2], what, "1\n");
    if (attempt >= atoi(argv[5]))
      return 0;         /* nobody fails in this attempt */
    if (rank != atoi(argv[3])) {
      sleep_s(120);     /* the failure stops us; never succeed first */
      return 0;
    }
    /* Fail only once every rank of the world wrote its env file for this
     * attempt: the test reads them all. */
    for (k = 0; k < 120000; k++) {
      for (ready = 0, r = 0; r < world; r++) {
        snprintf(path, sizeof path, "%s/%s.%d", argv[2], what, r);
        ready += access(path, F_OK) == 0;
      }
      if (ready == world)
        break;
      sleep_s(0.001);
    }
    return atoi(argv[4]);
  }
  if (strcmp(mode, "failall") == 0 && argc == 4) {
    char path[4096];
    int n = env_int("LOCAL_WORLD_SIZE"), ready, r;

    /* A rank the agent's SIGTERM reaches before it ignores it would die
     * of the stop signal, not fail: meet first. */
    signal(SIGTERM, SIG_IGN);
    write_file(argv[2], "ready", "1\n");
    do {
      for (ready = 0, r = 0; r < n; r++) {
        snprintf(path, sizeof path, "%s/ready.%d", argv[2], r);
        ready += access(path, F_OK) == 0;
      }
      if (ready < n)
        sleep_s(0.001);
    } while (ready < n);
    return atoi(argv[3]);
  }
  if (strcmp(mode, "kill") == 0 && argc == 4) {
    if (rank == atoi(argv[2])) {
      signal(atoi(argv[3]), SIG_DFL);
      raise(atoi(argv[3]));
    }
    sleep_s(0.2);
    return 0;
  }
  if (strcmp(mode, "errfile") == 0 && (argc == 3 || argc == 4)) {
    FILE *f;

    if (argc == 4 && env_int("TORCHELASTIC_RESTART_COUNT") >= atoi(argv[3]))
      return 0;
    f = fopen(getenv("TORCHELASTIC_ERROR_FILE"), "w");
    if (!f)
      return 4;
    fprintf(f, "{\"message\": {\"message\": \"%s\", \"extraInfo\": "
            "{\"py_callstack\": \"Traceback: %s at rank %d\", "
            "\"timestamp\": \"%ld\"}}}", argv[2], argv[2], rank,
            (long)time(NULL));
    fclose(f);
    return 1;
  }
  if (strcmp(mode, "errat") == 0 && argc == 5) {
    FILE *f = fopen(getenv("TORCHELASTIC_ERROR_FILE"), "w");

    if (!f)
      return 4;
    fprintf(f, "{\"message\": {\"message\": \"%s rank %d\", \"extraInfo\": "
            "{\"timestamp\": \"%s\"}}}", argv[2], rank, argv[3]);
    fclose(f);
    return atoi(argv[4]);
  }
  if (strcmp(mode, "codes") == 0 && argc == 5) {
    const char *ts = pick(argv[3], env_int("LOCAL_RANK"));
    const char *code = pick(argv[4], env_int("LOCAL_RANK"));
    char path[4096];
    int n = env_int("LOCAL_WORLD_SIZE"), ready, r;

    if (code[0] == 's') {
      write_pid(argv[2], "pid", getpid());
      sleep_s(600);
      return 0;
    }
    if (ts[0] != '-') {
      FILE *f = fopen(getenv("TORCHELASTIC_ERROR_FILE"), "w");

      if (!f)
        return 4;
      fprintf(f, "{\"message\": {\"message\": \"rank %d failed\", "
              "\"extraInfo\": {\"timestamp\": \"%.*s\"}}}", rank,
              (int)strcspn(ts, ","), ts);
      fclose(f);
    }
    signal(SIGTERM, SIG_IGN);
    write_file(argv[2], "ready", "1\n");
    do {    /* every failing rank is ready: they fail together */
      for (ready = 0, r = 0; r < n; r++) {
        snprintf(path, sizeof path, "%s/ready.%d", argv[2], r);
        ready += access(path, F_OK) == 0 ||
                 pick(argv[4], r)[0] == 's';
      }
      if (ready < n)
        sleep_s(0.001);
    } while (ready < n);
    return atoi(code);
  }
  if (strcmp(mode, "failon") == 0 && argc == 3) {
    char path[4096], how[64] = "";
    struct timeval tv;
    int code = 0;
    FILE *f;

    write_pid(argv[2], "pid", getpid());
    write_pid(argv[2], "ppid", getppid());
    write_file(argv[2], "ready", "1\n");
    snprintf(path, sizeof path, "%s/fail.%d", argv[2], rank);
    for (;;) {     /* until the file holds its code (it may be half written) */
      f = fopen(path, "r");
      if (f && fscanf(f, "%d %63s", &code, how) >= 1) {
        fclose(f);
        break;
      }
      if (f)
        fclose(f);
      sleep_s(0.01);
    }
    if (how[0] == 'e') {
      gettimeofday(&tv, NULL);
      f = fopen(getenv("TORCHELASTIC_ERROR_FILE"), "w");
      if (!f)
        return 4;
      fprintf(f, "{\"message\": {\"message\": \"OSError: [Errno 28] No "
              "space left on device (rank %d)\", \"extraInfo\": "
              "{\"timestamp\": \"%ld.%06ld\"}}}", rank, (long)tv.tv_sec,
              (long)tv.tv_usec);
      fclose(f);
    }
    write_file(argv[2], "exited", "1\n");
    return code;
  }
  if (strcmp(mode, "errfifo") == 0 && argc == 2) {
    if (mkfifo(getenv("TORCHELASTIC_ERROR_FILE"), 0600) < 0)
      return 4;
    return 1;
  }
  if (strcmp(mode, "errbad") == 0 && argc == 2) {
    FILE *f = fopen(getenv("TORCHELASTIC_ERROR_FILE"), "w");

    if (!f)
      return 4;
    fputs("{\"message\": oops", f);
    fclose(f);
    return 1;
  }
  if (strcmp(mode, "sleep") == 0 && (argc == 4 || argc == 5)) {
    pid_t child = fork();

    if (child == 0) {
      sleep_s(atof(argv[argc == 5 ? 4 : 3]));
      _exit(0);
    }
    write_pid(argv[2], "gpid", child);
    write_pid(argv[2], "pid", getpid());
    sleep_s(atof(argv[3]));
    return 0;
  }
  if ((strcmp(mode, "setsid") == 0 || strcmp(mode, "daemon") == 0) &&
      argc == 4) {
    int p[2];
    pid_t child, gchild = 0;

    if (pipe(p) < 0)
      return 4;
    child = fork();
    if (child == 0) {
      close(p[0]);
      setsid();
      if (strcmp(mode, "daemon") == 0 && fork() != 0)
        _exit(0);       /* the daemon's parent leaves at once */
      gchild = getpid();
      if (write(p[1], &gchild, sizeof gchild) != sizeof gchild)
        _exit(4);
      close(p[1]);
      sleep_s(600);
      _exit(0);
    }
    close(p[1]);
    if (read(p[0], &gchild, sizeof gchild) != sizeof gchild)
      return 4;
    write_pid(argv[2], "gpid", gchild);
    write_pid(argv[2], "pid", getpid());
    sleep_s(atof(argv[3]));
    return 0;
  }
  if (strcmp(mode, "trap") == 0 && argc == 4) {
    int sigs[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };

    trap_dir = argv[2];
    for (i = 0; i < (int)(sizeof sigs / sizeof sigs[0]); i++)
      signal(sigs[i], on_trap);
    write_pid(argv[2], "pid", getpid());
    sleep_s(atof(argv[3]));
    return 0;
  }
  if (strcmp(mode, "ckpt") == 0 && argc == 4)
    mode_ckpt(argv[2], atof(argv[3]));
  if (strcmp(mode, "ignore") == 0 && argc == 4) {
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    write_pid(argv[2], "pid", getpid());
    sleep_s(atof(argv[3]));
    return 0;
  }
  if (strcmp(mode, "print") == 0 && argc == 3) {
    for (i = 0; i < atoi(argv[2]); i++) {
      printf("out rank=%d line=%d\n", rank, i);
      fprintf(stderr, "err rank=%d line=%d\n", rank, i);
    }
    return 0;
  }
  if (strcmp(mode, "elastic") == 0 && argc == 4) {
    char what[64];

    snprintf(what, sizeof what, "ws%d", env_int("WORLD_SIZE"));
    mode_env(argv[2]);
    write_pid(argv[2], "pid", getpid());
    {
      char src[4096], dst[4096];

      snprintf(src, sizeof src, "%s/env.%d", argv[2], rank);
      snprintf(dst, sizeof dst, "%s/%s.%d", argv[2], what, rank);
      rename(src, dst);
    }
    sleep_s(atof(argv[3]));
    return 0;
  }
  if (strcmp(mode, "listen") == 0 && argc == 3)
    return mode_listen(argv[2]);
  if (strcmp(mode, "gate") == 0 && argc == 3) {
    char what[64], path[4096];

    snprintf(what, sizeof what, "%d.%d", env_int("TORCHELASTIC_RESTART_COUNT"),
             env_int("WORLD_SIZE"));
    mode_env(argv[2]);
    write_pid(argv[2], "pid", getpid());
    {
      char src[4096], dst[4096];

      snprintf(src, sizeof src, "%s/env.%d", argv[2], rank);
      snprintf(dst, sizeof dst, "%s/env.%d.%s", argv[2], rank, what);
      rename(src, dst);
      snprintf(src, sizeof src, "%s/pid.%d", argv[2], rank);
      snprintf(dst, sizeof dst, "%s/pid.%d.%s", argv[2], rank, what);
      rename(src, dst);
    }
    snprintf(path, sizeof path, "%s/go", argv[2]);
    while (access(path, F_OK) != 0)
      sleep_s(0.02);
    return 0;
  }
  if (strcmp(mode, "timer") == 0 && argc == 4)
    return mode_timer(atoi(argv[2]), argv[3]);
  if (strcmp(mode, "hang") == 0 && argc == 4)
    return mode_hang(argv[2], atoi(argv[3]));
  fprintf(stderr, "testworker: bad arguments (mode '%s')\n", mode);
  return 64;
}
