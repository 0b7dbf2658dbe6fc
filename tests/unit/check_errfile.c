/* check_errfile.c -- unit tests for errfile_read (both torchrun formats). */
#include "errfile.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/check_errfile.XXXXXX";
static char path[256];

static void setup(void)
{
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
  snprintf(path, sizeof(path), "%s/error.json", tmpdir);
}

static void teardown(void)
{
  unlink(path);
  rmdir(tmpdir);
  /* mkdtemp rewrote the template; restore it for the next test */
  memcpy(tmpdir + strlen(tmpdir) - 6, "XXXXXX", 6);
}

static void write_file(const char *data, size_t len)
{
  FILE *fp = fopen(path, "w");

  ck_assert_ptr_nonnull(fp);
  ck_assert_uint_eq(fwrite(data, 1, len, fp), len);
  ck_assert_int_eq(fclose(fp), 0);
}

static void write_str(const char *s)
{
  write_file(s, strlen(s));
}

/* Reads path expecting rc; on failure also checks the struct is empty. */
static int read_it(struct errfile_info *e, char *err, size_t errlen)
{
  int rc = errfile_read(path, e, err, errlen);

  if (rc < 0) {
    ck_assert_ptr_null(e->message);
    ck_assert_ptr_null(e->traceback);
    ck_assert_int_eq(e->error_code, 0);
    ck_assert(e->timestamp == 0);
  }
  return rc;
}

START_TEST(nested_format_string_ts)
{
  struct errfile_info e;
  char err[128];

  write_str("{\"message\": {\"message\": \"ValueError: boom\", \"extraInfo\": "
            "{\"py_callstack\": \"Traceback (most recent call last):\\n"
            "  File \\\"t.py\\\", line 1\\nValueError: boom\\n\", "
            "\"timestamp\": \"1714000000\"}, \"errorCode\": 1}}");
  ck_assert_int_eq(read_it(&e, err, sizeof(err)), 0);
  ck_assert_str_eq(err, "");
  ck_assert_str_eq(e.message, "ValueError: boom");
  ck_assert_str_eq(e.traceback, "Traceback (most recent call last):\n"
                   "  File \"t.py\", line 1\nValueError: boom\n");
  ck_assert_double_eq(e.timestamp, 1714000000.0);
  ck_assert_int_eq(e.error_code, 1);
  errfile_free(&e);
  ck_assert_ptr_null(e.message);
  ck_assert_ptr_null(e.traceback);
}
END_TEST

START_TEST(nested_format_number_ts)
{
  struct errfile_info e;
  char err[128];

  write_str("{\"message\": {\"message\": \"RuntimeError: x\", \"extraInfo\": "
            "{\"py_callstack\": \"tb\", \"timestamp\": 1714000000.5}}}");
  ck_assert_int_eq(read_it(&e, err, sizeof(err)), 0);
  ck_assert_str_eq(e.message, "RuntimeError: x");
  ck_assert_str_eq(e.traceback, "tb");
  ck_assert_double_eq(e.timestamp, 1714000000.5);
  ck_assert_int_eq(e.error_code, 0);
  errfile_free(&e);
}
END_TEST

START_TEST(nested_format_error_code)
{
  struct errfile_info e;
  char err[128];

  write_str("{\"message\": {\"message\": \"m\", \"errorCode\": 137, "
            "\"extraInfo\": {\"timestamp\": \"12\"}}}");
  ck_assert_int_eq(read_it(&e, err, sizeof(err)), 0);
  ck_assert_str_eq(e.message, "m");
  ck_assert_ptr_null(e.traceback);
  ck_assert_int_eq(e.error_code, 137);
  ck_assert_double_eq(e.timestamp, 12.0);
  errfile_free(&e);
}
END_TEST

START_TEST(nested_missing_extra_info)
{
  struct errfile_info e;
  char err[128];

  write_str("{\"message\": {\"message\": \"only text\"}}");
  ck_assert_int_eq(read_it(&e, err, sizeof(err)), 0);
  ck_assert_str_eq(e.message, "only text");
  ck_assert_ptr_null(e.traceback);
  ck_assert_double_eq(e.timestamp, 0.0);
  ck_assert_int_eq(e.error_code, 0);
  errfile_free(&e);
}
END_TEST

START_TEST(nested_missing_inner_message)
{
  struct errfile_info e;
  char err[128];

  write_str("{\"message\": {\"extraInfo\": {\"py_callstack\": \"tb\", "
            "\"timestamp\": \"5\"}, \"errorCode\": 2}}");
  ck_assert_int_eq(read_it(&e, err, sizeof(err)), 0);
  /* the message object itself, compactly printed */
  ck_assert_str_eq(e.message, "{\"extraInfo\":{\"py_callstack\":\"tb\","
                   "\"timestamp\":\"5\"},\"errorCode\":2}");
  ck_assert_str_eq(e.traceback, "tb");
  ck_assert_double_eq(e.timestamp, 5.0);
  ck_assert_int_eq(e.error_code, 2);
  errfile_free(&e);
}
END_TEST

START_TEST(nested_non_string_inner_message)
{
  struct errfile_info e;
  char err[128];

  write_str("{\"message\": {\"message\": [1, \"two\"]}}");
  ck_assert_int_eq(read_it(&e, err, sizeof(err)), 0);
  ck_assert_str_eq(e.message, "[1,\"two\"]");
  errfile_free(&e);
}
END_TEST

START_TEST(nested_empty_object)
{
  struct errfile_info e;
  char err[128];

  write_str("{\"message\": {}}");
  ck_assert_int_eq(read_it(&e, err, sizeof(err)), -EINVAL);
  ck_assert_str_eq(err, "\"message\" is an empty object");
}
END_TEST

START_TEST(flat_format_number_ts)
{
  struct errfile_info e;
  char err[128];

  write_str("{\"message\": \"text\", \"timestamp\": 1714000000}\n");
  ck_assert_int_eq(read_it(&e, err, sizeof(err)), 0);
  ck_assert_str_eq(e.message, "text");
  ck_assert_ptr_null(e.traceback);
  ck_assert_double_eq(e.timestamp, 1714000000.0);
  ck_assert_int_eq(e.error_code, 0);
  errfile_free(&e);
}
END_TEST

START_TEST(flat_format_string_ts)
{
  struct errfile_info e;
  char err[128];

  write_str("{\"message\": \"line1\\nline2\", \"timestamp\": \"1714000001\","
            " \"errorCode\": 3}");
  ck_assert_int_eq(read_it(&e, err, sizeof(err)), 0);
  ck_assert_str_eq(e.message, "line1\nline2");
  ck_assert_double_eq(e.timestamp, 1714000001.0);
  ck_assert_int_eq(e.error_code, 3);
  errfile_free(&e);
}
END_TEST

START_TEST(flat_format_no_ts)
{
  struct errfile_info e;
  char err[128];

  write_str("{\"message\": \"\"}");
  ck_assert_int_eq(read_it(&e, err, sizeof(err)), 0);
  ck_assert_str_eq(e.message, "");
  ck_assert_double_eq(e.timestamp, 0.0);
  errfile_free(&e);
}
END_TEST

START_TEST(bad_timestamps_are_absent)
{
  static const char *const docs[] = {
    "{\"message\": \"m\", \"timestamp\": \"soon\"}",
    "{\"message\": \"m\", \"timestamp\": \"12abc\"}",
    "{\"message\": \"m\", \"timestamp\": -5}",
    "{\"message\": \"m\", \"timestamp\": \"nan\"}",
    "{\"message\": \"m\", \"timestamp\": null}",
    "{\"message\": \"m\", \"timestamp\": [1]}",
    "{\"message\": \"m\", \"timestamp\": \"0x10\"}",
    "{\"message\": \"m\", \"timestamp\": \"infinity\"}",
    "{\"message\": \"m\", \"timestamp\": \"1e999\"}",
    "{\"message\": \"m\", \"timestamp\": \"\\n\"}",
  };

  for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
    struct errfile_info e;
    char err[128];

    write_str(docs[i]);
    ck_assert_int_eq(read_it(&e, err, sizeof(err)), 0);
    ck_assert_str_eq(e.message, "m");
    ck_assert_msg(e.timestamp == 0, "doc %zu: ts %f", i, e.timestamp);
    errfile_free(&e);
  }
}
END_TEST

/* A numeric string may have blanks around it (a script's "12\n"). */
START_TEST(string_timestamp_with_blanks)
{
  struct errfile_info e;
  char err[128];

  write_str("{\"message\": \"m\", \"timestamp\": \" 12.5\\n\"}");
  ck_assert_int_eq(read_it(&e, err, sizeof(err)), 0);
  ck_assert_double_eq(e.timestamp, 12.5);
  errfile_free(&e);
}
END_TEST

/* errorCode as a string: the whole string is the number, else 0. */
START_TEST(string_error_codes)
{
  static const struct {
    const char *code;
    int want;
  } cases[] = {
    { "7", 7 }, { "-3", -3 }, { "+4", 4 }, { "99999999999", INT_MAX },
    { "-99999999999", INT_MIN }, { "7x", 0 }, { "", 0 }, { "0x10", 0 },
    { "99999999999999999999999", 0 },
  };

  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct errfile_info e;
    char doc[128], err[128];

    snprintf(doc, sizeof doc, "{\"message\": \"m\", \"errorCode\": \"%s\"}",
             cases[i].code);
    write_str(doc);
    ck_assert_int_eq(read_it(&e, err, sizeof(err)), 0);
    ck_assert_msg(e.error_code == cases[i].want, "'%s': %d", cases[i].code,
                  e.error_code);
    errfile_free(&e);
  }
}
END_TEST

START_TEST(missing_file)
{
  struct errfile_info e;
  char err[256];

  ck_assert_int_eq(read_it(&e, err, sizeof(err)), -ENOENT);
  ck_assert_ptr_nonnull(strstr(err, "cannot open"));
  ck_assert_ptr_nonnull(strstr(err, path));
}
END_TEST

START_TEST(directory_is_error)
{
  struct errfile_info e;
  char err[256];
  int rc = errfile_read(tmpdir, &e, err, sizeof(err));

  ck_assert_int_eq(rc, -EISDIR);
  ck_assert_ptr_null(e.message);
}
END_TEST

/* A FIFO must be refused, not block the reader in open() forever (the
 * suite's timeout fails the test if it does). */
START_TEST(fifo_is_refused)
{
  struct errfile_info e;
  char err[512];

  ck_assert_int_eq(mkfifo(path, 0600), 0);
  ck_assert_int_eq(read_it(&e, err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "is not a regular file"));
  ck_assert_ptr_null(e.message);
}
END_TEST

START_TEST(empty_file)
{
  struct errfile_info e;
  char err[128];

  write_str("");
  ck_assert_int_eq(read_it(&e, err, sizeof(err)), -EINVAL);
  ck_assert_str_eq(err, "empty error file");
}
END_TEST

START_TEST(invalid_json)
{
  static const char *const docs[] = {
    "not json at all", "{\"message\": \"x\"", "   \n", "{\"message\": }",
  };

  for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
    struct errfile_info e;
    char err[128];

    write_str(docs[i]);
    ck_assert_int_eq(read_it(&e, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strncmp(err, "invalid JSON near byte ", 23) == 0,
                  "doc %zu: %s", i, err);
  }
}
END_TEST

START_TEST(trailing_garbage)
{
  struct errfile_info e;
  char err[128];

  write_str("{\"message\": \"x\"} {}");
  ck_assert_int_eq(read_it(&e, err, sizeof(err)), -EINVAL);
  ck_assert_str_eq(err, "trailing data after JSON at byte 17");
}
END_TEST

START_TEST(not_an_object)
{
  static const char *const docs[] = { "[1, 2]", "\"message\"", "42", "null" };

  for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
    struct errfile_info e;
    char err[128];

    write_str(docs[i]);
    ck_assert_int_eq(read_it(&e, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "error file is JSON but not an object");
  }
}
END_TEST

START_TEST(no_message_key)
{
  struct errfile_info e;
  char err[128];

  write_str("{\"Message\": \"case matters\", \"timestamp\": 1}");
  ck_assert_int_eq(read_it(&e, err, sizeof(err)), -EINVAL);
  ck_assert_str_eq(err, "error file has no \"message\" key");
}
END_TEST

START_TEST(message_wrong_type)
{
  static const char *const docs[] = {
    "{\"message\": null}", "{\"message\": 7}", "{\"message\": [\"a\"]}",
  };

  for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
    struct errfile_info e;
    char err[128];

    write_str(docs[i]);
    ck_assert_int_eq(read_it(&e, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "\"message\" is neither a string nor an object");
  }
}
END_TEST

/* A valid document of exactly 4 MiB still parses; one byte more does not. */
START_TEST(size_limit)
{
  const size_t max = 4u << 20;
  char *big = malloc(max + 1);
  struct errfile_info e;
  char err[128];

  ck_assert_ptr_nonnull(big);
  memset(big, 'a', max + 1);
  memcpy(big, "{\"message\": \"", 13);
  memcpy(big + max - 2, "\"}", 2);
  write_file(big, max);
  ck_assert_int_eq(read_it(&e, err, sizeof(err)), 0);
  ck_assert_uint_eq(strlen(e.message), max - 15);
  errfile_free(&e);

  write_file(big, max + 1);
  ck_assert_int_eq(read_it(&e, err, sizeof(err)), -EFBIG);
  ck_assert_ptr_nonnull(strstr(err, "larger than 4 MiB"));
  free(big);
}
END_TEST

START_TEST(null_err_buffer_and_free_twice)
{
  struct errfile_info e;

  ck_assert_int_eq(errfile_read(path, &e, NULL, 0), -ENOENT);
  write_str("{\"message\": \"x\"}");
  ck_assert_int_eq(errfile_read(path, &e, NULL, 0), 0);
  ck_assert_str_eq(e.message, "x");
  errfile_free(&e);
  errfile_free(&e);
  errfile_free(NULL);
  ck_assert_ptr_null(e.message);
  ck_assert_int_eq(errfile_read(NULL, &e, NULL, 0), -EINVAL);
  ck_assert_int_eq(errfile_read(path, NULL, NULL, 0), -EINVAL);
}
END_TEST

START_TEST(short_err_buffer_truncates)
{
  struct errfile_info e;
  char err[6];

  write_str("");
  ck_assert_int_eq(read_it(&e, err, sizeof(err)), -EINVAL);
  ck_assert_str_eq(err, "empty");
}
END_TEST

static Suite *errfile_suite(void)
{
  Suite *s = suite_create("errfile");
  TCase *tc = tcase_create("read");

  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, nested_format_string_ts);
  tcase_add_test(tc, nested_format_number_ts);
  tcase_add_test(tc, nested_format_error_code);
  tcase_add_test(tc, nested_missing_extra_info);
  tcase_add_test(tc, nested_missing_inner_message);
  tcase_add_test(tc, nested_non_string_inner_message);
  tcase_add_test(tc, nested_empty_object);
  tcase_add_test(tc, flat_format_number_ts);
  tcase_add_test(tc, flat_format_string_ts);
  tcase_add_test(tc, flat_format_no_ts);
  tcase_add_test(tc, bad_timestamps_are_absent);
  tcase_add_test(tc, string_timestamp_with_blanks);
  tcase_add_test(tc, string_error_codes);
  tcase_add_test(tc, missing_file);
  tcase_add_test(tc, directory_is_error);
  tcase_add_test(tc, fifo_is_refused);
  tcase_add_test(tc, empty_file);
  tcase_add_test(tc, invalid_json);
  tcase_add_test(tc, trailing_garbage);
  tcase_add_test(tc, not_an_object);
  tcase_add_test(tc, no_message_key);
  tcase_add_test(tc, message_wrong_type);
  tcase_add_test(tc, size_limit);
  tcase_add_test(tc, null_err_buffer_and_free_twice);
  tcase_add_test(tc, short_err_buffer_truncates);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(errfile_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
