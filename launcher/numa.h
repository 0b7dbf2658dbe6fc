/* numa.h -- --numa_binding: the machine's CPU and memory topology (read
 * from sysfs) and each worker's share of it.
 *
 * Every worker has a home NUMA node: a GPU worker the node of its GPU (the
 * GPU's PCI numa_node), a CPU worker a fair share of the nodes (local rank
 * i of n gets node i*N/n).  The mode then picks its CPUs:
 *
 *   node          every CPU of the home node
 *   socket        every CPU of the package(s) holding the home node
 *   exclusive     the ranks sharing a home node split its physical cores
 *                 into disjoint contiguous shares (SMT siblings together;
 *                 logical CPUs when there are more ranks than cores)
 *   core-complex  one L3 cache domain of the home node, the ranks sharing
 *                 the node spread over its domains
 *
 * and its memory policy: the nodes of those CPUs (preferred when one,
 * interleaved when several).  Only CPUs the agent may use (its affinity)
 * and that are online are ever given out. */
#ifndef CDRUN_NUMA_H
#define CDRUN_NUMA_H

#include <sched.h>
#include <stdbool.h>
#include <stddef.h>

#define NUMA_MAX_NODES 1024

enum numa_mode {
  NUMA_NODE,
  NUMA_SOCKET,
  NUMA_EXCLUSIVE,
  NUMA_CORE_COMPLEX,
};

/* "node", "socket", "exclusive", "core-complex"; -EINVAL otherwise. */
int numa_mode_parse(const char *s);

struct numa_cpu {
  int id;
  int node;
  int package;
  int core;                     /* core_id, unique within its package */
  int l3;                       /* lowest CPU sharing its L3, or -1 */
};

struct numa_topo {
  struct numa_cpu *cpus;        /* usable CPUs by (node, package, core, id) */
  int ncpus;
};

/* Reads the topology under root ("/sys", or a fake tree in tests) for the
 * CPUs in allowed (NULL: every online CPU).  A kernel without NUMA nodes
 * gives node 0 for all.  Returns 0, -ENOENT when no usable CPU is found,
 * or another negative errno. */
int numa_topo_read(const char *root, const cpu_set_t *allowed,
                   struct numa_topo *out);

void numa_topo_free(struct numa_topo *t);

/* The NUMA node of each NVIDIA GPU under root, in PCI bus order (the
 * order of nvidia-smi and of CUDA_DEVICE_ORDER=PCI_BUS_ID); -1 where the
 * kernel does not know.  Returns how many GPUs (at most max). */
int numa_gpu_nodes(const char *root, int *nodes, int max);

/* One worker's binding. */
struct numa_binding {
  cpu_set_t cpus;
  unsigned long nodes[NUMA_MAX_NODES / (8 * sizeof(unsigned long))];
  int nnodes;                   /* nodes set in .nodes */
};

/* Plans the binding of nproc workers.  home[i] is local rank i's home
 * node (a GPU's node; -1: unknown, the first node), or home NULL for CPU
 * workers (a fair split of the nodes).  Returns 0 or -EINVAL. */
int numa_plan(const struct numa_topo *t, enum numa_mode mode, int nproc,
              const int *home, struct numa_binding *out);

/* Parses a sysfs CPU or node list ("0-3,8,10-11") into set.  Returns 0
 * or -EINVAL (ids >= CPU_SETSIZE included). */
int numa_parse_list(const char *s, cpu_set_t *set);

/* Formats set as a list like the kernel's ("0-3,8"). */
void numa_format_list(const cpu_set_t *set, char *buf, size_t len);

#endif
