/* rdzv_proto_frames.h -- the one frame-reading loop: every whole frame at the
 * start of a stream's bytes, decoded and handed to a callback.  rdzvd's
 * server and cdrun's rdzvd client both read through it; each keeps its
 * own buffering (the server reads most frames in place, in a buffer
 * shared by every connection). */
#ifndef RDZV_PROTO_FRAMES_H
#define RDZV_PROTO_FRAMES_H

#include <stddef.h>
#include <sys/types.h>

#include "rdzv_proto.h"

/* Called for each decoded message, which is freed when it returns.
 * Returns 0 to go on, non-zero to stop reading (the stream is going
 * away, or must not be read further now). */
typedef int (*rdzv_proto_frames_cb)(void *ctx, struct rdzv_proto_msg *m);

/* Reads the whole frames at the start of data[0..len) and hands each to cb.
 * max_body bounds a frame's body (0: RDZV_PROTO_MAX_FRAME); it is checked as
 * soon as a frame's header is in, before its body arrives.  Returns the
 * bytes used (the rest is a partial frame, or follows a stop), or a negative
 * errno for a bad frame (-EMSGSIZE, -EBADMSG, or the decoder's error) with a
 * one-line reason in err. */
ssize_t rdzv_proto_frames_read(const char *data, size_t len, size_t max_body,
                               rdzv_proto_frames_cb cb, void *ctx, char *err,
                               size_t errlen);

#endif
