/* check_round_file.c -- unit tests for proto/worker/round_file.c, the
 * round file's one writer and one parser (the worker contract), and for
 * the file between its two users: what cdrun's agent writes
 * (launcher/live_handshake.c) is what libpg reads (libpg/live/live_round.c). */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "live.h"
#include "live_handshake.h"
#include "pg.h"
#include "round_file.h"

static int parse(const char *s, struct live_round *r, char *err,
                 size_t errlen)
{
  return round_file_parse(s, strlen(s), r, err, errlen);
}

/* ---- the writer --------------------------------------------------------- */

START_TEST(test_line)
{
  struct live_round r = { 7, 12, 4, 4 };
  char buf[128];

  ck_assert_int_eq(round_file_line(&r, buf, sizeof buf),
                   (int)strlen("round=7 world=12 rank_offset=4 "
                               "local_world=4\n"));
  ck_assert_str_eq(buf, "round=7 world=12 rank_offset=4 local_world=4\n");
  ck_assert_int_eq(round_file_line(&r, buf, 10), -ENOSPC);
  /* The largest round, whole. */
  r = (struct live_round){ (int64_t)1 << 62, 1 << 24, (1 << 24) - 1, 1 };
  ck_assert_int_gt(round_file_line(&r, buf, sizeof buf), 0);
  ck_assert_str_eq(buf, "round=4611686018427387904 world=16777216 "
                   "rank_offset=16777215 local_world=1\n");
  ck_assert_int_lt((int)strlen(buf), ROUND_FILE_MAX);
}
END_TEST

/* Every field survives the writer and the parser, at both ends of its
 * range and between. */
START_TEST(test_round_trip)
{
  static const struct live_round rounds[] = {
    { 0, 1, 0, 1 },
    { 3, 8, 4, 4 },
    { 1000, 1000, 996, 4 },
    { ((int64_t)1 << 62), 1 << 24, (1 << 24) - 1, 1 },
    { ((int64_t)1 << 62) - 1, 1 << 24, 0, 1 << 24 },
    { 123456789012LL, 77, 0, 77 },
    { 1, 65536, 32768, 8 },
  };
  char buf[ROUND_FILE_MAX], err[256];
  size_t i;

  for (i = 0; i < sizeof rounds / sizeof rounds[0]; i++) {
    struct live_round got = { -1, -1, -1, -1 };
    int n = round_file_line(&rounds[i], buf, sizeof buf);

    ck_assert_int_gt(n, 0);
    ck_assert_int_eq(round_file_parse(buf, (size_t)n, &got, err,
                                      sizeof err), 0);
    ck_assert_msg(got.round == rounds[i].round, "round %zu: %lld", i,
                  (long long)got.round);
    ck_assert_int_eq(got.world, rounds[i].world);
    ck_assert_int_eq(got.rank_offset, rounds[i].rank_offset);
    ck_assert_int_eq(got.local_world, rounds[i].local_world);
  }
}
END_TEST

/* ---- the parser --------------------------------------------------------- */

START_TEST(test_parse)
{
  struct live_round r;

  ck_assert_int_eq(parse("round=3 world=8 rank_offset=4 local_world=4\n", &r,
                         NULL, 0), 0);
  ck_assert_int_eq(r.round, 3);
  ck_assert_int_eq(r.world, 8);
  ck_assert_int_eq(r.rank_offset, 4);
  ck_assert_int_eq(r.local_world, 4);
  /* Any order, with or without the newline. */
  ck_assert_int_eq(parse("world=2 round=1 rank_offset=0 local_world=2\n", &r,
                         NULL, 0), 0);
  ck_assert_int_eq(r.round, 1);
  ck_assert_int_eq(r.world, 2);
  ck_assert_int_eq(parse("local_world=1 rank_offset=0 world=1 round=0", &r,
                         NULL, 0), 0);
  ck_assert_int_eq(r.world, 1);
}
END_TEST

/* Unknown names, missing, repeated or out-of-range fields, a second line,
 * a NUL: refused with a sentence naming the field or the text, and *out
 * untouched. */
START_TEST(test_parse_errors)
{
  static const struct { const char *text, *names; } bad[] = {
    { "", "round= is missing" },
    { "round=1", "world= is missing" },
    { "round=1 world=2 rank_offset=0\n", "local_world= is missing" },
    { "round=1 world=2 rank_offset=0 local_world=2 extra\n", "'extra'" },
    { "round=1 world=2 rank_offset=0 local_world=1 x=1", "'x=1' is not one "
      "of round=, world=, rank_offset=, local_world=" },
    { "round=1 world=2 rank_offset=0 local_world=1 Round=1", "'Round=1'" },
    { "round=1 round=1 world=2 rank_offset=0 local_world=1", "round= twice" },
    { "round=-1 world=2 rank_offset=0 local_world=2\n", "round is '-1', "
      "expected an integer 0..4611686018427387904" },
    { "round=4611686018427387905 world=2 rank_offset=0 local_world=2",
      "round is '4611686018427387905'" },
    { "round=x world=2 rank_offset=0 local_world=1", "round is 'x'" },
    { "round= world=2 rank_offset=0 local_world=1", "round is ''" },
    { "round=1 world=0 rank_offset=0 local_world=1\n", "world is '0'" },
    { "round=1 world=16777217 rank_offset=0 local_world=1", "world is" },
    { "round=1 world=2 rank_offset=0 local_world=0\n", "local_world is '0'" },
    { "round=1 world=2 rank_offset=2 local_world=1\n", "rank_offset 2 + "
      "local_world 1 is more than the world of 2" },
    { "round=1 world=2 rank_offset=0 local_world", "'local_world'" },
    { "round=1  world=2 rank_offset=0 local_world=1", "''" },
    { " round=1 world=2 rank_offset=0 local_world=1", "''" },
    { "round=1 world=2\nrank_offset=0 local_world=1\n", "expected one line" },
    { "round=1 world=2 rank_offset=0 local_world=1\n\n",
      "expected one line" },
    { "round=1 world=2 rank_offset=0 local_world=1\r\n", "local_world is" },
  };
  char err[256];
  size_t i;

  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct live_round r = { -7, -7, -7, -7 };

    err[0] = '\0';
    ck_assert_msg(parse(bad[i].text, &r, err, sizeof err) == -EINVAL,
                  "'%s' accepted", bad[i].text);
    ck_assert_msg(strstr(err, bad[i].names) != NULL,
                  "'%s': sentence '%s' lacks '%s'", bad[i].text, err,
                  bad[i].names);
    ck_assert(r.round == -7 && r.world == -7 && r.rank_offset == -7 &&
              r.local_world == -7);
  }
  /* No room for the sentence: still refused. */
  {
    struct live_round r;

    ck_assert_int_eq(parse("round=x", &r, NULL, 0), -EINVAL);
  }
}
END_TEST

/* A NUL inside the text is not the end of it. */
START_TEST(test_parse_nul)
{
  static const char text[] = "round=1 world=2\0 rank_offset=0 local_world=1";
  struct live_round r;
  char err[256];

  ck_assert_int_eq(round_file_parse(text, sizeof text - 1, &r, err,
                                    sizeof err), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "expected one line"));
}
END_TEST

/* A file cut short anywhere before its last digit is refused, never
 * taken for another round. */
START_TEST(test_parse_truncated)
{
  const char *line = "round=3 world=8 rank_offset=4 local_world=4\n";
  size_t whole = strlen(line) - 1, n;   /* without the newline */
  struct live_round r;
  char err[256];

  for (n = 0; n < whole; n++) {
    err[0] = '\0';
    ck_assert_msg(round_file_parse(line, n, &r, err, sizeof err) == -EINVAL,
                  "'%.*s' accepted", (int)n, line);
    ck_assert_msg(err[0] != '\0', "'%.*s': no sentence", (int)n, line);
  }
  ck_assert_int_eq(round_file_parse(line, whole, &r, err, sizeof err), 0);
  ck_assert_int_eq(round_file_parse(line, whole + 1, &r, err, sizeof err), 0);
}
END_TEST

/* ROUND_FILE_MAX bytes or more: refused before anything is looked at. */
START_TEST(test_parse_oversized)
{
  char text[ROUND_FILE_MAX + 1], err[256];
  struct live_round r;
  int n;

  memset(text, ' ', sizeof text);
  n = snprintf(text, sizeof text, "round=1 world=2 rank_offset=0 "
               "local_world=2");
  text[n] = ' ';
  ck_assert_int_eq(round_file_parse(text, ROUND_FILE_MAX, &r, err,
                                    sizeof err), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "over 511 bytes"));
  /* A byte shorter, the same text is parsed, and refused for what it
   * says (the second space opens an empty field), not for its size. */
  ck_assert_int_eq(round_file_parse(text, ROUND_FILE_MAX - 1, &r, err,
                                    sizeof err), -EINVAL);
  ck_assert_ptr_null(strstr(err, "bytes"));
}
END_TEST

/* ---- cdrun writes, libpg reads ------------------------------------------ */

START_TEST(test_agent_to_worker)
{
  char dir[] = "/tmp/check_round_file.XXXXXX", path[PATH_MAX];
  struct live_round r = { 5, 12, 8, 4 }, got;
  int slot;

  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/%s", dir, LIVE_HANDSHAKE_ROUND);
  ck_assert_int_eq(live_handshake_write_round(path, &r), 0);
  ck_assert_int_eq(pg__live_round_read(path, &got), 0);
  ck_assert_int_eq(got.round, 5);
  ck_assert_int_eq(got.world, 12);
  ck_assert_int_eq(got.rank_offset, 8);
  ck_assert_int_eq(got.local_world, 4);
  ck_assert_int_eq(pg__live_round_slot(&got, 3, &slot), 0);
  ck_assert_int_eq(slot, 11);
  /* libpg's sentence names the file, then the contract's reason. */
  r.rank_offset = 9;
  ck_assert_int_eq(live_handshake_write_round(path, &r), 0);
  ck_assert_int_eq(pg__live_round_read(path, &got), -EINVAL);
  ck_assert_ptr_nonnull(strstr(pg_last_error(), path));
  ck_assert_ptr_nonnull(strstr(pg_last_error(), ": rank_offset 9 + "
                               "local_world 4 is more than the world of "
                               "12"));
  ck_assert_int_eq(unlink(path), 0);
  ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

static Suite *round_file_suite(void)
{
  Suite *s = suite_create("round_file");
  TCase *tc = tcase_create("grammar");
  TCase *files = tcase_create("files");

  tcase_add_test(tc, test_line);
  tcase_add_test(tc, test_round_trip);
  tcase_add_test(tc, test_parse);
  tcase_add_test(tc, test_parse_errors);
  tcase_add_test(tc, test_parse_nul);
  tcase_add_test(tc, test_parse_truncated);
  tcase_add_test(tc, test_parse_oversized);
  suite_add_tcase(s, tc);
  tcase_add_test(files, test_agent_to_worker);
  suite_add_tcase(s, files);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(round_file_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
