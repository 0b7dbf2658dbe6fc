/* check_numa.c -- topology from a fake sysfs tree and the --numa_binding
 * plan (launcher/numa.c). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "logdir.h"
#include "logs.h"
#include "numa.h"

static char root[64];

static void put(const char *rel, const char *text)
{
  char path[512], dir[512];

  snprintf(path, sizeof path, "%s/%s", root, rel);
  snprintf(dir, sizeof dir, "%s", path);
  *strrchr(dir, '/') = '\0';
  ck_assert_int_eq(logdir_mkdirs(dir), 0);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f, "%s\n", text);
  fclose(f);
}

/* Two nodes, one package each, two cores of two SMT threads each, one L3
 * per core pair... per core here, so core-complex has two per node:
 *   node 0, package 0: core 0 = cpus 0,4 (L3 a); core 1 = cpus 1,5 (L3 b)
 *   node 1, package 1: core 0 = cpus 2,6 (L3 c); core 1 = cpus 3,7 (L3 d)
 * GPUs: 0000:01:00.0 on node 0, 0000:81:00.0 on node 1 (PCI order), plus
 * an Intel device and an NVIDIA audio function that are no GPUs. */
static void make_tree(bool numa)
{
  char rel[256], text[64];

  strcpy(root, "/tmp/check_numa.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(root));
  put("devices/system/cpu/online", "0-7");
  if (numa) {
    put("devices/system/node/node0/cpulist", "0-1,4-5");
    put("devices/system/node/node1/cpulist", "2-3,6-7");
    put("devices/system/node/online", "0-1");
  }
  for (int c = 0; c < 8; c++) {
    int pkg = c % 4 < 2 ? 0 : 1, l3 = c % 4;

    snprintf(rel, sizeof rel, "devices/system/cpu/cpu%d/topology/"
             "physical_package_id", c);
    snprintf(text, sizeof text, "%d", pkg);
    put(rel, text);
    snprintf(rel, sizeof rel, "devices/system/cpu/cpu%d/topology/core_id", c);
    snprintf(text, sizeof text, "%d", c % 2);
    put(rel, text);
    snprintf(rel, sizeof rel, "devices/system/cpu/cpu%d/cache/index0/level",
             c);
    put(rel, "1");
    snprintf(rel, sizeof rel, "devices/system/cpu/cpu%d/cache/index0/"
             "shared_cpu_list", c);
    snprintf(text, sizeof text, "%d", c);
    put(rel, text);
    snprintf(rel, sizeof rel, "devices/system/cpu/cpu%d/cache/index3/level",
             c);
    put(rel, "3");
    snprintf(rel, sizeof rel, "devices/system/cpu/cpu%d/cache/index3/"
             "shared_cpu_list", c);
    snprintf(text, sizeof text, "%d,%d", l3, l3 + 4);
    put(rel, text);
  }
  put("bus/pci/devices/0000:81:00.0/vendor", "0x10de");
  put("bus/pci/devices/0000:81:00.0/class", "0x030200");
  put("bus/pci/devices/0000:81:00.0/numa_node", "1");
  put("bus/pci/devices/0000:01:00.0/vendor", "0x10de");
  put("bus/pci/devices/0000:01:00.0/class", "0x030000");
  put("bus/pci/devices/0000:01:00.0/numa_node", "0");
  put("bus/pci/devices/0000:01:00.1/vendor", "0x10de");
  put("bus/pci/devices/0000:01:00.1/class", "0x040300");
  put("bus/pci/devices/0000:02:00.0/vendor", "0x8086");
  put("bus/pci/devices/0000:02:00.0/class", "0x030000");
}

static void teardown(void)
{
  logdir_rmtree(root);
}

static const char *cpus_of(const struct numa_binding *b)
{
  static char buf[128];

  numa_format_list(&b->cpus, buf, sizeof buf);
  return buf;
}

static unsigned long nodes_of(const struct numa_binding *b)
{
  return b->nodes[0];
}

START_TEST(test_lists)
{
  cpu_set_t s;
  char buf[64];

  ck_assert_int_eq(numa_parse_list("0-3,8,10-11", &s), 0);
  ck_assert_int_eq(CPU_COUNT(&s), 7);
  numa_format_list(&s, buf, sizeof buf);
  ck_assert_str_eq(buf, "0-3,8,10-11");
  ck_assert_int_eq(numa_parse_list("", &s), 0);
  ck_assert_int_eq(CPU_COUNT(&s), 0);
  ck_assert_int_eq(numa_parse_list("3-1", &s), -EINVAL);
  ck_assert_int_eq(numa_parse_list("1,,2", &s), -EINVAL);
  ck_assert_int_eq(numa_parse_list("a", &s), -EINVAL);
  ck_assert_int_eq(numa_parse_list("0-99999", &s), -EINVAL);
  ck_assert_int_eq(numa_mode_parse("core-complex"), NUMA_CORE_COMPLEX);
  ck_assert_int_eq(numa_mode_parse("rack"), -EINVAL);
}
END_TEST

START_TEST(test_topology)
{
  struct numa_topo t;
  const int want[8][4] = {   /* id node package core, in order */
    { 0, 0, 0, 0 }, { 4, 0, 0, 0 }, { 1, 0, 0, 1 }, { 5, 0, 0, 1 },
    { 2, 1, 1, 0 }, { 6, 1, 1, 0 }, { 3, 1, 1, 1 }, { 7, 1, 1, 1 },
  };
  int gpus[4];

  make_tree(true);
  ck_assert_int_eq(numa_topo_read(root, NULL, &t), 0);
  ck_assert_int_eq(t.ncpus, 8);
  for (int i = 0; i < 8; i++) {
    ck_assert_int_eq(t.cpus[i].id, want[i][0]);
    ck_assert_int_eq(t.cpus[i].node, want[i][1]);
    ck_assert_int_eq(t.cpus[i].package, want[i][2]);
    ck_assert_int_eq(t.cpus[i].core, want[i][3]);
    ck_assert_int_eq(t.cpus[i].l3, t.cpus[i].id % 4);
  }
  numa_topo_free(&t);
  ck_assert_int_eq(numa_gpu_nodes(root, gpus, 4), 2);
  ck_assert_int_eq(gpus[0], 0);       /* 0000:01:00.0 */
  ck_assert_int_eq(gpus[1], 1);       /* 0000:81:00.0 */
}
END_TEST

/* A GPU whose numa_node is not a number is on no known node (-1), as one
 * without the file is; "-1" (no NUMA) is read as it is. */
START_TEST(test_gpu_node_unreadable)
{
  int gpus[4];

  make_tree(true);
  put("bus/pci/devices/0000:81:00.0/numa_node", "1x");
  put("bus/pci/devices/0000:c1:00.0/vendor", "0x10de");
  put("bus/pci/devices/0000:c1:00.0/class", "0x030200");
  put("bus/pci/devices/0000:c1:00.0/numa_node", "-1");
  ck_assert_int_eq(numa_gpu_nodes(root, gpus, 4), 3);
  ck_assert_int_eq(gpus[0], 0);       /* 0000:01:00.0 */
  ck_assert_int_eq(gpus[1], -1);      /* 0000:81:00.0: "1x" */
  ck_assert_int_eq(gpus[2], -1);      /* 0000:c1:00.0: "-1" */
}
END_TEST

START_TEST(test_topology_allowed_and_flat)
{
  struct numa_topo t;
  cpu_set_t allowed;

  make_tree(false);
  CPU_ZERO(&allowed);
  CPU_SET(2, &allowed);
  CPU_SET(5, &allowed);
  CPU_SET(100, &allowed);     /* not online */
  ck_assert_int_eq(numa_topo_read(root, &allowed, &t), 0);
  ck_assert_int_eq(t.ncpus, 2);
  ck_assert_int_eq(t.cpus[0].node, 0);   /* no node directories */
  ck_assert_int_eq(t.cpus[1].node, 0);
  numa_topo_free(&t);
  CPU_ZERO(&allowed);
  CPU_SET(100, &allowed);
  ck_assert_int_eq(numa_topo_read(root, &allowed, &t), -ENOENT);
  ck_assert_int_eq(numa_topo_read("/nonexistent", NULL, &t), -ENOENT);
}
END_TEST

/* CPU workers: a fair split of nodes, then of cores within them. */
START_TEST(test_plan_cpu)
{
  struct numa_topo t;
  struct numa_binding b[4];

  make_tree(true);
  ck_assert_int_eq(numa_topo_read(root, NULL, &t), 0);
  ck_assert_int_eq(numa_plan(&t, NUMA_EXCLUSIVE, 4, NULL, b), 0);
  ck_assert_str_eq(cpus_of(&b[0]), "0,4");
  ck_assert_str_eq(cpus_of(&b[1]), "1,5");
  ck_assert_str_eq(cpus_of(&b[2]), "2,6");
  ck_assert_str_eq(cpus_of(&b[3]), "3,7");
  ck_assert_uint_eq(nodes_of(&b[0]), 1);
  ck_assert_uint_eq(nodes_of(&b[3]), 2);
  ck_assert_int_eq(b[3].nnodes, 1);
  ck_assert_int_eq(numa_plan(&t, NUMA_NODE, 2, NULL, b), 0);
  ck_assert_str_eq(cpus_of(&b[0]), "0-1,4-5");
  ck_assert_str_eq(cpus_of(&b[1]), "2-3,6-7");
  /* More ranks than cores on a node: logical CPUs, then sharing. */
  ck_assert_int_eq(numa_plan(&t, NUMA_EXCLUSIVE, 1, NULL, b), 0);
  ck_assert_str_eq(cpus_of(&b[0]), "0-1,4-5");
  numa_topo_free(&t);
}
END_TEST

/* GPU workers: near their GPU's node. */
START_TEST(test_plan_gpu)
{
  struct numa_topo t;
  struct numa_binding b[3];
  const int home0[3] = { 0, 0, 0 }, home01[2] = { 1, 0 };
  const int unknown[1] = { -1 };

  make_tree(true);
  ck_assert_int_eq(numa_topo_read(root, NULL, &t), 0);
  ck_assert_int_eq(numa_plan(&t, NUMA_NODE, 2, home01, b), 0);
  ck_assert_str_eq(cpus_of(&b[0]), "2-3,6-7");
  ck_assert_str_eq(cpus_of(&b[1]), "0-1,4-5");
  ck_assert_int_eq(numa_plan(&t, NUMA_SOCKET, 2, home01, b), 0);
  ck_assert_str_eq(cpus_of(&b[0]), "2-3,6-7");
  ck_assert_int_eq(numa_plan(&t, NUMA_EXCLUSIVE, 3, home0, b), 0);
  ck_assert_str_eq(cpus_of(&b[0]), "0");
  ck_assert_str_eq(cpus_of(&b[1]), "4");
  ck_assert_str_eq(cpus_of(&b[2]), "1,5");
  ck_assert_int_eq(numa_plan(&t, NUMA_CORE_COMPLEX, 3, home0, b), 0);
  ck_assert_str_eq(cpus_of(&b[0]), "0,4");
  ck_assert_str_eq(cpus_of(&b[1]), "1,5");
  ck_assert_str_eq(cpus_of(&b[2]), "0,4");
  /* A GPU whose node the kernel does not know: the first node. */
  ck_assert_int_eq(numa_plan(&t, NUMA_NODE, 1, unknown, b), 0);
  ck_assert_str_eq(cpus_of(&b[0]), "0-1,4-5");
  ck_assert_int_eq(numa_plan(&t, NUMA_NODE, 0, NULL, b), -EINVAL);
  numa_topo_free(&t);
}
END_TEST

/* A socket spanning two nodes: memory interleaved over both. */
START_TEST(test_plan_socket_two_nodes)
{
  struct numa_topo t;
  struct numa_binding b[1];
  const int home[1] = { 0 };

  make_tree(true);
  put("devices/system/cpu/cpu2/topology/physical_package_id", "0");
  put("devices/system/cpu/cpu6/topology/physical_package_id", "0");
  ck_assert_int_eq(numa_topo_read(root, NULL, &t), 0);
  ck_assert_int_eq(numa_plan(&t, NUMA_SOCKET, 1, home, b), 0);
  ck_assert_str_eq(cpus_of(&b[0]), "0-2,4-6");
  ck_assert_int_eq(b[0].nnodes, 2);
  ck_assert_uint_eq(nodes_of(&b[0]), 3);
  numa_topo_free(&t);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("numa");
  TCase *tc = tcase_create("numa");
  SRunner *sr;
  int failed;

  tcase_add_checked_fixture(tc, NULL, teardown);
  tcase_add_test(tc, test_lists);
  tcase_add_test(tc, test_topology);
  tcase_add_test(tc, test_gpu_node_unreadable);
  tcase_add_test(tc, test_topology_allowed_and_flat);
  tcase_add_test(tc, test_plan_cpu);
  tcase_add_test(tc, test_plan_gpu);
  tcase_add_test(tc, test_plan_socket_two_nodes);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
