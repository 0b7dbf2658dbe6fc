/* cpus.c -- how many CPUs this process may use, for the backends' choice
 * between spinning and sleeping while they wait. */
#include <sched.h>
#include <unistd.h>

#include "pg_internal.h"

int pg__usable_cpus(void)
{
  cpu_set_t set;

  if (sched_getaffinity(0, sizeof set, &set) == 0)
    return CPU_COUNT(&set);
  return (int)sysconf(_SC_NPROCESSORS_ONLN);
}
