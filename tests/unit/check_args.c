/* check_args.c -- unit tests for the command line parser (launcher/args.c). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"

static struct cdrun_args A;
static char err[256];

/* argv and env are NULL-terminated compound literals living in the
 * calling test's block, so target_argv stays valid there. */
static int parse_env(char **env, char **argv)
{
  int argc = 0;

  while (argv[argc])
    argc++;
  return args_parse(&A, argc, argv, env, err, sizeof err);
}

#define ARGV(...) ((char *[]){ "cdrun", ##__VA_ARGS__, NULL })
#define ENV(...) ((char *[]){ __VA_ARGS__, NULL })
#define PARSE(...) parse_env(NULL, ARGV(__VA_ARGS__))
#define PARSE_ENV(env, ...) parse_env(env, ARGV(__VA_ARGS__))

#define ck_assert_ok(rc) \
  ck_assert_msg((rc) == 0, "parse failed: rc %d, err '%s'", (rc), err)

/* An error: -EINVAL, one line naming `needle`, nothing left to free. */
#define ck_assert_einval(rc, needle) ck_assert_fails(rc, -EINVAL, needle)
/* An option args_parse does not know: the caller adds the usage line. */
#define ck_assert_unknown(rc, needle) ck_assert_fails(rc, -ENOENT, needle)
#define ck_assert_fails(rc, code, needle) do { \
    int rc_ = (rc); \
    ck_assert_int_eq(rc_, (code)); \
    ck_assert_msg(strstr(err, (needle)) != NULL, \
                  "err '%s' lacks '%s'", err, (needle)); \
    ck_assert_ptr_null(strchr(err, '\n')); \
    ck_assert_ptr_null(A.nproc_per_node); \
    ck_assert_ptr_null(A.signals_to_handle); \
  } while (0)

static void setup(void)
{
  memset(&A, 0, sizeof A);
  memset(err, 0, sizeof err);
}

/* Every successful parse is freed here; args_free is idempotent, so a
 * test that freed explicitly is fine too. */
static void teardown(void)
{
  args_free(&A);
}

static void assert_defaults(void)
{
  ck_assert_int_eq(A.nnodes_min, 1);
  ck_assert_int_eq(A.nnodes_max, 1);
  ck_assert_str_eq(A.nproc_per_node, "1");
  ck_assert_str_eq(A.rdzv_backend, "static");
  ck_assert_str_eq(A.rdzv_endpoint, "");
  ck_assert_str_eq(A.rdzv_id, "none");
  ck_assert_str_eq(A.rdzv_conf, "");
  ck_assert(!A.standalone);
  ck_assert_int_eq(A.max_restarts, 0);
  ck_assert_str_eq(A.recovery, "restart");
  ck_assert_double_eq_tol(A.monitor_interval, 0.1, 1e-12);
  ck_assert_str_eq(A.start_method, "spawn");
  ck_assert_str_eq(A.role, "default");
  ck_assert(!A.module);
  ck_assert(!A.no_python);
  ck_assert(!A.run_path);
  ck_assert_ptr_null(A.log_dir);
  ck_assert_str_eq(A.redirects, "0");
  ck_assert_str_eq(A.tee, "0");
  ck_assert_ptr_null(A.local_ranks_filter);
  ck_assert_int_eq(A.node_rank, 0);
  ck_assert_ptr_null(A.master_addr);
  ck_assert_int_eq(A.master_port, 0);
  ck_assert_ptr_null(A.local_addr);
  ck_assert_str_eq(A.signals_to_handle, "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  ck_assert_double_eq_tol(A.shutdown_timeout, 30.0, 1e-12);
  ck_assert_str_eq(A.event_log_handler, "null");
}

START_TEST(test_defaults)
{
  char **argv = ARGV("train.py");

  ck_assert_ok(parse_env(ENV("HOME=/root"), argv));
  assert_defaults();
  ck_assert(!A.help);
  ck_assert(!A.version);
  ck_assert_int_eq(A.target_argc, 1);
  ck_assert_ptr_eq(A.target_argv, argv + 1);
  ck_assert_str_eq(A.target_argv[0], "train.py");
  ck_assert_ptr_null(A.target_argv[1]);
}
END_TEST

START_TEST(test_defaults_are_heap_copies)
{
  struct cdrun_args first;

  ck_assert_ok(PARSE("t"));
  first = A;
  memset(&A, 0, sizeof A);
  ck_assert_ok(PARSE("t"));
  /* Two parses must not share storage (no static defaults). */
  ck_assert_ptr_ne(first.nproc_per_node, A.nproc_per_node);
  ck_assert_ptr_ne(first.rdzv_endpoint, A.rdzv_endpoint);
  ck_assert_ptr_ne(first.signals_to_handle, A.signals_to_handle);
  args_free(&first);
  ck_assert_ptr_null(first.nproc_per_node);
  ck_assert_ptr_null(first.event_log_handler);
  args_free(&first);            /* idempotent */
  args_free(NULL);
}
END_TEST

/* String flags: both spellings, = and space forms. */
struct str_case {
  const char *flag;
  size_t off;
  const char *value;
};

static const struct str_case str_cases[] = {
  { "nproc_per_node", offsetof(struct cdrun_args, nproc_per_node), "4" },
  { "rdzv_backend", offsetof(struct cdrun_args, rdzv_backend), "c10d" },
  { "rdzv_endpoint", offsetof(struct cdrun_args, rdzv_endpoint),
    "host:29400" },
  { "rdzv_id", offsetof(struct cdrun_args, rdzv_id), "job42" },
  { "rdzv_conf", offsetof(struct cdrun_args, rdzv_conf), "timeout=5" },
  { "start_method", offsetof(struct cdrun_args, start_method), "fork" },
  { "role", offsetof(struct cdrun_args, role), "trainer" },
  { "log_dir", offsetof(struct cdrun_args, log_dir), "/tmp/logs" },
  { "redirects", offsetof(struct cdrun_args, redirects), "0:1,1:3" },
  { "tee", offsetof(struct cdrun_args, tee), "2" },
  { "local_ranks_filter", offsetof(struct cdrun_args, local_ranks_filter),
    "0,2" },
  { "master_addr", offsetof(struct cdrun_args, master_addr), "10.0.0.1" },
  { "local_addr", offsetof(struct cdrun_args, local_addr), "10.0.0.2" },
  { "signals_to_handle", offsetof(struct cdrun_args, signals_to_handle),
    "SIGUSR1,SIGTERM" },
  { "event_log_handler", offsetof(struct cdrun_args, event_log_handler),
    "console" },
};

static const char *str_field(const struct cdrun_args *a, size_t off)
{
  return *(char *const *)((const char *)a + off);
}

static void dashed(char *out, size_t n, const char *flag)
{
  snprintf(out, n, "--%s", flag);
  for (char *c = out + 2; *c; c++)
    if (*c == '_')
      *c = '-';
}

START_TEST(test_string_flags_all_forms)
{
  const struct str_case *c = &str_cases[_i];
  char under[64], dash[64], under_eq[128], dash_eq[128];

  snprintf(under, sizeof under, "--%s", c->flag);
  dashed(dash, sizeof dash, c->flag);
  snprintf(under_eq, sizeof under_eq, "%s=%s", under, c->value);
  snprintf(dash_eq, sizeof dash_eq, "%s=%s", dash, c->value);

  char *forms[4][3] = {
    { under, (char *)c->value, NULL },
    { dash, (char *)c->value, NULL },
    { under_eq, NULL, NULL },
    { dash_eq, NULL, NULL },
  };
  for (int f = 0; f < 4; f++) {
    char *argv[5] = { "cdrun", forms[f][0], forms[f][1], NULL, NULL };
    int argc = forms[f][1] ? 4 : 3;

    argv[argc - 1] = "train.py";
    ck_assert_ok(args_parse(&A, argc, argv, NULL, err, sizeof err));
    ck_assert_str_eq(str_field(&A, c->off), c->value);
    ck_assert_int_eq(A.target_argc, 1);
    ck_assert_str_eq(A.target_argv[0], "train.py");
    args_free(&A);
  }
}
END_TEST

START_TEST(test_numeric_flags)
{
  ck_assert_ok(PARSE("--nnodes", "2", "--max-restarts=3",
                     "--monitor_interval", "0.5", "--node-rank", "1",
                     "--master_port=29500", "--shutdown-timeout", "2.5",
                     "t"));
  ck_assert_int_eq(A.nnodes_min, 2);
  ck_assert_int_eq(A.nnodes_max, 2);
  ck_assert_int_eq(A.max_restarts, 3);
  ck_assert_double_eq_tol(A.monitor_interval, 0.5, 1e-12);
  ck_assert_int_eq(A.node_rank, 1);
  ck_assert_int_eq(A.master_port, 29500);
  ck_assert_double_eq_tol(A.shutdown_timeout, 2.5, 1e-12);
  args_free(&A);

  ck_assert_ok(PARSE("--max_restarts", "0", "--shutdown_timeout=0",
                     "--master-port", "65535", "--monitor-interval=1e-3",
                     "t"));
  ck_assert_int_eq(A.max_restarts, 0);
  ck_assert_double_eq(A.shutdown_timeout, 0.0);
  ck_assert_int_eq(A.master_port, 65535);
  ck_assert_double_eq_tol(A.monitor_interval, 0.001, 1e-12);
}
END_TEST

START_TEST(test_short_redirects_tee)
{
  ck_assert_ok(PARSE("-r3", "-t", "1", "t"));
  ck_assert_str_eq(A.redirects, "3");
  ck_assert_str_eq(A.tee, "1");
  args_free(&A);

  ck_assert_ok(PARSE("-r", "0:1,1:2", "-t2", "t"));
  ck_assert_str_eq(A.redirects, "0:1,1:2");
  ck_assert_str_eq(A.tee, "2");
  args_free(&A);

  ck_assert_ok(PARSE("-r=1", "-t=3", "t"));
  ck_assert_str_eq(A.redirects, "1");
  ck_assert_str_eq(A.tee, "3");
}
END_TEST

START_TEST(test_booleans)
{
  ck_assert_ok(PARSE("--standalone", "t"));
  ck_assert(A.standalone);
  ck_assert(!A.module && !A.no_python && !A.run_path);
  args_free(&A);

  ck_assert_ok(PARSE("-m", "pkg.train"));
  ck_assert(A.module);
  ck_assert_str_eq(A.target_argv[0], "pkg.train");
  args_free(&A);

  ck_assert_ok(PARSE("--module", "pkg.train"));
  ck_assert(A.module);
  ck_assert(!A.standalone);
  args_free(&A);

  ck_assert_ok(PARSE("--no_python", "/bin/true"));
  ck_assert(A.no_python);
  ck_assert(!A.module);
  args_free(&A);

  ck_assert_ok(PARSE("--no-python", "--run-path", "/bin/true"));
  ck_assert(A.no_python);
  ck_assert(A.run_path);
  args_free(&A);

  ck_assert_ok(PARSE("--run_path", "t"));
  ck_assert(A.run_path);
  ck_assert(!A.no_python);
}
END_TEST

START_TEST(test_nnodes)
{
  ck_assert_ok(PARSE("--nnodes=1:4", "t"));
  ck_assert_int_eq(A.nnodes_min, 1);
  ck_assert_int_eq(A.nnodes_max, 4);
  args_free(&A);

  ck_assert_ok(PARSE("--nnodes", "3:3", "t"));
  ck_assert_int_eq(A.nnodes_min, 3);
  ck_assert_int_eq(A.nnodes_max, 3);
}
END_TEST

static const char *const bad_nnodes[] = {
  "0", "3:2", "a:b", "1:", ":2", "0:2", "-1", "1:2:3", "", "2x",
  "99999999999",
};

START_TEST(test_nnodes_errors)
{
  char arg[64];

  snprintf(arg, sizeof arg, "--nnodes=%s", bad_nnodes[_i]);
  ck_assert_einval(PARSE(arg, "t"), "--nnodes");
  ck_assert_ptr_nonnull(strstr(err, "MIN:MAX"));
}
END_TEST

START_TEST(test_nproc)
{
  static const char *const ok[] = { "cpu", "gpu", "auto", "8" };

  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    ck_assert_ok(PARSE("--nproc_per_node", (char *)ok[i], "t"));
    ck_assert_str_eq(A.nproc_per_node, ok[i]);
    args_free(&A);
  }
  /* Integers are stored in canonical form. */
  ck_assert_ok(PARSE("--nproc-per-node=+04", "t"));
  ck_assert_str_eq(A.nproc_per_node, "4");
}
END_TEST

static const char *const bad_nproc[] = {
  "0", "-1", "xpu", "4x", "", "GPU", " 4", "1.5",
};

START_TEST(test_nproc_errors)
{
  char arg[64];

  snprintf(arg, sizeof arg, "--nproc_per_node=%s", bad_nproc[_i]);
  ck_assert_einval(PARSE(arg, "t"), "--nproc_per_node");
  ck_assert_ptr_nonnull(strstr(err, "cpu, gpu or auto"));
  snprintf(arg, sizeof arg, "'%s'", bad_nproc[_i]);
  ck_assert_ptr_nonnull(strstr(err, arg));
}
END_TEST

/* Each invalid value kind: flag, bad value, words the message needs. */
struct bad_case {
  const char *flag;
  const char *value;
  const char *expect;
};

static const struct bad_case bad_values[] = {
  { "--max_restarts", "x", "integer 0..2147483647" },
  { "--max_restarts", "-1", "integer 0..2147483647" },
  { "--max_restarts", "1.5", "integer 0..2147483647" },
  { "--node_rank", "-1", "integer 0..2147483647" },
  { "--node-rank", "one", "integer 0..2147483647" },
  { "--master_port", "0", "1..65535" },
  { "--master_port", "65536", "1..65535" },
  { "--master-port", "http", "1..65535" },
  { "--monitor_interval", "0", "> 0" },
  { "--monitor_interval", "-0.5", "> 0" },
  { "--monitor_interval", "abc", "> 0" },
  { "--monitor_interval", "inf", "> 0" },
  { "--monitor_interval", "nan", "> 0" },
  { "--monitor_interval", "0x10", "> 0" },
  { "--shutdown_timeout", "-1", "0..10000000" },
  { "--shutdown_timeout", "1e999", "0..10000000" },
  { "--shutdown_timeout", "1e30", "0..10000000" },
  { "--shutdown-timeout", "soon", "0..10000000" },
  { "--monitor_interval", "1e30", "at most 10000000" },
  { "--nproc_per_node", "70000", "integer 1..65536, cpu, gpu or auto" },
  { "--nproc_per_node", "99999999999999999999", "integer 1..65536" },
  { "--max_restarts", "2147483648", "integer 0..2147483647" },
  { "--start_method", "thread", "spawn, fork or forkserver" },
  { "--start_method", "", "spawn, fork or forkserver" },
  { "--event_log_handler", "file", "null or console" },
  { "--recovery", "fast", "restart or live" },
  { "--recovery", "", "restart or live" },
  { "--signals_to_handle", "SIGTERM,SIGFOO", "unknown signal 'SIGFOO'" },
  { "--signals_to_handle", "TERM", "unknown signal 'TERM'" },
  { "--signals_to_handle", "SIGKILL", "SIGXCPU" },
  { "--signals_to_handle", "SIGTERM,,SIGINT", "empty signal name" },
  { "--signals_to_handle", "", "empty signal name" },
  { "--signals-to-handle", "sigterm", "unknown signal" },
};

/* --recovery=restart|live, both spellings (one word), PET_RECOVERY. */
START_TEST(test_recovery)
{
  ck_assert_ok(PARSE("--recovery=live", "t"));
  ck_assert_str_eq(A.recovery, "live");
  ck_assert_int_eq(args_origin_of(&A, "recovery"), ARGS_FLAG);
  args_free(&A);
  ck_assert_ok(PARSE("--recovery", "restart", "t"));
  ck_assert_str_eq(A.recovery, "restart");
  args_free(&A);
  ck_assert_ok(PARSE_ENV(ENV("PET_RECOVERY=live"), "t"));
  ck_assert_str_eq(A.recovery, "live");
  ck_assert_int_eq(args_origin_of(&A, "recovery"), ARGS_ENV);
  args_free(&A);
  /* The flag wins over the environment. */
  ck_assert_ok(PARSE_ENV(ENV("PET_RECOVERY=live"), "--recovery=restart",
                         "t"));
  ck_assert_str_eq(A.recovery, "restart");
  args_free(&A);
  ck_assert_einval(PARSE_ENV(ENV("PET_RECOVERY=later"), "t"),
                   "PET_RECOVERY");
}
END_TEST

START_TEST(test_invalid_values)
{
  const struct bad_case *c = &bad_values[_i];
  char quoted[64];

  ck_assert_einval(PARSE((char *)c->flag, (char *)c->value, "t"), c->flag);
  ck_assert_msg(strstr(err, c->expect) != NULL, "err '%s' lacks '%s'",
                err, c->expect);
  snprintf(quoted, sizeof quoted, "invalid value '%s'", c->value);
  ck_assert_msg(strstr(err, quoted) != NULL, "err '%s' lacks '%s'", err,
                quoted);
}
END_TEST

START_TEST(test_signals_normalized)
{
  ck_assert_ok(PARSE("--signals_to_handle", " SIGUSR1 , SIGXCPU,SIGHUP",
                     "t"));
  ck_assert_str_eq(A.signals_to_handle, "SIGUSR1,SIGXCPU,SIGHUP");
  args_free(&A);

  ck_assert_ok(PARSE("--signals_to_handle=SIGTERM,SIGINT,SIGHUP,SIGQUIT,"
                     "SIGUSR1,SIGUSR2,SIGABRT,SIGALRM,SIGXCPU", "t"));
  ck_assert_str_eq(A.signals_to_handle, "SIGTERM,SIGINT,SIGHUP,SIGQUIT,"
                   "SIGUSR1,SIGUSR2,SIGABRT,SIGALRM,SIGXCPU");
}
END_TEST

START_TEST(test_env_fallbacks)
{
  char **env = ENV("PET_NNODES=1:2", "PET_NPROC_PER_NODE=gpu",
                   "PET_RDZV_BACKEND=c10d", "PET_RDZV_ENDPOINT=h:1",
                   "PET_RDZV_ID=abc", "PET_RDZV_CONF=a=1",
                   "PET_MAX_RESTARTS=5", "PET_MONITOR_INTERVAL=2",
                   "PET_START_METHOD=forkserver", "PET_ROLE=r",
                   "PET_LOG_DIR=/l", "PET_REDIRECTS=3", "PET_TEE=1",
                   "PET_LOCAL_RANKS_FILTER=1", "PET_NODE_RANK=0",
                   "PET_MASTER_ADDR=m", "PET_MASTER_PORT=1234",
                   "PET_LOCAL_ADDR=la", "PET_SIGNALS_TO_HANDLE=SIGUSR2",
                   "PET_SHUTDOWN_TIMEOUT=7", "PET_EVENT_LOG_HANDLER=console",
                   "PET_STANDALONE=1", "PET_RUN_PATH=2",
                   "PET_NO_PYTHON=0", "PET_MODULE=0");

  ck_assert_ok(parse_env(env, ARGV("t")));
  ck_assert_int_eq(A.nnodes_min, 1);
  ck_assert_int_eq(A.nnodes_max, 2);
  ck_assert_str_eq(A.nproc_per_node, "gpu");
  ck_assert_str_eq(A.rdzv_backend, "c10d");
  ck_assert_str_eq(A.rdzv_endpoint, "h:1");
  ck_assert_str_eq(A.rdzv_id, "abc");
  ck_assert_str_eq(A.rdzv_conf, "a=1");
  ck_assert_int_eq(A.max_restarts, 5);
  ck_assert_double_eq_tol(A.monitor_interval, 2.0, 1e-12);
  ck_assert_str_eq(A.start_method, "forkserver");
  ck_assert_str_eq(A.role, "r");
  ck_assert_str_eq(A.log_dir, "/l");
  ck_assert_str_eq(A.redirects, "3");
  ck_assert_str_eq(A.tee, "1");
  ck_assert_str_eq(A.local_ranks_filter, "1");
  ck_assert_int_eq(A.node_rank, 0);
  ck_assert_str_eq(A.master_addr, "m");
  ck_assert_int_eq(A.master_port, 1234);
  ck_assert_str_eq(A.local_addr, "la");
  ck_assert_str_eq(A.signals_to_handle, "SIGUSR2");
  ck_assert_double_eq_tol(A.shutdown_timeout, 7.0, 1e-12);
  ck_assert_str_eq(A.event_log_handler, "console");
  ck_assert(A.standalone);
  ck_assert(A.run_path);
  ck_assert(!A.no_python);
  ck_assert(!A.module);
}
END_TEST

START_TEST(test_cmdline_beats_env)
{
  char **env = ENV("PET_NPROC_PER_NODE=2", "PET_MAX_RESTARTS=x",
                   "PET_NNODES=4", "PET_TEE=3", "PET_STANDALONE=0");

  /* Even an invalid PET_ value is ignored when the flag is given. */
  ck_assert_ok(parse_env(env, ARGV("--nproc-per-node=6", "--max_restarts",
                                   "1", "-t0", "--standalone", "t")));
  ck_assert_str_eq(A.nproc_per_node, "6");
  ck_assert_int_eq(A.max_restarts, 1);
  ck_assert_int_eq(A.nnodes_min, 4);
  ck_assert_int_eq(A.nnodes_max, 4);
  ck_assert_str_eq(A.tee, "0");
  ck_assert(A.standalone);
}
END_TEST

START_TEST(test_env_lookup_exact)
{
  /* Prefix-sharing names must not match, and unrelated variables stay
   * unrelated. */
  ck_assert_ok(parse_env(ENV("PET_NPROC_PER_NODE_X=9", "PET_NPROC=9",
                             "XPET_ROLE=z", "PET_ROLE"), ARGV("t")));
  ck_assert_str_eq(A.nproc_per_node, "1");
  ck_assert_str_eq(A.role, "default");
}
END_TEST

START_TEST(test_env_invalid)
{
  ck_assert_einval(parse_env(ENV("PET_MAX_RESTARTS=x"), ARGV("t")),
                   "PET_MAX_RESTARTS");
  ck_assert_str_eq(err, "PET_MAX_RESTARTS: invalid value 'x' (expected an "
                   "integer 0..2147483647)");
  ck_assert_einval(parse_env(ENV("PET_NPROC_PER_NODE=xpu"), ARGV("t")),
                   "PET_NPROC_PER_NODE: invalid value 'xpu'");
  ck_assert_einval(parse_env(ENV("PET_NNODES=3:1"), ARGV("t")),
                   "PET_NNODES");
  ck_assert_einval(parse_env(ENV("PET_SIGNALS_TO_HANDLE=SIGBUS"),
                             ARGV("t")), "PET_SIGNALS_TO_HANDLE");
  ck_assert_einval(parse_env(ENV("PET_STANDALONE=yes"), ARGV("t")),
                   "PET_STANDALONE: invalid value 'yes'");
  ck_assert_einval(parse_env(ENV("PET_MODULE="), ARGV("t")),
                   "PET_MODULE");
  ck_assert_einval(parse_env(ENV("PET_MASTER_PORT="), ARGV("t")),
                   "PET_MASTER_PORT");
  ck_assert_einval(parse_env(ENV("PET_LOGS_SPECS=x"), ARGV("t")),
                   "PET_LOGS_SPECS: not supported by cdrun");
  ck_assert_einval(parse_env(ENV("PET_NUMA_BINDING=rack"), ARGV("t")),
                   "PET_NUMA_BINDING: invalid value 'rack'");
}
END_TEST

START_TEST(test_env_empty_optional)
{
  /* An empty address or directory is the same as not given. */
  ck_assert_ok(parse_env(ENV("PET_LOG_DIR=", "PET_MASTER_ADDR="),
                         ARGV("t")));
  ck_assert_ptr_null(A.log_dir);
  ck_assert_ptr_null(A.master_addr);
}
END_TEST

START_TEST(test_shutdown_timeout_env)
{
  ck_assert_ok(parse_env(ENV("TORCH_ELASTIC_SHUTDOWN_TIMEOUT=12"),
                         ARGV("t")));
  ck_assert_double_eq_tol(A.shutdown_timeout, 12.0, 1e-12);
  args_free(&A);

  ck_assert_ok(parse_env(ENV("TORCH_ELASTIC_SHUTDOWN_TIMEOUT=12",
                             "PET_SHUTDOWN_TIMEOUT=3"), ARGV("t")));
  ck_assert_double_eq_tol(A.shutdown_timeout, 3.0, 1e-12);
  args_free(&A);

  ck_assert_ok(parse_env(ENV("TORCH_ELASTIC_SHUTDOWN_TIMEOUT=12",
                             "PET_SHUTDOWN_TIMEOUT=3"),
                         ARGV("--shutdown_timeout=0.25", "t")));
  ck_assert_double_eq_tol(A.shutdown_timeout, 0.25, 1e-12);
  args_free(&A);

  ck_assert_einval(parse_env(ENV("TORCH_ELASTIC_SHUTDOWN_TIMEOUT=-3"),
                             ARGV("t")), "TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
}
END_TEST

START_TEST(test_target_passthrough)
{
  char **argv = ARGV("--nproc_per_node", "2", "./train",
                     "--nproc_per_node=3", "-m", "--foo", "--", "x");

  ck_assert_ok(parse_env(NULL, argv));
  ck_assert_str_eq(A.nproc_per_node, "2");
  ck_assert(!A.module);
  ck_assert_int_eq(A.target_argc, 6);
  ck_assert_ptr_eq(A.target_argv, argv + 3);
  ck_assert_str_eq(A.target_argv[0], "./train");
  ck_assert_str_eq(A.target_argv[1], "--nproc_per_node=3");
  ck_assert_str_eq(A.target_argv[2], "-m");
  ck_assert_str_eq(A.target_argv[5], "x");
  args_free(&A);

  /* --help after the target belongs to the target. */
  ck_assert_ok(PARSE("t", "--help", "--version"));
  ck_assert(!A.help);
  ck_assert(!A.version);
  ck_assert_int_eq(A.target_argc, 3);
}
END_TEST

START_TEST(test_double_dash)
{
  char **argv = ARGV("--standalone", "--", "--weird", "-x");

  ck_assert_ok(parse_env(NULL, argv));
  ck_assert(A.standalone);
  ck_assert_int_eq(A.target_argc, 2);
  ck_assert_ptr_eq(A.target_argv, argv + 3);
  ck_assert_str_eq(A.target_argv[0], "--weird");
  args_free(&A);

  /* A second "--" is the target's. */
  ck_assert_ok(PARSE("--", "--"));
  ck_assert_int_eq(A.target_argc, 1);
  ck_assert_str_eq(A.target_argv[0], "--");
  args_free(&A);

  ck_assert_einval(PARSE("--standalone", "--"), "missing the training");
}
END_TEST

START_TEST(test_lone_dash_is_target)
{
  ck_assert_ok(PARSE("--no_python", "-", "-v"));
  ck_assert_int_eq(A.target_argc, 2);
  ck_assert_str_eq(A.target_argv[0], "-");
  ck_assert_str_eq(A.target_argv[1], "-v");
  args_free(&A);

  /* "-" is also a value, as in argparse. */
  ck_assert_ok(PARSE("--role", "-", "t"));
  ck_assert_str_eq(A.role, "-");
  ck_assert_str_eq(A.target_argv[0], "t");
}
END_TEST

START_TEST(test_repeated_flag_last_wins)
{
  ck_assert_ok(PARSE("--role=a", "--role", "b", "-r1", "--redirects=2",
                     "t"));
  ck_assert_str_eq(A.role, "b");
  ck_assert_str_eq(A.redirects, "2");
}
END_TEST

START_TEST(test_empty_value)
{
  ck_assert_ok(PARSE("--rdzv_endpoint=", "--log_dir=", "t"));
  ck_assert_str_eq(A.rdzv_endpoint, "");
  ck_assert_ptr_null(A.log_dir);
}
END_TEST

START_TEST(test_unknown_flags)
{
  ck_assert_unknown(PARSE("--foo", "t"), "unrecognized argument '--foo'");
  ck_assert_unknown(PARSE("--foo=1", "t"), "'--foo=1'");
  ck_assert_unknown(PARSE("-x", "t"), "unrecognized argument '-x'");
  ck_assert_unknown(PARSE("---nnodes=1", "t"), "unrecognized argument");
  /* argparse registers each name in one spelling or the other. */
  ck_assert_unknown(PARSE("--nproc-per_node=2", "t"),
                   "'--nproc-per_node=2'");
  ck_assert_unknown(PARSE("--nprocs", "2", "t"), "'--nprocs'");
  ck_assert_unknown(PARSE("--NNODES=1", "t"), "'--NNODES=1'");
  /* A near miss names the option meant, in the spelling typed. */
  ck_assert_unknown(PARSE("--nproc-per-nodes=2", "t"),
                    "'--nproc-per-nodes=2' (did you mean --nproc-per-node?)");
  ck_assert_unknown(PARSE("--max_restrats=2", "t"),
                    "(did you mean --max_restarts?)");
  ck_assert_unknown(PARSE("--foo", "t"), "'--foo'");
  ck_assert_ptr_null(strstr(err, "did you mean"));
}
END_TEST

START_TEST(test_missing_value)
{
  ck_assert_einval(PARSE("--max_restarts"), "--max_restarts: expected a "
                   "value");
  ck_assert_einval(PARSE("-r"), "-r: expected a value");
  ck_assert_einval(PARSE("--rdzv-id", "--standalone", "t"),
                   "--rdzv-id: expected a value");
  ck_assert_einval(PARSE("--log_dir", "--", "t"), "--log_dir: expected");
  /* A negative number is a value, rejected for what it is. */
  ck_assert_einval(PARSE("--max_restarts", "-1", "t"),
                   "--max_restarts: invalid value '-1'");
  ck_assert_einval(PARSE("--monitor_interval", "-.5", "t"),
                   "--monitor_interval: invalid value '-.5'");
}
END_TEST

START_TEST(test_bool_takes_no_value)
{
  ck_assert_einval(PARSE("--standalone=1", "t"), "--standalone");
  ck_assert_ptr_nonnull(strstr(err, "does not take a value"));
  ck_assert_einval(PARSE("--no-python=0", "t"), "--no-python");
  ck_assert_einval(PARSE("-m=1", "t"), "-m");
  ck_assert_einval(PARSE("-mx", "t"), "-m: does not take a value");
  ck_assert_einval(PARSE("--help=1"), "--help");
  ck_assert_einval(PARSE("--version=yes"), "--version");
}
END_TEST

START_TEST(test_unsupported)
{
  ck_assert_einval(PARSE("--logs_specs", "mod:Specs", "t"),
                   "--logs_specs: not supported by cdrun (it loads a "
                   "Python plugin)");
  ck_assert_einval(PARSE("--logs-specs=x", "t"), "--logs-specs");
  ck_assert_einval(PARSE("--numa_binding=rack", "t"),
                   "--numa_binding: invalid value 'rack' (expected node, "
                   "socket, exclusive or core-complex)");
  ck_assert_einval(PARSE("--numa_binding"), "--numa_binding: expected a "
                   "value");
}
END_TEST

/* torch 2.15's flags, in both spellings and from PET_*. */
START_TEST(test_torch215_flags)
{
  const char *modes[] = { "node", "socket", "exclusive", "core-complex" };

  ck_assert_ok(PARSE("t"));
  ck_assert_ptr_null(A.log_line_prefix_template);
  ck_assert_ptr_null(A.duplicate_stdout_filters);
  ck_assert_ptr_null(A.duplicate_stderr_filters);
  ck_assert(!A.virtual_local_rank);
  ck_assert_ptr_null(A.numa_binding);
  ck_assert_double_eq(A.worker_heartbeat_timeout, 0);
  args_free(&A);

  ck_assert_ok(PARSE("--log-line-prefix-template", "[${rank}]",
                     "--duplicate-stdout-filters=a,,b,c",
                     "--duplicate_stderr_filters", "err",
                     "--virtual-local-rank", "--numa-binding", "socket",
                     "--worker-heartbeat-timeout=2.5", "t"));
  ck_assert_str_eq(A.log_line_prefix_template, "[${rank}]");
  ck_assert_str_eq(A.duplicate_stdout_filters, "a,,b,c");
  ck_assert_str_eq(A.duplicate_stderr_filters, "err");
  ck_assert(A.virtual_local_rank);
  ck_assert_str_eq(A.numa_binding, "socket");
  ck_assert_double_eq(A.worker_heartbeat_timeout, 2.5);
  args_free(&A);

  for (size_t i = 0; i < 4; i++) {
    char flag[64];

    snprintf(flag, sizeof flag, "--numa_binding=%s", modes[i]);
    ck_assert_ok(PARSE(flag, "t"));
    ck_assert_str_eq(A.numa_binding, modes[i]);
    args_free(&A);
  }
  ck_assert_ok(PARSE_ENV(ENV("PET_VIRTUAL_LOCAL_RANK=1",
                             "PET_LOG_LINE_PREFIX_TEMPLATE=x",
                             "PET_WORKER_HEARTBEAT_TIMEOUT=7"), "t"));
  ck_assert(A.virtual_local_rank);
  ck_assert_str_eq(A.log_line_prefix_template, "x");
  ck_assert_double_eq(A.worker_heartbeat_timeout, 7);
  args_free(&A);
  ck_assert_einval(PARSE("--worker_heartbeat_timeout=-1", "t"),
                   "--worker_heartbeat_timeout: invalid value '-1'");
  ck_assert_einval(PARSE("--virtual_local_rank=1", "t"),
                   "does not take a value");
}
END_TEST

/* argparse's allow_abbrev: unique prefixes name the option. */
START_TEST(test_prefixes)
{
  ck_assert_ok(PARSE("--nproc", "4", "--max_rest=3", "--stand", "t"));
  ck_assert_str_eq(A.nproc_per_node, "4");
  ck_assert_int_eq(A.max_restarts, 3);
  ck_assert(A.standalone);
  args_free(&A);
  ck_assert_ok(PARSE("--nproc-per=2", "--max-rest", "1", "--rdzv-e", "h:1",
                     "t"));
  ck_assert_str_eq(A.nproc_per_node, "2");
  ck_assert_int_eq(A.max_restarts, 1);
  ck_assert_str_eq(A.rdzv_endpoint, "h:1");
  args_free(&A);
  /* An exact name wins over being a prefix of another. */
  ck_assert_ok(PARSE("--role=x", "t"));
  ck_assert_str_eq(A.role, "x");
  args_free(&A);
  ck_assert_einval(PARSE("--rdzv=x", "t"), "ambiguous option: --rdzv could "
                   "match --rdzv_backend, --rdzv_endpoint, --rdzv_id, "
                   "--rdzv_conf");
  ck_assert_einval(PARSE("--no", "t"), "ambiguous option: --no could "
                   "match --no_python, --node_rank");
  ck_assert_einval(PARSE("--m", "t"), "ambiguous option: --m could match "
                   "--max_restarts, --monitor_interval, --module, "
                   "--master_addr, --master_port");
  ck_assert_ok(PARSE("--no-", "t"));
  ck_assert(A.no_python);
  args_free(&A);
  ck_assert_unknown(PARSE("--max_rest-x=1", "t"),
                    "unrecognized argument '--max_rest-x=1'");
  /* A mix of spellings is no prefix of either. */
  ck_assert_unknown(PARSE("--nproc_per-n=1", "t"), "unrecognized");
}
END_TEST

START_TEST(test_print_completion)
{
  char *buf = NULL;
  size_t len = 0;
  FILE *f;

  /* Like --help: no training script needed, the rest is not parsed. */
  ck_assert_ok(PARSE("--print-completion", "bash", "--bogus"));
  ck_assert_str_eq(A.print_completion, "bash");
  args_free(&A);
  ck_assert_einval(PARSE("--print_completion=tcsh"),
                   "--print_completion: invalid value 'tcsh'");
  f = open_memstream(&buf, &len);
  ck_assert_int_eq(args_print_completion(f, "bash"), 0);
  fclose(f);
  ck_assert_ptr_nonnull(strstr(buf, "complete -o filenames -F _cdrun cdrun"));
  ck_assert_ptr_nonnull(strstr(buf, " --nproc-per-node "));
  ck_assert_ptr_nonnull(strstr(buf, " --nproc_per_node "));
  ck_assert_ptr_nonnull(strstr(buf, "node socket exclusive core-complex"));
  free(buf);
  ck_assert_int_eq(args_print_completion(stdout, "zsh"), -EINVAL);
}
END_TEST

START_TEST(test_module_no_python)
{
  ck_assert_einval(PARSE("-m", "--no_python", "t"), "--module");
  ck_assert_str_eq(err, "--module and --no_python are mutually exclusive");
  ck_assert_einval(parse_env(ENV("PET_MODULE=1"), ARGV("--no-python", "t")),
                   "--no_python");
  ck_assert_einval(parse_env(ENV("PET_MODULE=1", "PET_NO_PYTHON=1"),
                             ARGV("t")), "mutually exclusive");
}
END_TEST

START_TEST(test_no_target)
{
  ck_assert_einval(PARSE(), "missing the training script");
  ck_assert_einval(PARSE("--standalone", "--nproc_per_node=2"),
                   "missing the training script");
  ck_assert_int_eq(A.target_argc, 0);
  ck_assert_ptr_null(A.target_argv);
}
END_TEST

START_TEST(test_help_version)
{
  ck_assert_ok(PARSE("--help"));
  ck_assert(A.help);
  ck_assert(!A.version);
  assert_defaults();
  args_free(&A);

  ck_assert_ok(PARSE("-h"));
  ck_assert(A.help);
  args_free(&A);

  ck_assert_ok(PARSE("--version"));
  ck_assert(A.version);
  ck_assert(!A.help);
  ck_assert_int_eq(A.target_argc, 0);
  args_free(&A);

  /* Parsing stops at once: later junk, bad env and earlier values do not
   * matter, and the struct holds the defaults. */
  ck_assert_ok(parse_env(ENV("PET_MAX_RESTARTS=x"),
                         ARGV("--nproc_per_node", "4", "--help", "--foo")));
  ck_assert(A.help);
  ck_assert_str_eq(A.nproc_per_node, "1");
  ck_assert_int_eq(A.max_restarts, 0);
  args_free(&A);

  /* Errors before --help still count. */
  ck_assert_unknown(PARSE("--foo", "--help"), "--foo");
}
END_TEST

START_TEST(test_flag_spelling_in_message)
{
  ck_assert_einval(PARSE("--max-restarts", "x", "t"), "--max-restarts: ");
  ck_assert_einval(PARSE("--max_restarts=x", "t"), "--max_restarts: ");
  ck_assert_str_eq(err, "--max_restarts: invalid value 'x' (expected an "
                   "integer 0..2147483647)");
}
END_TEST

START_TEST(test_small_err_buffer)
{
  char small[8];
  char *argv[] = { "cdrun", "--nnodes=zzzzzzzzzzzzzzzz", "t", NULL };

  memset(small, 'X', sizeof small);
  ck_assert_int_eq(args_parse(&A, 3, argv, NULL, small, sizeof small),
                   -EINVAL);
  ck_assert_str_eq(small, "--nnode");
  ck_assert_int_eq(args_parse(&A, 3, argv, NULL, NULL, 0), -EINVAL);
}
END_TEST

static const char *const usage_words[] = {
  "usage: cdrun [options] training_script [training_script_args ...]",
  "--nnodes", "--nproc_per_node", "--rdzv_backend", "--rdzv_endpoint",
  "--rdzv_id", "--rdzv_conf", "--standalone", "--max_restarts",
  "--monitor_interval", "--start_method", "--role", "-m, --module",
  "--no_python", "--run_path", "--log_dir", "-r, --redirects",
  "-t, --tee", "--local_ranks_filter", "--node_rank", "--master_addr",
  "--master_port", "--local_addr", "--signals_to_handle",
  "--shutdown_timeout", "--event_log_handler", "--logs_specs",
  "--numa_binding", "--log_line_prefix_template", "${hostname}",
  "--duplicate_stdout_filters", "--duplicate_stderr_filters",
  "--virtual_local_rank", "--worker_heartbeat_timeout",
  "TORCHELASTIC_ENABLE_FILE_TIMER", "--print_completion", "-h, --help", "--version", "PET_",
  "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "SIGKILL", "second Ctrl-C",
  "unused", "--rdzv_conf", "(default: 1)", "static (default)",
  "(default: 30)", "(default: SIGTERM,SIGINT,SIGHUP,SIGQUIT)",
};

START_TEST(test_usage)
{
  const char *u = args_usage();
  const char *line = u;

  for (size_t i = 0; i < sizeof usage_words / sizeof usage_words[0]; i++)
    ck_assert_msg(strstr(u, usage_words[i]) != NULL, "usage lacks '%s'",
                  usage_words[i]);
  ck_assert_ptr_eq(u, args_usage());
  ck_assert(u[strlen(u) - 1] == '\n');
  while (*line) {
    const char *nl = strchr(line, '\n');
    size_t len = nl ? (size_t)(nl - line) : strlen(line);

    ck_assert_msg(len <= 79, "usage line too long: %.*s", (int)len, line);
    line += len + (nl != NULL);
  }
}
END_TEST

static Suite *args_suite(void)
{
  Suite *s = suite_create("args");
  TCase *tc = tcase_create("parse");

  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_defaults);
  tcase_add_test(tc, test_defaults_are_heap_copies);
  tcase_add_loop_test(tc, test_string_flags_all_forms, 0,
                      sizeof str_cases / sizeof str_cases[0]);
  tcase_add_test(tc, test_numeric_flags);
  tcase_add_test(tc, test_short_redirects_tee);
  tcase_add_test(tc, test_booleans);
  tcase_add_test(tc, test_nnodes);
  tcase_add_loop_test(tc, test_nnodes_errors, 0,
                      sizeof bad_nnodes / sizeof bad_nnodes[0]);
  tcase_add_test(tc, test_nproc);
  tcase_add_loop_test(tc, test_nproc_errors, 0,
                      sizeof bad_nproc / sizeof bad_nproc[0]);
  tcase_add_loop_test(tc, test_invalid_values, 0,
                      sizeof bad_values / sizeof bad_values[0]);
  tcase_add_test(tc, test_signals_normalized);
  tcase_add_test(tc, test_env_fallbacks);
  tcase_add_test(tc, test_recovery);
  tcase_add_test(tc, test_cmdline_beats_env);
  tcase_add_test(tc, test_env_lookup_exact);
  tcase_add_test(tc, test_env_invalid);
  tcase_add_test(tc, test_env_empty_optional);
  tcase_add_test(tc, test_shutdown_timeout_env);
  tcase_add_test(tc, test_target_passthrough);
  tcase_add_test(tc, test_double_dash);
  tcase_add_test(tc, test_lone_dash_is_target);
  tcase_add_test(tc, test_repeated_flag_last_wins);
  tcase_add_test(tc, test_empty_value);
  tcase_add_test(tc, test_unknown_flags);
  tcase_add_test(tc, test_missing_value);
  tcase_add_test(tc, test_bool_takes_no_value);
  tcase_add_test(tc, test_unsupported);
  tcase_add_test(tc, test_torch215_flags);
  tcase_add_test(tc, test_prefixes);
  tcase_add_test(tc, test_print_completion);
  tcase_add_test(tc, test_module_no_python);
  tcase_add_test(tc, test_no_target);
  tcase_add_test(tc, test_help_version);
  tcase_add_test(tc, test_flag_spelling_in_message);
  tcase_add_test(tc, test_small_err_buffer);
  tcase_add_test(tc, test_usage);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(args_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
