/* print_config.c -- `cdrun --print-config` (see print_config.h). */
#include "print_config.h"

#include <string.h>

void print_config(FILE *f, const struct cdrun_args *a, char *const *env,
                  const struct slurm_env *s, const struct rdzv_config *c,
                  int nproc, const char *nproc_from)
{
  char val[512], envname[64], from[256];
  enum args_origin origin;
  const char *name, *src;
  size_t i;

  fprintf(f, "%-22s %-28s %s\n", "setting", "value", "from");
  for (i = 0; args_describe(a, i, &name, val, sizeof val, &origin, envname,
                            sizeof envname); i++) {
    if (!name)
      continue;
    switch (origin) {
    case ARGS_FLAG:
      snprintf(from, sizeof from, "flag --%s", name);
      break;
    case ARGS_ENV:
      src = slurm_env_source(s, env, envname);
      if (src)
        snprintf(from, sizeof from, "Slurm (%s)", src);
      else
        snprintf(from, sizeof from, "env %s", envname);
      break;
    default:
      snprintf(from, sizeof from, "default");
      break;
    }
    fprintf(f, "%-22s %-28s %s\n", name, val[0] ? val : "-", from);
  }
  fprintf(f, "%-22s %-28d %s\n", "(workers on this node)", nproc,
          nproc_from);
  if (c->backend == BACKEND_RDZVD) {
    const char *mode = c->host_mode == RDZV_HOST_ALWAYS ? "this node"
                     : c->host_mode == RDZV_HOST_NEVER ? "another node"
                     : "this node if the endpoint is local and free";

    snprintf(val, sizeof val, "%s:%d", c->host, c->port);
    fprintf(f, "%-22s %-28s %s\n", "(rendezvous)", val, "rdzvd protocol");
    fprintf(f, "%-22s %-28s %s\n", "(rendezvous served by)", mode,
            s->active && c->host_mode != RDZV_HOST_AUTO
              ? "Slurm (SLURM_NODEID)" : "rdzv_conf is_host");
  } else {
    snprintf(val, sizeof val, "%s:%d", c->master_addr, c->master_port);
    fprintf(f, "%-22s %-28s %s\n", "(static master)",
            c->master_port ? val : c->master_addr,
            c->master_port ? "static back end" : "static back end, a free "
            "port");
  }
  if (s->active)
    fprintf(f, "%-22s %-28s %s\n", "(Slurm step)", s->rdzv_id,
            s->nodelist_var);
}
