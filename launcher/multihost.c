#include "multihost.h"
int multihost_parse_hosts(const char *text, int is_list, struct mh_host **out,
                          char *err, size_t errlen) { return -1; }
int multihost_run(const struct cdrun_args *a, int argc, char **argv) { return 1; }
int multihost_watchdog_start(void) { return 0; }
