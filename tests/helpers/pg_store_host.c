/* pg_store_host.c -- serves a libpg store for the live recovery scenarios
 * (the live store cdrun's agent serves in live mode): prints "port N" on
 * stdout once it listens on 127.0.0.1, then serves until SIGTERM/SIGINT.
 * The token is $CDRUN_JOB_TOKEN (unset: none).
 *
 *   pg_store_host [PORT]     PORT 0 or absent: any free port */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "pg.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
  (void)sig;
  stop = 1;
}

int main(int argc, char **argv)
{
  pg_store_server *s;
  int port = argc > 1 ? atoi(argv[1]) : 0, err;
  struct sigaction sa = { .sa_handler = on_signal };
  sigset_t block, old;

  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGINT);
  sigprocmask(SIG_BLOCK, &block, &old);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  err = pg_store_server_start_auth("127.0.0.1", &port, NULL, &s);
  if (err) {
    fprintf(stderr, "pg_store_host: %s\n", pg_last_error());
    return 1;
  }
  printf("port %d\n", port);
  fflush(stdout);
  while (!stop)
    sigsuspend(&old);
  pg_store_server_stop(s);
  return 0;
}
