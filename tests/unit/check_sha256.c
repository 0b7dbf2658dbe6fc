/* check_sha256.c -- unit tests for proto/util/sha256.h: the FIPS 180-4
 * and RFC 4231 vectors, and agreement with OpenSSL's libcrypto (which
 * cdrun and rdzvd no longer link) over every key and message length
 * around the block boundaries. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "sha256.h"

static void hex(const uint8_t *b, size_t n, char *out)
{
  for (size_t i = 0; i < n; i++)
    sprintf(out + 2 * i, "%02x", b[i]);
}

static void digest_is(const void *msg, size_t n, const char *want)
{
  struct sha256 s;
  uint8_t d[SHA256_BYTES];
  char text[2 * SHA256_BYTES + 1];

  sha256_init(&s);
  sha256_update(&s, msg, n);
  sha256_final(&s, d);
  hex(d, sizeof d, text);
  ck_assert_str_eq(text, want);
}

START_TEST(test_fips_vectors)
{
  static char million[1000000];

  digest_is("", 0,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  digest_is("abc", 3,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  digest_is("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56,
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  memset(million, 'a', sizeof million);
  digest_is(million, sizeof million,
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}
END_TEST

static void hmac_is(const void *key, size_t kn, const void *msg, size_t mn,
                    const char *want)
{
  uint8_t d[SHA256_BYTES];
  char text[2 * SHA256_BYTES + 1];

  sha256_hmac(key, kn, msg, mn, d);
  hex(d, sizeof d, text);
  ck_assert_str_eq(text, want);
}

/* RFC 4231's test cases 1, 2, 3, 4, 6 and 7 (5 truncates the tag). */
START_TEST(test_rfc4231_vectors)
{
  uint8_t k20[20], k25[25], k131[131], m50[50];

  memset(k20, 0x0b, sizeof k20);
  hmac_is(k20, 20, "Hi There", 8,
          "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  hmac_is("Jefe", 4, "what do ya want for nothing?", 28,
          "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  memset(k20, 0xaa, sizeof k20);
  memset(m50, 0xdd, sizeof m50);
  hmac_is(k20, 20, m50, 50,
          "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  for (int i = 0; i < 25; i++)
    k25[i] = (uint8_t)(i + 1);
  memset(m50, 0xcd, sizeof m50);
  hmac_is(k25, 25, m50, 50,
          "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  memset(k131, 0xaa, sizeof k131);
  hmac_is(k131, 131,
          "Test Using Larger Than Block-Size Key - Hash Key First", 54,
          "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  hmac_is(k131, 131,
          "This is a test using a larger than block-size key and a larger "
          "than block-size data. The key needs to be hashed before being "
          "used by the HMAC algorithm.", 152,
          "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}
END_TEST

/* Every key length 0..130 and message length 0..200 (both block
 * boundaries and the padding's 55/56/64 edges), against libcrypto. */
START_TEST(test_agrees_with_openssl)
{
  uint8_t key[131], msg[201], ours[SHA256_BYTES], theirs[EVP_MAX_MD_SIZE];
  unsigned int n;

  for (size_t i = 0; i < sizeof key; i++)
    key[i] = (uint8_t)(i * 7 + 3);
  for (size_t i = 0; i < sizeof msg; i++)
    msg[i] = (uint8_t)(i * 13 + 1);
  for (size_t kn = 0; kn <= 130; kn += (kn < 70 ? 1 : 15))
    for (size_t mn = 0; mn <= 200; mn++) {
      sha256_hmac(key, kn, msg, mn, ours);
      ck_assert_ptr_nonnull(HMAC(EVP_sha256(), key, (int)kn, msg, mn,
                                 theirs, &n));
      ck_assert_uint_eq(n, SHA256_BYTES);
      ck_assert_msg(memcmp(ours, theirs, SHA256_BYTES) == 0,
                    "HMAC differs at key %zu, message %zu bytes", kn, mn);
    }
}
END_TEST

/* The same with the portable code, on a CPU that has the SHA extensions
 * (each test runs in a process of its own: the choice is made there). */
START_TEST(test_portable_agrees)
{
  setenv("CDRUN_SHA256_PORTABLE", "1", 1);
  test_fips_vectors_fn(_i);
  test_rfc4231_vectors_fn(_i);
  test_agrees_with_openssl_fn(_i);
}
END_TEST

START_TEST(test_equal_ct)
{
  uint8_t a[32] = { 0 }, b[32] = { 0 };

  ck_assert(sha256_equal_ct(a, b, sizeof a));
  b[31] = 1;
  ck_assert(!sha256_equal_ct(a, b, sizeof a));
  ck_assert(sha256_equal_ct(a, b, 31));
  b[0] = 0x80;
  ck_assert(!sha256_equal_ct(a, b, 1));
}
END_TEST

int main(void)
{
  Suite *s = suite_create("sha256");
  TCase *tc = tcase_create("sha256");
  SRunner *sr;
  int failed;

  tcase_add_test(tc, test_fips_vectors);
  tcase_add_test(tc, test_rfc4231_vectors);
  tcase_add_test(tc, test_agrees_with_openssl);
  tcase_add_test(tc, test_portable_agrees);
  tcase_add_test(tc, test_equal_ct);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
