/* flags.h -- train_mlp's command line. */
#ifndef MLP_FLAGS_H
#define MLP_FLAGS_H

#include "mlp.h"

/* Fills o from the defaults and argv.  Returns 0 to run, 1 when --help
 * was answered (exit 0), or -1 after a message on stderr (exit 2). */
int flags_parse(int argc, char **argv, struct opts *o);

#endif
