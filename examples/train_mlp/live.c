/* live.c -- train_mlp's live recovery (live.h). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "live.h"

#define MAX_ATTEMPTS 64   /* pg_recover calls for one recovery */

long live_restarts(void)
{
  const char *v = getenv("CDRUN_WORKER_RESTARTS");

  return v && *v ? strtol(v, NULL, 10) : 0;
}

/* --die-in-heal: a SIGSEGV (the heal touching the trap) becomes a
 * SIGKILL, as a crash is, and no sanitizer report: the fault is meant. */
static void trap_fault(int sig)
{
  (void)sig;
  kill(getpid(), SIGKILL);
}

/* --die-in-heal: a page of the state that every rank registers; the
 * first replacement of the first --die-rank cannot touch it, so it dies
 * (SIGKILL from a SIGSEGV, or an error from a receive into it) in the
 * middle of the heal: after the parameters, before the optimizer's
 * state. */
static int trap_make(struct live *L, pg_group *g, const struct opts *o)
{
  bool armed = pg_joined_running(g) && live_restarts() == 1 &&
               pg_rank(g) == o->die_rank[0];

  L->trap_bytes = 65536;
  L->trap = mmap(NULL, L->trap_bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (L->trap == MAP_FAILED) {
    L->trap = NULL;
    mlp_err_msg("--die-in-heal: mmap", strerror(errno));
    return -1;
  }
  if (armed) {
    struct sigaction sa;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = trap_fault;
    sigaction(SIGSEGV, &sa, NULL);
    fprintf(stderr, "train_mlp: rank %d: --die-in-heal: this replacement "
            "dies while it receives the state\n", pg_rank(g));
    mprotect(L->trap, L->trap_bytes, PROT_NONE);
  }
  return 0;
}

int live_register(struct live *L, pg_group *g, struct net *n,
                  const struct opts *o)
{
  struct pg_state_buf b[5];
  size_t k = 0;
  int err;

  b[k++] = (struct pg_state_buf){ n->w, n->total * sizeof *n->w };
  if (o->die_in_heal) {
    if (trap_make(L, g, o) != 0)
      return -1;
    b[k++] = (struct pg_state_buf){ L->trap, L->trap_bytes };
  }
  b[k++] = (struct pg_state_buf){ n->opt1, n->total * sizeof *n->opt1 };
  if (o->optimizer == OPT_ADAM)
    b[k++] = (struct pg_state_buf){ n->opt2, n->total * sizeof *n->opt2 };
  b[k++] = (struct pg_state_buf){ &L->st, sizeof L->st };
  if ((err = pg_state_register(g, b, k)) != 0) {
    mlp_pg_fail("pg_state_register", err);
    return -1;
  }
  return 0;
}

static void print_line(struct live *L, const char *redo)
{
  const struct pg_recover_info *i = &L->info;

  printf("live_recovery generation=%llu world=%d old_world=%d joined=%d "
         "left=%d step=%lld cause=%s attempts=%d detect_ms=%.3f "
         "rebuild_ms=%.3f heal_ms=%.3f redo_ms=%s\n",
         (unsigned long long)i->generation, i->world, i->old_world,
         i->joined, i->left, (long long)L->at_step, L->cause, L->attempts,
         1e3 * L->detect_s, 1e3 * L->rebuild_s, 1e3 * i->heal_s, redo);
  L->printing = false;
}

int live_recover(struct live *L, pg_group *g, const char *cause,
                 double detect_s, bool redo)
{
  double t0 = mlp_now_s();
  int err, attempts = 0;

  live_flush(L);
  do {
    attempts++;
    err = pg_recover(g, &L->info);
  } while (err == PG_ERR_PEER_LOST && attempts < MAX_ATTEMPTS);
  if (err) {
    mlp_pg_fail("pg_recover", err);
    return err;
  }
  L->t_done = mlp_now_s();
  L->rebuild_s = L->t_done - t0 - L->info.heal_s;
  L->detect_s = detect_s;
  L->attempts = attempts;
  L->cause = cause;
  L->at_step = L->st.step;
  L->redo = redo;
  mlp_rank = L->info.rank;
  L->printing = L->info.heal_source >= 0 ?
                L->info.rank == L->info.heal_source : L->info.rank == 0;
  if (L->printing && !redo)
    print_line(L, "0");
  return 0;
}

void live_step_done(struct live *L)
{
  char ms[32];

  if (!L->printing)
    return;
  snprintf(ms, sizeof ms, "%.3f", 1e3 * (mlp_now_s() - L->t_done));
  print_line(L, ms);
}

void live_flush(struct live *L)
{
  if (L->printing)
    print_line(L, "-");
}
