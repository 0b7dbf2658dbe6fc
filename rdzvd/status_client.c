/* status_client.c -- a small blocking client for the STATUS request. */
#include "status_client.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "endpoint.h"
#include "err.h"
#include "peer_text.h"
#include "rdzv_proto.h"

#define STATUS_TIMEOUT_MS 5000

static int connect_to(const char *host, int port, char *err, size_t errlen)
{
  struct addrinfo hints, *res, *ai;
  char portstr[16];
  int fd = -1, rc;

  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  snprintf(portstr, sizeof portstr, "%d", port);
  rc = getaddrinfo(host, portstr, &hints, &res);
  if (rc) {
    return err_set(err, errlen, -1,
                   "cannot resolve '%s': %s", host, gai_strerror(rc));
  }
  for (ai = res; ai; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
    if (fd < 0)
      continue;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
      break;
    snprintf(err, errlen, "cannot connect to %s:%d: %s", host, port,
             strerror(errno));
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  return fd;
}

/* Reads one whole frame into a heap buffer; returns its length or -1. */
static ssize_t read_frame(int fd, char **out, char *err, size_t errlen)
{
  size_t len = 0, cap = 4096, flen;
  char *buf = malloc(cap), *grown;
  struct pollfd p = { fd, POLLIN, 0 };
  ssize_t n;
  int rc;

  while (buf) {
    rc = rdzv_proto_frame_peek(buf, len, &flen);
    if (rc == 1) {
      *out = buf;
      return (ssize_t)flen;
    }
    if (rc < 0) {
      snprintf(err, errlen, "bad frame from the server");
      break;
    }
    if (poll(&p, 1, STATUS_TIMEOUT_MS) <= 0) {
      snprintf(err, errlen, "no answer within %d s", STATUS_TIMEOUT_MS / 1000);
      break;
    }
    if (len == cap) {
      grown = realloc(buf, cap * 2);
      if (!grown)
        break;
      buf = grown;
      cap *= 2;
    }
    n = read(fd, buf + len, cap - len);
    if (n <= 0) {
      snprintf(err, errlen, "the server closed the connection");
      break;
    }
    len += (size_t)n;
  }
  free(buf);
  return -1;
}

static const char *jstr(const cJSON *o, const char *k)
{
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

  return cJSON_IsString(v) ? v->valuestring : "?";
}

static double jnum(const cJSON *o, const char *k)
{
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* Note [status text]: the report holds what peers sent (job ids, host
 * names) and comes from a daemon that may not be ours: every string in
 * it is escaped (peer_text.h) before the table shows it, and the JSON is
 * printed as cJSON prints it (control bytes as \u escapes) through
 * peer_text_fputs_json, so neither can reach the terminal raw. */
static bool escape_strings(cJSON *o, char *buf, size_t len)
{
  cJSON *v;

  cJSON_ArrayForEach(v, o) {
    if (cJSON_IsString(v) && v->valuestring) {
      peer_text_escape(buf, len, v->valuestring,
                       strlen(v->valuestring), 0);
      if (strcmp(buf, v->valuestring) != 0 &&
          !cJSON_SetValuestring(v, buf))
        return false;
    } else if ((cJSON_IsObject(v) || cJSON_IsArray(v)) &&
               !escape_strings(v, buf, len)) {
      return false;
    }
  }
  return true;
}

static void print_table(const cJSON *st)
{
  const cJSON *jobs = cJSON_GetObjectItemCaseSensitive(st, "jobs"), *j, *n;
  const cJSON *sv = cJSON_GetObjectItemCaseSensitive(st, "server");
  int total = (int)jnum(st, "jobs_total");

  printf("%d job(s), %d node(s)\n", total >= 0 ? total
         : cJSON_GetArraySize(jobs), (int)jnum(st, "nodes"));
  if (cJSON_IsObject(sv))
    printf("server: %d connection(s) of %d; input %.0f of %.0f bytes "
           "(%d paused); output %.0f of %.0f bytes\n",
           (int)jnum(sv, "connections"), (int)jnum(sv, "max_conns"),
           jnum(sv, "input_bytes"), jnum(sv, "input_budget"),
           (int)jnum(sv, "reading_paused"), jnum(sv, "output_bytes"),
           jnum(sv, "output_budget"));
  cJSON_ArrayForEach(j, jobs) {
    const cJSON *conf = cJSON_GetObjectItemCaseSensitive(j, "conf");

    printf("job %s: %s, round %d, restarts %d/%d, nodes %d..%d, world "
           "size %d\n", jstr(j, "id"), jstr(j, "phase"),
           (int)jnum(j, "round"), (int)jnum(j, "restart_count"),
           (int)jnum(conf, "max_restarts"), (int)jnum(conf, "min_nodes"),
           (int)jnum(conf, "max_nodes"), (int)jnum(j, "world_size"));
    cJSON_ArrayForEach(n, cJSON_GetObjectItemCaseSensitive(j, "nodes")) {
      printf("  rank %-5d %-12s %-24s %-16s pid %-8d nproc %d\n",
             (int)jnum(n, "rank"), jstr(n, "state"), jstr(n, "host"),
             jstr(n, "addr"), (int)jnum(n, "pid"), (int)jnum(n, "nproc"));
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "nodes_omitted")))
      printf("  (%d nodes: --job %s lists them)\n",
             (int)jnum(j, "node_count"), jstr(j, "id"));
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "nodes_truncated")))
      printf("  (the first %d of %d nodes: no more fit one answer)\n",
             cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "nodes")),
             (int)jnum(j, "node_count"));
  }
  if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(st, "truncated")))
    printf("(showing %d of %d jobs: --limit N shows more, --job ID one)\n",
           (int)jnum(st, "jobs_shown"), total);
}

int status_query(const char *endpoint, bool json, const char *job,
                 int limit, const struct rdzv_auth_secret *secret)
{
  struct rdzv_proto_msg m;
  char host[RDZV_PROTO_MAX_ADDR + 1], err[256] = "";
  char *frame = NULL, *req = NULL, *text;
  char esc[4 * RDZV_PROTO_MAX_TEXT + 1];    /* a peer's text, escaped */
  size_t reqlen;
  ssize_t flen;
  cJSON *st;
  int fd, port, rc = 1;

  if (endpoint_parse(endpoint, 29400, host, sizeof host, &port)) {
    fprintf(stderr, "rdzvd: error: --status: invalid endpoint '%s' "
            "(expected host[:port] or [ipv6]:port)\n", endpoint);
    return 2;
  }
  fd = connect_to(host, port, err, sizeof err);
  if (fd < 0) {
    fprintf(stderr, "rdzvd: %s\n", err);
    return 1;
  }
  if (secret && secret->len &&
      rdzv_auth_handshake_fd(fd, secret, STATUS_TIMEOUT_MS, err, sizeof err) !=
          0) {
    fprintf(stderr, "rdzvd: %s:%d: %s\n", host, port, err);
    goto out;
  }
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_STATUS;
  snprintf(m.u.status.job, sizeof m.u.status.job, "%s", job ? job : "");
  m.u.status.limit = limit;
  if (rdzv_proto_encode(&m, &req, &reqlen) != 0 ||
      write(fd, req, reqlen) != (ssize_t)reqlen) {
    fprintf(stderr, "rdzvd: cannot send the status request\n");
    goto out;
  }
  flen = read_frame(fd, &frame, err, sizeof err);
  if (flen < 0) {
    fprintf(stderr, "rdzvd: %s:%d: %s\n", host, port, err);
    goto out;
  }
  if (rdzv_proto_decode(frame + RDZV_PROTO_FRAME_HEADER,
                        (size_t)flen - RDZV_PROTO_FRAME_HEADER, &m, err,
                        sizeof err) == 0 &&
      m.op == RDZV_PROTO_ERROR) {
    peer_text_escape(esc, sizeof esc, m.u.text.message,
                     strlen(m.u.text.message), 0);
    if (m.u.text.code == RDZV_PROTO_ERR_AUTH)
      fprintf(stderr, "rdzvd: %s:%d: " RDZV_AUTH_REFUSED ": the server says: %s"
              "%s\n", host, port, esc,
              secret && secret->len ? "" : " (give --secret-file)");
    else
      fprintf(stderr, "rdzvd: %s:%d refused: %s (%s)\n", host, port,
              esc, rdzv_proto_error_name(m.u.text.code));
    rdzv_proto_msg_free(&m);
    goto out;
  }
  if (err[0] || m.op != RDZV_PROTO_STATUS_REPLY) {
    fprintf(stderr, "rdzvd: unexpected answer from %s:%d: %s\n", host,
            port, err[0] ? err : rdzv_proto_op_name(m.op));
    if (err[0] == '\0')
      rdzv_proto_msg_free(&m);
    goto out;
  }
  /* Note [status text]. */
  st = cJSON_Parse(m.u.status_json);
  if (st && json && (text = cJSON_PrintUnformatted(st))) {
    peer_text_fputs_json(text, stdout);
    putchar('\n');
    cJSON_free(text);
  } else if (st && !json && escape_strings(st, esc, sizeof esc)) {
    print_table(st);
  } else {
    peer_text_fputs(m.u.status_json, 0, stdout);
    putchar('\n');
  }
  cJSON_Delete(st);
  rdzv_proto_msg_free(&m);
  rc = 0;
out:
  free(req);
  free(frame);
  close(fd);
  return rc;
}
