/* numa.c -- sysfs topology and the --numa_binding plan (see numa.h). */
#include "numa.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "num.h"

int numa_mode_parse(const char *s)
{
  if (!s)
    return -EINVAL;
  if (strcmp(s, "node") == 0)
    return NUMA_NODE;
  if (strcmp(s, "socket") == 0)
    return NUMA_SOCKET;
  if (strcmp(s, "exclusive") == 0)
    return NUMA_EXCLUSIVE;
  if (strcmp(s, "core-complex") == 0)
    return NUMA_CORE_COMPLEX;
  return -EINVAL;
}

/* Reads root + path (printf-style) into buf, trailing blanks dropped.
 * Returns 0 or a negative errno. */
static int read_text(char *buf, size_t len, const char *root,
                     const char *fmt, ...)
  __attribute__((format(printf, 4, 5)));

static int read_text(char *buf, size_t len, const char *root,
                     const char *fmt, ...)
{
  char path[PATH_MAX], rel[PATH_MAX / 2];
  va_list ap;
  FILE *f;
  size_t n;

  va_start(ap, fmt);
  vsnprintf(rel, sizeof rel, fmt, ap);
  va_end(ap);
  snprintf(path, sizeof path, "%s/%s", root, rel);
  f = fopen(path, "re");
  if (!f)
    return -errno;
  n = fread(buf, 1, len - 1, f);
  fclose(f);
  buf[n] = '\0';
  while (n > 0 && isspace((unsigned char)buf[n - 1]))
    buf[--n] = '\0';
  return 0;
}

/* An integer file (root + rel), or def when it is missing or malformed. */
static int read_int(int def, const char *root, const char *rel)
{
  char buf[64];
  long v;

  if (read_text(buf, sizeof buf, root, "%s", rel) < 0 ||
      num_parse_long(buf, INT_MIN, INT_MAX, &v))
    return def;
  return (int)v;
}

int numa_parse_list(const char *s, cpu_set_t *set)
{
  const char *p = s;

  CPU_ZERO(set);
  if (!s)
    return -EINVAL;
  while (*p) {
    size_t n = strspn(p, "0123456789");
    long lo, hi;

    if (n == 0 || num_parse_long_n(p, n, 0, CPU_SETSIZE - 1, &lo))
      return -EINVAL;
    hi = lo;
    p += n;
    if (*p == '-') {
      n = strspn(p + 1, "0123456789");
      if (n == 0 || num_parse_long_n(p + 1, n, 0, CPU_SETSIZE - 1, &hi))
        return -EINVAL;
      p += 1 + n;
    }
    if (lo > hi)
      return -EINVAL;
    for (long c = lo; c <= hi; c++)
      CPU_SET((int)c, set);
    if (*p == ',')
      p++;
    else if (*p)
      return -EINVAL;
  }
  return 0;
}

void numa_format_list(const cpu_set_t *set, char *buf, size_t len)
{
  size_t used = 0;

  if (len)
    buf[0] = '\0';
  for (int c = 0; c < CPU_SETSIZE && used < len; c++) {
    int e = c;

    if (!CPU_ISSET(c, set))
      continue;
    while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set))
      e++;
    used += (size_t)snprintf(buf + used, len - used, "%s%d", used ? "," : "",
                             c);
    if (e > c && used < len)
      used += (size_t)snprintf(buf + used, len - used, "-%d", e);
    c = e;
  }
}

/* The lowest CPU of the L3 cache cpu sits under, or -1. */
static int l3_of(const char *root, int cpu)
{
  char buf[4096];
  cpu_set_t set;

  for (int i = 0; i < 16; i++) {
    char rel[128];

    snprintf(rel, sizeof rel, "devices/system/cpu/cpu%d/cache/index%d/level",
             cpu, i);
    if (read_int(-1, root, rel) != 3)
      continue;
    if (read_text(buf, sizeof buf, root,
                  "devices/system/cpu/cpu%d/cache/index%d/shared_cpu_list",
                  cpu, i) < 0 || numa_parse_list(buf, &set) < 0)
      return -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
      if (CPU_ISSET(c, &set))
        return c;
  }
  return -1;
}

static int cmp_cpu(const void *pa, const void *pb)
{
  const struct numa_cpu *a = pa, *b = pb;

  if (a->node != b->node)
    return a->node < b->node ? -1 : 1;
  if (a->package != b->package)
    return a->package < b->package ? -1 : 1;
  if (a->core != b->core)
    return a->core < b->core ? -1 : 1;
  return a->id < b->id ? -1 : a->id > b->id;
}

int numa_topo_read(const char *root, const cpu_set_t *allowed,
                   struct numa_topo *out)
{
  int node_of[CPU_SETSIZE];
  char buf[4096], path[PATH_MAX], rel[128];
  cpu_set_t online, set;
  struct dirent *de;
  DIR *d;
  int n = 0, err;

  memset(out, 0, sizeof *out);
  err = read_text(buf, sizeof buf, root, "devices/system/cpu/online");
  if (err == 0)
    err = numa_parse_list(buf, &online);
  if (err)
    return err == -EINVAL ? -EINVAL : -ENOENT;
  if (allowed)
    CPU_AND(&online, &online, allowed);
  if (CPU_COUNT(&online) == 0)
    return -ENOENT;

  /* A kernel without NUMA has no node directories: all node 0. */
  memset(node_of, 0, sizeof node_of);
  snprintf(path, sizeof path, "%s/devices/system/node", root);
  d = opendir(path);
  while (d && (de = readdir(d))) {
    int node;
    char tail;

    if (sscanf(de->d_name, "node%d%c", &node, &tail) != 1 || node < 0 ||
        node >= NUMA_MAX_NODES)
      continue;
    if (read_text(buf, sizeof buf, root, "devices/system/node/node%d/cpulist",
                  node) < 0 || numa_parse_list(buf, &set) < 0)
      continue;
    for (int c = 0; c < CPU_SETSIZE; c++)
      if (CPU_ISSET(c, &set))
        node_of[c] = node;
  }
  if (d)
    closedir(d);

  out->cpus = calloc((size_t)CPU_COUNT(&online), sizeof *out->cpus);
  if (!out->cpus)
    return -ENOMEM;
  for (int c = 0; c < CPU_SETSIZE; c++) {
    struct numa_cpu *p;

    if (!CPU_ISSET(c, &online))
      continue;
    p = &out->cpus[n++];
    p->id = c;
    p->node = node_of[c];
    snprintf(rel, sizeof rel,
             "devices/system/cpu/cpu%d/topology/physical_package_id", c);
    p->package = read_int(0, root, rel);
    snprintf(rel, sizeof rel, "devices/system/cpu/cpu%d/topology/core_id", c);
    p->core = read_int(c, root, rel);
    p->l3 = l3_of(root, c);
  }
  out->ncpus = n;
  qsort(out->cpus, (size_t)n, sizeof *out->cpus, cmp_cpu);
  return 0;
}

void numa_topo_free(struct numa_topo *t)
{
  free(t->cpus);
  t->cpus = NULL;
  t->ncpus = 0;
}

static int cmp_str(const void *a, const void *b)
{
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int numa_gpu_nodes(const char *root, int *nodes, int max)
{
  char path[PATH_MAX], buf[64], *names[256];
  struct dirent *de;
  int n = 0;
  DIR *d;

  snprintf(path, sizeof path, "%s/bus/pci/devices", root);
  d = opendir(path);
  if (!d)
    return 0;
  while ((de = readdir(d)) && n < (int)(sizeof names / sizeof names[0])) {
    if (de->d_name[0] == '.')
      continue;
    /* NVIDIA (0x10de), display class: VGA (0x0300) or 3D (0x0302). */
    if (read_text(buf, sizeof buf, root, "bus/pci/devices/%s/vendor",
                  de->d_name) < 0 || strcmp(buf, "0x10de") != 0)
      continue;
    if (read_text(buf, sizeof buf, root, "bus/pci/devices/%s/class",
                  de->d_name) < 0 || (strncmp(buf, "0x0300", 6) != 0 &&
                                      strncmp(buf, "0x0302", 6) != 0))
      continue;
    names[n] = strdup(de->d_name);
    if (names[n])
      n++;
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof names[0], cmp_str);
  for (int i = 0; i < n; i++) {
    if (i < max) {
      snprintf(path, sizeof path, "bus/pci/devices/%s/numa_node", names[i]);
      nodes[i] = read_int(-1, root, path);
    }
    free(names[i]);
  }
  return n < max ? n : max;
}

static bool has_node(const struct numa_topo *t, int node)
{
  for (int i = 0; i < t->ncpus; i++)
    if (t->cpus[i].node == node)
      return true;
  return false;
}

/* The n-th distinct node in topology order. */
static int nth_node(const struct numa_topo *t, int nth, int *count)
{
  int k = -1, prev = -1, found = -1;

  for (int i = 0; i < t->ncpus; i++) {
    if (i > 0 && t->cpus[i].node == prev)
      continue;
    prev = t->cpus[i].node;
    if (++k == nth)
      found = prev;
  }
  if (count)
    *count = k + 1;
  return found;
}

/* Indexes of h's CPUs in t->cpus: first and one past the last (the
 * sort keeps a node's CPUs together). */
static void node_range(const struct numa_topo *t, int h, int *lo, int *hi)
{
  *lo = 0;
  while (*lo < t->ncpus && t->cpus[*lo].node != h)
    (*lo)++;
  *hi = *lo;
  while (*hi < t->ncpus && t->cpus[*hi].node == h)
    (*hi)++;
}

static void pick_exclusive(const struct numa_topo *t, int lo, int hi, int j,
                           int k, cpu_set_t *set)
{
  int cores = 0, L = hi - lo, core_idx = -1, first, last;

  for (int i = lo; i < hi; i++)
    if (i == lo || t->cpus[i].core != t->cpus[i - 1].core ||
        t->cpus[i].package != t->cpus[i - 1].package)
      cores++;
  if (cores >= k) {
    /* Whole physical cores, SMT siblings together. */
    first = (int)((long)j * cores / k);
    last = (int)((long)(j + 1) * cores / k);
    for (int i = lo; i < hi; i++) {
      if (i == lo || t->cpus[i].core != t->cpus[i - 1].core ||
          t->cpus[i].package != t->cpus[i - 1].package)
        core_idx++;
      if (core_idx >= first && core_idx < last)
        CPU_SET(t->cpus[i].id, set);
    }
  } else if (L >= k) {
    first = (int)((long)j * L / k);
    last = (int)((long)(j + 1) * L / k);
    for (int i = lo + first; i < lo + last; i++)
      CPU_SET(t->cpus[i].id, set);
  } else {
    /* More ranks than CPUs: they must share; each still gets one. */
    CPU_SET(t->cpus[lo + j % L].id, set);
  }
}

static void pick_core_complex(const struct numa_topo *t, int lo, int hi,
                              int j, cpu_set_t *set)
{
  int l3s[CPU_SETSIZE], n = 0, want;

  for (int i = lo; i < hi; i++) {
    int seen = 0;

    for (int k = 0; k < n && !seen; k++)
      seen = l3s[k] == t->cpus[i].l3;
    if (!seen)
      l3s[n++] = t->cpus[i].l3;
  }
  want = l3s[j % n];
  for (int i = lo; i < hi; i++)
    if (t->cpus[i].l3 == want)
      CPU_SET(t->cpus[i].id, set);
}

int numa_plan(const struct numa_topo *t, enum numa_mode mode, int nproc,
              const int *home, struct numa_binding *out)
{
  int nnodes;

  if (!t->ncpus || nproc < 1)
    return -EINVAL;
  nth_node(t, 0, &nnodes);
  for (int r = 0; r < nproc; r++) {
    struct numa_binding *b = &out[r];
    int h, j = 0, k = 0, lo, hi;

    memset(b, 0, sizeof *b);
    h = home ? home[r] : nth_node(t, (int)((long)r * nnodes / nproc), NULL);
    if (!has_node(t, h))
      h = nth_node(t, 0, NULL);
    /* j: this rank's place among the k ranks sharing its home. */
    for (int q = 0; q < nproc; q++) {
      int hq = home ? home[q]
                    : nth_node(t, (int)((long)q * nnodes / nproc), NULL);

      if (!has_node(t, hq))
        hq = nth_node(t, 0, NULL);
      if (hq != h)
        continue;
      if (q < r)
        j++;
      k++;
    }
    node_range(t, h, &lo, &hi);
    CPU_ZERO(&b->cpus);
    switch (mode) {
    case NUMA_NODE:
      for (int i = lo; i < hi; i++)
        CPU_SET(t->cpus[i].id, &b->cpus);
      break;
    case NUMA_SOCKET:
      for (int i = 0; i < t->ncpus; i++)
        for (int q = lo; q < hi; q++)
          if (t->cpus[i].package == t->cpus[q].package) {
            CPU_SET(t->cpus[i].id, &b->cpus);
            break;
          }
      break;
    case NUMA_EXCLUSIVE:
      pick_exclusive(t, lo, hi, j, k, &b->cpus);
      break;
    case NUMA_CORE_COMPLEX:
      pick_core_complex(t, lo, hi, j, &b->cpus);
      break;
    default:
      return -EINVAL;
    }
    for (int i = 0; i < t->ncpus; i++) {
      const int node = t->cpus[i].node;
      const size_t bits = 8 * sizeof b->nodes[0];
      unsigned long bit;

      if (!CPU_ISSET(t->cpus[i].id, &b->cpus) || node < 0 ||
          node >= NUMA_MAX_NODES)
        continue;
      bit = 1UL << (node % bits);
      if (!(b->nodes[node / bits] & bit)) {
        b->nodes[node / bits] |= bit;
        b->nnodes++;
      }
    }
  }
  return 0;
}
