/* peer_text.c -- see peer_text.h. */
#include "peer_text.h"

#include <stdbool.h>
#include <string.h>

/* Where escaped text goes: a bounded buffer or a stream. */
struct sink {
  FILE *f;                      /* non-NULL: write here */
  char *dst;
  size_t cap, len;              /* cap counts the NUL */
  bool full;
};

/* Writes p[0..n) whole; when it does not fit, as much as does if
 * divisible (text that passes, cut between characters), else nothing
 * (an escape).  Then the sink is full. */
static void put(struct sink *o, const char *p, size_t n, bool divisible)
{
  if (o->full)
    return;
  if (o->f) {
    fwrite(p, 1, n, o->f);
    return;
  }
  if (o->len + n >= o->cap) {
    o->full = true;
    if (!divisible)
      return;
    n = o->cap - 1 - o->len;
    while (n > 0 && ((unsigned char)p[n] & 0xc0) == 0x80)
      n--;                      /* not inside a UTF-8 sequence */
  }
  memcpy(o->dst + o->len, p, n);
  o->len += n;
}

/* The length of the well-formed UTF-8 sequence at s (n bytes left) that
 * encodes a printable code point (U+00A0 and up), or 0.  Overlong forms,
 * surrogates, code points past U+10FFFF and the C1 controls (U+0080 to
 * U+009F, which some terminals obey) are 0. */
static size_t utf8_printable(const unsigned char *s, size_t n)
{
  unsigned char lo = 0x80, hi = 0xbf;
  size_t len, i;

  if (s[0] == 0xc2)
    return n >= 2 && s[1] >= 0xa0 && s[1] <= 0xbf ? 2 : 0;
  if (s[0] > 0xc2 && s[0] <= 0xdf)
    len = 2;
  else if (s[0] >= 0xe0 && s[0] <= 0xef)
    len = 3;
  else if (s[0] >= 0xf0 && s[0] <= 0xf4)
    len = 4;
  else
    return 0;
  if (s[0] == 0xe0)
    lo = 0xa0;                  /* overlong below U+0800 */
  else if (s[0] == 0xed)
    hi = 0x9f;                  /* surrogates */
  else if (s[0] == 0xf0)
    lo = 0x90;                  /* overlong below U+10000 */
  else if (s[0] == 0xf4)
    hi = 0x8f;                  /* past U+10FFFF */
  if (n < len || s[1] < lo || s[1] > hi)
    return 0;
  for (i = 2; i < len; i++)
    if (s[i] < 0x80 || s[i] > 0xbf)
      return 0;
  return len;
}

/* Escapes s[0..n) into o; json: JSON text (\u00XX, nothing else
 * touched). */
static void escape(struct sink *o, const unsigned char *s, size_t n,
                   unsigned flags, bool json)
{
  static const char hex[] = "0123456789abcdef";
  size_t i = 0, run, k;
  char e[8];

  while (i < n && !o->full) {
    /* The longest stretch that passes as it is, in one put. */
    for (run = i; run < n; run += k) {
      unsigned char c = s[run];

      k = 1;
      if (c >= 0x80) {
        k = utf8_printable(s + run, n - run);
        if (!k)
          break;
      } else if (c < 0x20 || c == 0x7f) {
        if (!(flags & PEER_TEXT_LINES) || (c != '\n' && c != '\t'))
          break;
      } else if (c == '\\' && !json && !(flags & PEER_TEXT_LINES)) {
        break;
      }
    }
    put(o, (const char *)s + i, run - i, true);
    if (run == n)
      return;
    i = run;
    if (json) {
      memcpy(e, "\\u00", 4);
      e[4] = hex[s[i] >> 4];
      e[5] = hex[s[i] & 15];
      put(o, e, 6, false);
    } else if (s[i] == '\n' || s[i] == '\r' || s[i] == '\t' ||
               s[i] == '\\') {
      e[0] = '\\';
      e[1] = s[i] == '\n' ? 'n' : s[i] == '\r' ? 'r'
           : s[i] == '\t' ? 't' : '\\';
      put(o, e, 2, false);
    } else {
      e[0] = '\\';
      e[1] = 'x';
      e[2] = hex[s[i] >> 4];
      e[3] = hex[s[i] & 15];
      put(o, e, 4, false);
    }
    i++;
  }
}

size_t peer_text_escape(char *dst, size_t dstlen, const char *src,
                        size_t srclen, unsigned flags)
{
  struct sink o = { .dst = dst, .cap = dstlen };

  if (dstlen == 0)
    return 0;
  escape(&o, (const unsigned char *)src, srclen, flags, false);
  dst[o.len] = '\0';
  return o.len;
}

void peer_text_fwrite(const char *s, size_t len, unsigned flags, FILE *f)
{
  struct sink o = { .f = f };

  escape(&o, (const unsigned char *)s, len, flags, false);
}

void peer_text_fputs(const char *s, unsigned flags, FILE *f)
{
  peer_text_fwrite(s, strlen(s), flags, f);
}

void peer_text_fputs_json(const char *s, FILE *f)
{
  struct sink o = { .f = f };

  escape(&o, (const unsigned char *)s, strlen(s), 0, true);
}
