/* check_peer_text.c -- bytes a peer sent, at every sink that shows them
 * (issue 19, item 6): the escaper (proto/peer_text.c), rdzvd's log lines
 * (log_file_line), cdrun's messages (say) and its failure summary
 * (summary_print).  A forged line or a raw control byte at any of them
 * fails here. */
#include "log_file.h"
#include "peer_text.h"
#include "say.h"
#include "summary.h"

#include <check.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A job id as the attacker sent it: a newline, a forged daemon
 * line, and a terminal escape (red text, clear screen). */
#define HOSTILE "job\n2026-01-01 00:00:00.000 rdzvd: forged\x1b[31m\x1b[2J"

static const char *esc(const char *in, unsigned flags)
{
  static char out[1024];

  peer_text_escape(out, sizeof out, in, strlen(in), flags);
  return out;
}

/* True when s holds a byte a terminal could act on, but newlines and
 * tabs. */
static bool has_control(const char *s)
{
  for (; *s; s++)
    if (((unsigned char)*s < 0x20 && *s != '\n' && *s != '\t') ||
        *s == 0x7f)
      return true;
  return false;
}

static int count_lines(const char *s)
{
  int n = 0;

  for (; *s; s++)
    n += *s == '\n';
  return n;
}

START_TEST(escapes)
{
  ck_assert_str_eq(esc("plain text: ok (1/2) ~", 0), "plain text: ok (1/2) ~");
  ck_assert_str_eq(esc("a\nb\rc\td", 0), "a\\nb\\rc\\td");
  ck_assert_str_eq(esc("\x1b[31mred", 0), "\\x1b[31mred");
  ck_assert_str_eq(esc("back\\slash", 0), "back\\\\slash");
  ck_assert_str_eq(esc("\x01\x7f", 0), "\\x01\\x7f");
  /* UTF-8 passes; C1 controls (CSI as U+009B), malformed and overlong
   * sequences, surrogates do not. */
  ck_assert_str_eq(esc("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80", 0),
                   "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80");
  ck_assert_str_eq(esc("\xc2\x9b" "2J", 0), "\\xc2\\x9b2J");
  ck_assert_str_eq(esc("\x9b\xff", 0), "\\x9b\\xff");
  ck_assert_str_eq(esc("\xc0\x8a", 0), "\\xc0\\x8a");
  ck_assert_str_eq(esc("\xed\xa0\x80", 0), "\\xed\\xa0\\x80");
  ck_assert_str_eq(esc("\xe2\x82", 0), "\\xe2\\x82");    /* cut short */
  /* Multi-line text keeps its newlines, tabs and backslashes. */
  ck_assert_str_eq(esc("a\n\tb\\c\x1b\r", PEER_TEXT_LINES),
                   "a\n\tb\\c\\x1b\\r");
}
END_TEST

START_TEST(truncation_keeps_escapes_whole)
{
  char out[6];

  ck_assert_uint_eq(peer_text_escape(out, sizeof out, "ab\x1b", 3, 0), 2);
  ck_assert_str_eq(out, "ab");
  ck_assert_uint_eq(peer_text_escape(out, sizeof out, "abcdefgh", 8, 0), 5);
  ck_assert_str_eq(out, "abcde");
  ck_assert_uint_eq(peer_text_escape(out, 0, "x", 1, 0), 0);
  /* Not inside a UTF-8 character either. */
  ck_assert_uint_eq(peer_text_escape(out, sizeof out, "abcd\xc3\xa9", 6,
                                     0), 4);
  ck_assert_str_eq(out, "abcd");
}
END_TEST

START_TEST(json_stays_json)
{
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);

  ck_assert_ptr_nonnull(f);
  peer_text_fputs_json("{\"id\":\"a\\n\xc2\x9b\x7f\x1b\xff\xc3\xa9\"}", f);
  ck_assert_int_eq(fclose(f), 0);
  ck_assert_str_eq(buf, "{\"id\":\"a\\n\\u00c2\\u009b\\u007f\\u001b\\u00ff"
                        "\xc3\xa9\"}");
  free(buf);
}
END_TEST

/* Reads a whole small file. */
static char *slurp(const char *path)
{
  static char buf[65536];
  FILE *f = fopen(path, "r");
  size_t n;

  ck_assert_ptr_nonnull(f);
  n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* rdzvd's log: one line per log_file_line, however hostile the text. */
START_TEST(log_line_escaped)
{
  char path[] = "/tmp/check_peer_text.XXXXXX";
  struct log_file lf;
  const char *text;
  int fd = mkstemp(path);

  ck_assert_int_ge(fd, 0);
  close(fd);
  ck_assert_int_eq(log_file_open(&lf, path), 0);
  log_file_line(&lf, "job " HOSTILE ": node joined");
  log_file_close(&lf);
  text = slurp(path);
  unlink(path);
  ck_assert_int_eq(count_lines(text), 1);
  ck_assert_msg(!has_control(text), "raw control bytes in '%s'", text);
  ck_assert_ptr_nonnull(strstr(text, " rdzvd: job job\\n2026-01-01 "
                               "00:00:00.000 rdzvd: forged\\x1b[31m"));
}
END_TEST

/* cdrun's messages: say writes one line on fd 2. */
START_TEST(say_escaped)
{
  char path[] = "/tmp/check_peer_text.XXXXXX";
  const char *text;
  int fd = mkstemp(path), saved = dup(2);

  ck_assert_int_ge(fd, 0);
  ck_assert_int_ge(saved, 0);
  dup2(fd, 2);
  say("restarting the worker group: %s", HOSTILE);
  dup2(saved, 2);
  close(saved);
  close(fd);
  text = slurp(path);
  unlink(path);
  ck_assert_int_eq(count_lines(text), 1);
  ck_assert_msg(!has_control(text), "raw control bytes in '%s'", text);
  ck_assert_ptr_nonnull(strstr(text, "cdrun: restarting the worker group: "
                               "job\\n2026"));
}
END_TEST

/* The failure summary: its one-line fields stay one line; a traceback
 * keeps its lines but loses its control bytes. */
START_TEST(summary_escaped)
{
  struct worker_failure f = {
    .local_rank = 0, .rank = 0, .pid = 42, .exitcode = 1, .time = 0,
    .error_file = "/tmp/e\x1b[2J.json",
    .message = "boom",
    .traceback = "Traceback:\n  line 1\x1b[31m\n\tx = 1\\2\r\n",
  };
  char *buf = NULL;
  size_t len = 0;
  FILE *fp = open_memstream(&buf, &len);

  ck_assert_ptr_nonnull(fp);
  summary_print(fp, "train.py", "host" HOSTILE, &f, 1);
  ck_assert_int_eq(fclose(fp), 0);
  ck_assert_msg(!has_control(buf), "raw control bytes in:\n%s", buf);
  ck_assert_ptr_null(strstr(buf, "\nrdzvd: forged"));
  ck_assert_ptr_nonnull(strstr(buf, "  host      : hostjob\\n2026"));
  ck_assert_ptr_nonnull(strstr(buf, "  error_file: /tmp/e\\x1b[2J.json\n"));
  ck_assert_ptr_nonnull(strstr(buf, "  traceback : Traceback:\n    line "
                                    "1\\x1b[31m\n  \tx = 1\\2\n"));
  free(buf);
}
END_TEST

static Suite *peer_text_suite(void)
{
  Suite *s = suite_create("peer_text");
  TCase *tc = tcase_create("peer_text");

  tcase_add_test(tc, escapes);
  tcase_add_test(tc, truncation_keeps_escapes_whole);
  tcase_add_test(tc, json_stays_json);
  tcase_add_test(tc, log_line_escaped);
  tcase_add_test(tc, say_escaped);
  tcase_add_test(tc, summary_escaped);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(peer_text_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
