/* logdir.h -- the log folders: made with their parents, removed whole. */
#ifndef CDRUN_LOGDIR_H
#define CDRUN_LOGDIR_H

/* Creates dir and its parents (mode 0755); existing directories are fine.
 * Returns 0 or a negative errno. */
int logdir_mkdirs(const char *dir);

/* Removes a directory tree (a reused attempt_<k> folder, the temporary
 * log dir).  Symbolic links are removed, never followed.  Returns 0 or a
 * negative errno (-ENOENT: dir was not there; -ENOTDIR: not a folder). */
int logdir_rmtree(const char *dir);

#endif
