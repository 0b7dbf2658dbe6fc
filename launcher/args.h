/* args.h -- cdrun's command line: torchrun's flags, both spellings,
 * PET_<NAME> environment fallbacks. */
#ifndef CDRUN_ARGS_H
#define CDRUN_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Everything the command line and the PET_* environment said.  Strings are
 * heap copies owned by the struct (args_free releases them); NULL means
 * "not given".  Semantic resolution that needs the machine (nproc "gpu",
 * free ports, run ids) happens later, in the agent. */
struct cdrun_args {
  int nnodes_min;               /* --nnodes N or MIN:MAX, default 1:1 */
  int nnodes_max;
  char *nproc_per_node;         /* "4", "cpu", "gpu", "auto"; default "1" */
  char *rdzv_backend;           /* default "static" */
  char *rdzv_endpoint;          /* default "" */
  char *rdzv_id;                /* default "none" */
  char *rdzv_conf;              /* default "" */
  bool standalone;
  int max_restarts;             /* default 0 */
  double monitor_interval;      /* accepted, unused: we supervise by events */
  char *recovery;               /* "restart" (default) or "live" */
  char *start_method;           /* spawn|fork|forkserver; validated, unused */
  char *role;                   /* default "default" */
  bool module;                  /* -m: python -u -m target */
  bool no_python;               /* run the target as is */
  bool run_path;                /* like torchrun: same as a python script */
  char *log_dir;                /* NULL: a temporary directory */
  char *redirects;              /* "0".."3" or "0:3,1:1"; default "0" */
  char *tee;                    /* same syntax; default "0" */
  char *local_ranks_filter;     /* "0,2" or NULL */
  int node_rank;                /* default 0 */
  char *master_addr;            /* NULL: 127.0.0.1 (single node) */
  int master_port;              /* 0: a free port chosen by cdrun */
  char *local_addr;             /* NULL: not given */
  char *signals_to_handle;      /* default "SIGTERM,SIGINT,SIGHUP,SIGQUIT" */
  double shutdown_timeout;      /* grace period in seconds, default 30 */
  char *event_log_handler;      /* "null" (default) or "console" */

  /* torch 2.15 additions. */
  char *log_line_prefix_template;  /* NULL: the env, else "[<role><lr>]:" */
  char *duplicate_stdout_filters;  /* "a,b" (",," is a comma) or NULL */
  char *duplicate_stderr_filters;
  bool virtual_local_rank;      /* LOCAL_RANK=0, one GPU per worker */
  char *numa_binding;           /* NULL, node, socket, exclusive or
                                   core-complex */
  double worker_heartbeat_timeout;  /* seconds, 0: no watchdog */
  char *print_completion;       /* --print-completion SHELL, or NULL */

  /* The target and its arguments, untouched: argv[0] is the script,
   * module or program.  Points into the argv given to args_parse. */
  char **target_argv;
  int target_argc;

  /* Slurm, ssh and Kubernetes (launcher/slurm_env.c, multihost.c). */
  bool print_config;            /* print what was resolved and from where */
  char *hostfile;               /* start one agent per host over ssh */
  char *hosts;                  /* "h1,h2": the same, inline */
  bool stdin_watchdog;          /* stop when stdin closes (remote agents) */
  unsigned char origin[40];     /* per option: enum args_origin */

  bool help;                    /* --help / -h was given */
  bool version;                 /* --version was given */
};

/* Parses argv (argv[0] is the program name) with env as the source of
 * PET_* fallbacks (NULL-terminated "NAME=value" array, usually environ).
 * Returns 0 and fills *out, or -EINVAL and writes a one-line message naming
 * the offending flag or value into err (size errlen, no trailing newline);
 * -ENOENT (same message) for an option it does not know, after which the
 * caller shows args_usage_line(). 
 * On error *out holds nothing that needs freeing. */
int args_parse(struct cdrun_args *out, int argc, char **argv, char **env,
               char *err, size_t errlen);

/* Releases the strings args_parse allocated. */
void args_free(struct cdrun_args *a);

/* Where an option's value came from (for --print-config). */
enum args_origin {
  ARGS_DEFAULT,       /* the default */
  ARGS_FLAG,          /* the command line */
  ARGS_ENV,           /* PET_<NAME> (or TORCH_ELASTIC_SHUTDOWN_TIMEOUT) */
};

/* Describes option i of a parsed struct: its name, its value as text
 * (empty when not set), its origin and, for ARGS_ENV, the variable read.
 * *name is NULL for options that hold no value (--help, refused ones).
 * Returns false when i is past the last option. */
bool args_describe(const struct cdrun_args *a, size_t i, const char **name,
                   char *val, size_t vlen, enum args_origin *origin,
                   char *envname, size_t envlen);

/* The origin of the option called name ("nnodes"); ARGS_DEFAULT for an
 * unknown name. */
enum args_origin args_origin_of(const struct cdrun_args *a,
                                const char *name);

/* The --help text. */
const char *args_usage(void);

/* Its first line: "usage: cdrun [options] ...", no newline. */
const char *args_usage_line(void);

/* Writes the completion script for shell ("bash") to out, generated from
 * the option table.  Returns 0, or -EINVAL for a shell it cannot serve. */
int args_print_completion(FILE *out, const char *shell);

#endif
