/* check_output.c -- unit tests for launcher/output.c: line prefixes and
 * the line assembler (moved here from check_logs.c with them). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "output.h"

/* ---- prefix ---------------------------------------------------------- */

START_TEST(test_prefix_default)
{
  char out[64];

  ck_assert_uint_eq(output_format_prefix(NULL, "default", 0, 5, out,
                                       sizeof(out)), 11);
  ck_assert_str_eq(out, "[default0]:");
  ck_assert_uint_eq(output_format_prefix(NULL, "trainer", 12, 0, out,
                                       sizeof(out)), 12);
  ck_assert_str_eq(out, "[trainer12]:");
  ck_assert_uint_eq(output_format_prefix(NULL, NULL, 1, 0, out,
                                       sizeof(out)), 4);
  ck_assert_str_eq(out, "[1]:");
}
END_TEST

START_TEST(test_prefix_template)
{
  char out[64];

  ck_assert_uint_eq(output_format_prefix("[${role_name}${local_rank}|${rank}]:",
                                       "default", 3, 11, out, sizeof(out)),
                    14);
  ck_assert_str_eq(out, "[default3|11]:");
  /* The unbraced $name form of string.Template. */
  output_format_prefix("$role_name-$rank: ", "w", 0, 5, out, sizeof(out));
  ck_assert_str_eq(out, "w-5: ");
  output_format_prefix("${rank}x$local_rank", "w", 2, -1, out, sizeof(out));
  ck_assert_str_eq(out, "-1x2");
  output_format_prefix("plain", "w", 2, 1, out, sizeof(out));
  ck_assert_str_eq(out, "plain");
  ck_assert_uint_eq(output_format_prefix("", "w", 2, 1, out, sizeof(out)), 0);
  ck_assert_str_eq(out, "");
}
END_TEST

START_TEST(test_prefix_hostname)
{
  char out[512], host[256], want[300];

  ck_assert_int_eq(gethostname(host, sizeof host), 0);
  host[sizeof host - 1] = '\0';
  snprintf(want, sizeof want, "%s:1|w", host);
  output_format_prefix("${hostname}:${rank}|$role_name", "w", 0, 1, out,
                     sizeof out);
  ck_assert_str_eq(out, want);
}
END_TEST

START_TEST(test_prefix_unknown_and_dollars)
{
  char out[64];

  output_format_prefix("${foo}-$bar-${rank}", "r", 0, 7, out, sizeof(out));
  ck_assert_str_eq(out, "${foo}-$bar-7");
  output_format_prefix("$$rank=$rank", "r", 0, 7, out, sizeof(out));
  ck_assert_str_eq(out, "$rank=7");
  output_format_prefix("a$", "r", 0, 7, out, sizeof(out));
  ck_assert_str_eq(out, "a$");
  output_format_prefix("${rank", "r", 0, 7, out, sizeof(out));
  ck_assert_str_eq(out, "${rank");
  output_format_prefix("${1}$1 $ x", "r", 0, 7, out, sizeof(out));
  ck_assert_str_eq(out, "${1}$1 $ x");
  /* Identifiers are greedy and case-sensitive, as in Python. */
  output_format_prefix("$rankx|${RANK}|$rank_", "r", 0, 7, out, sizeof(out));
  ck_assert_str_eq(out, "$rankx|${RANK}|$rank_");
}
END_TEST

START_TEST(test_prefix_truncation)
{
  char out[8];

  memset(out, 'z', sizeof(out));
  ck_assert_uint_eq(output_format_prefix(NULL, "default", 0, 0, out, 5), 4);
  ck_assert_str_eq(out, "[def");
  ck_assert_int_eq(out[5], 'z');
  ck_assert_uint_eq(output_format_prefix("${rank}", "x", 0, 123456, out, 4),
                    3);
  ck_assert_str_eq(out, "123");
  ck_assert_uint_eq(output_format_prefix(NULL, "default", 0, 0, out, 1), 0);
  ck_assert_str_eq(out, "");
  out[0] = 'q';
  ck_assert_uint_eq(output_format_prefix(NULL, "default", 0, 0, out, 0), 0);
  ck_assert_int_eq(out[0], 'q');
}
END_TEST

/* ---- liner ----------------------------------------------------------- */

/* Collects sink output and checks each call is one whole line. */
struct sink {
  char *data;
  size_t len, size;
  size_t calls;
  const char *prefix;
  size_t max_call;
};

static void sink_fn(void *ctx, const char *buf, size_t len)
{
  struct sink *s = ctx;
  size_t plen = strlen(s->prefix);

  ck_assert_uint_ge(len, plen + 1);
  ck_assert(memcmp(buf, s->prefix, plen) == 0);
  ck_assert_int_eq(buf[len - 1], '\n');
  ck_assert_ptr_null(memchr(buf + plen, '\n', len - plen - 1));
  if (s->len + len + 1 > s->size) {
    s->size = (s->len + len + 1) * 2;
    s->data = realloc(s->data, s->size);
    ck_assert_ptr_nonnull(s->data);
  }
  memcpy(s->data + s->len, buf, len);
  s->len += len;
  s->data[s->len] = '\0';
  s->calls++;
  if (len > s->max_call)
    s->max_call = len;
}

static void sink_init(struct sink *s, const char *prefix)
{
  memset(s, 0, sizeof(*s));
  s->prefix = prefix;
  s->size = 64;
  s->data = calloc(1, s->size);
  ck_assert_ptr_nonnull(s->data);
}

static void feed_str(struct output_liner *l, const char *str)
{
  output_liner_feed(l, str, strlen(str));
}

START_TEST(test_liner_multiline_chunk)
{
  struct sink s;
  struct output_liner *l;

  sink_init(&s, "[p0]:");
  l = output_liner_new("[p0]:", 0, sink_fn, &s);
  ck_assert_ptr_nonnull(l);
  feed_str(l, "a\nbb\n\nccc\r\nd");
  ck_assert_uint_eq(s.calls, 4);
  ck_assert_str_eq(s.data, "[p0]:a\n[p0]:bb\n[p0]:\n[p0]:ccc\r\n");
  feed_str(l, "ee\n");
  ck_assert_uint_eq(s.calls, 5);
  ck_assert_str_eq(s.data + s.len - 9, "[p0]:dee\n");
  output_liner_free(l);
  free(s.data);
}
END_TEST

START_TEST(test_liner_byte_at_a_time)
{
  const char *text = "hello\n\nworld\r\nlast";
  struct sink s;
  struct output_liner *l;

  sink_init(&s, "P:");
  l = output_liner_new("P:", 0, sink_fn, &s);
  ck_assert_ptr_nonnull(l);
  for (size_t i = 0; text[i]; i++)
    output_liner_feed(l, text + i, 1);
  ck_assert_uint_eq(s.calls, 3);
  ck_assert_str_eq(s.data, "P:hello\nP:\nP:world\r\n");
  output_liner_feed(l, "", 0);
  ck_assert_uint_eq(s.calls, 3);
  output_liner_flush(l);
  ck_assert_uint_eq(s.calls, 4);
  ck_assert_str_eq(s.data, "P:hello\nP:\nP:world\r\nP:last\n");
  output_liner_free(l);
  free(s.data);
}
END_TEST

START_TEST(test_liner_cap_split)
{
  struct sink s;
  struct output_liner *l;

  sink_init(&s, "P:");
  l = output_liner_new("P:", 4, sink_fn, &s);
  ck_assert_ptr_nonnull(l);
  feed_str(l, "abcdefghij\n");
  ck_assert_str_eq(s.data, "P:abcd\nP:efgh\nP:ij\n");
  ck_assert_uint_eq(s.calls, 3);
  ck_assert_uint_eq(s.max_call, 2 + 4 + 1);

  /* A line of exactly cap bytes (or a multiple) gives no empty extra. */
  s.len = 0;
  s.calls = 0;
  feed_str(l, "abcd\nefghijkl\n");
  s.data[s.len] = '\0';
  ck_assert_str_eq(s.data, "P:abcd\nP:efgh\nP:ijkl\n");
  ck_assert_uint_eq(s.calls, 3);

  /* Split across chunks, and an unterminated tail of exactly cap. */
  s.len = 0;
  s.calls = 0;
  feed_str(l, "ab");
  feed_str(l, "cde");
  feed_str(l, "fgh");
  ck_assert_uint_eq(s.calls, 1);
  output_liner_flush(l);
  s.data[s.len] = '\0';
  ck_assert_str_eq(s.data, "P:abcd\nP:efgh\n");
  ck_assert_uint_eq(s.calls, 2);
  output_liner_free(l);
  free(s.data);
}
END_TEST

START_TEST(test_liner_default_cap)
{
  size_t n = 70000;
  char *line = malloc(n + 1);
  struct sink s;
  struct output_liner *l;

  ck_assert_ptr_nonnull(line);
  memset(line, 'x', n);
  line[n] = '\n';
  sink_init(&s, "");
  l = output_liner_new(NULL, 0, sink_fn, &s);
  ck_assert_ptr_nonnull(l);
  output_liner_feed(l, line, n + 1);
  ck_assert_uint_eq(s.calls, 2);
  ck_assert_uint_eq(s.max_call, 65536 + 1);
  ck_assert_uint_eq(s.len, n + 2);
  ck_assert_int_eq(s.data[65536], '\n');
  output_liner_free(l);
  free(s.data);
  free(line);
}
END_TEST

START_TEST(test_liner_flush)
{
  struct sink s;
  struct output_liner *l;

  sink_init(&s, "[a1]:");
  l = output_liner_new("[a1]:", 16, sink_fn, &s);
  ck_assert_ptr_nonnull(l);
  output_liner_flush(l);
  ck_assert_uint_eq(s.calls, 0);
  feed_str(l, "one\n");
  output_liner_flush(l);
  ck_assert_uint_eq(s.calls, 1);
  feed_str(l, "partial");
  ck_assert_uint_eq(s.calls, 1);
  output_liner_flush(l);
  ck_assert_uint_eq(s.calls, 2);
  output_liner_flush(l);
  ck_assert_uint_eq(s.calls, 2);
  /* The liner is reusable after a flush. */
  feed_str(l, "after\nmore");
  output_liner_flush(l);
  ck_assert_uint_eq(s.calls, 4);
  ck_assert_str_eq(s.data,
                   "[a1]:one\n[a1]:partial\n[a1]:after\n[a1]:more\n");
  output_liner_free(l);
  free(s.data);
}
END_TEST

START_TEST(test_liner_many_lines)
{
  size_t nlines = 200000;
  char *text = malloc(nlines * 2);
  struct sink s;
  struct output_liner *l;

  ck_assert_ptr_nonnull(text);
  for (size_t i = 0; i < nlines; i++) {
    text[2 * i] = (char)('a' + i % 26);
    text[2 * i + 1] = '\n';
  }
  sink_init(&s, "[x]:");
  l = output_liner_new("[x]:", 0, sink_fn, &s);
  ck_assert_ptr_nonnull(l);
  output_liner_feed(l, text, nlines * 2);
  ck_assert_uint_eq(s.calls, nlines);
  ck_assert_uint_eq(s.len, nlines * 6);
  ck_assert(memcmp(s.data + 6 * 27, "[x]:b\n", 6) == 0);
  output_liner_free(l);
  free(s.data);
  free(text);
}
END_TEST

/* Reference model: prefixes each line, splitting at cap, written
 * independently of the liner's buffer logic. */
static size_t expected_output(const char *text, size_t n, const char *prefix,
                              size_t cap, char *out)
{
  size_t plen = strlen(prefix), o = 0, col = 0;
  bool open = false;

  for (size_t i = 0; i < n; i++) {
    if (text[i] == '\n') {
      if (!open) {
        memcpy(out + o, prefix, plen);
        o += plen;
      }
      out[o++] = '\n';
      open = false;
      col = 0;
      continue;
    }
    if (open && col == cap) {
      out[o++] = '\n';
      open = false;
      col = 0;
    }
    if (!open) {
      memcpy(out + o, prefix, plen);
      o += plen;
      open = true;
    }
    out[o++] = text[i];
    col++;
  }
  if (open)
    out[o++] = '\n';
  return o;
}

START_TEST(test_liner_random_chunks)
{
  const char *prefix = "[trainer7]:";
  const size_t caps[] = { 1, 3, 17, 100, 0 };
  size_t n = 20000;
  char *text = malloc(n);
  char *want = malloc(n * 20);

  ck_assert_ptr_nonnull(text);
  ck_assert_ptr_nonnull(want);
  srand(12345);
  for (size_t ci = 0; ci < sizeof(caps) / sizeof(caps[0]); ci++) {
    size_t cap = caps[ci] ? caps[ci] : 65536;
    struct sink s;
    struct output_liner *l;
    size_t wlen, pos = 0;

    /* Lines of varied length, empty ones and CRs included. */
    for (size_t i = 0; i < n; i++) {
      int r = rand() % 100;

      text[i] = r < 8 ? '\n' : r < 10 ? '\r' : (char)('!' + r % 90);
    }
    for (size_t i = 0; i + 1 < n && i < 40; i++)
      text[i] = '\n';
    wlen = expected_output(text, n, prefix, cap, want);
    sink_init(&s, prefix);
    l = output_liner_new(prefix, caps[ci], sink_fn, &s);
    ck_assert_ptr_nonnull(l);
    while (pos < n) {
      size_t chunk = (size_t)(rand() % 300);

      if (rand() % 4 == 0)
        chunk = (size_t)(rand() % 3);
      if (chunk > n - pos)
        chunk = n - pos;
      output_liner_feed(l, text + pos, chunk);
      pos += chunk;
    }
    output_liner_flush(l);
    ck_assert_uint_eq(s.len, wlen);
    ck_assert(memcmp(s.data, want, wlen) == 0);
    ck_assert_uint_le(s.max_call, strlen(prefix) + cap + 1);
    output_liner_free(l);
    free(s.data);
  }
  free(text);
  free(want);
}
END_TEST

static Suite *output_suite(void)
{
  Suite *s = suite_create("output");
  TCase *tc = tcase_create("prefix");

  tcase_add_test(tc, test_prefix_default);
  tcase_add_test(tc, test_prefix_template);
  tcase_add_test(tc, test_prefix_hostname);
  tcase_add_test(tc, test_prefix_unknown_and_dollars);
  tcase_add_test(tc, test_prefix_truncation);
  suite_add_tcase(s, tc);

  tc = tcase_create("liner");
  tcase_add_test(tc, test_liner_multiline_chunk);
  tcase_add_test(tc, test_liner_byte_at_a_time);
  tcase_add_test(tc, test_liner_cap_split);
  tcase_add_test(tc, test_liner_default_cap);
  tcase_add_test(tc, test_liner_flush);
  tcase_add_test(tc, test_liner_many_lines);
  tcase_add_test(tc, test_liner_random_chunks);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(output_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
