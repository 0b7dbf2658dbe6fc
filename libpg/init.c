/* init.c -- pg_init and pg_destroy: the one file above every floor of
 * libpg (Note [floors], core/hooks.h).  The core makes the group; live
 * recovery (live/recover.c) takes its setup over when CDRUN_RECOVERY=live,
 * attaching its hooks; otherwise the core sets the group up the plain
 * way. */
#include <stdbool.h>

#include "group.h"
#include "live.h"

int pg_init(const struct pg_options *o, pg_group **out)
{
  struct pg_options defaults = PG_OPTIONS_INIT;
  struct pg__group_init in;
  pg_group *g;
  bool live;
  int err;

  if (!o)
    o = &defaults;
  if ((err = pg__group_start(o, &in, &g)))
    return err;
  err = pg__live_init(g, o, &live);
  if (!err && !live)
    err = pg__group_setup(g, o, &in);
  if (err)
    return pg__group_setup_failed(g, err, NULL);
  *out = g;
  return 0;
}

void pg_destroy(pg_group *g)
{
  pg__group_destroy(g);
}
