/*
 * An AMQP 0-9-1 bench worker on librabbitmq (rabbitmq-c), for bench/amqp091_bench.py.
 *
 *   amqp091_bench_client send HOST PORT QUEUE COUNT SIZE CONFIRMS WINDOW TIMEOUT
 *   amqp091_bench_client recv HOST PORT QUEUE COUNT PREFETCH NOACK ACK_EVERY TIMEOUT
 *
 * The line protocol of amqp10/cli/bench's workers: on stdout "ready", "n <count>",
 * "done <json>" or "error <text>"; the producer waits for "go" on stdin. The body is
 * theirs too: the send time (CLOCK_MONOTONIC ns) and the sequence number, both
 * big-endian, then zero padding.
 *
 * send: declares QUEUE and publishes COUNT messages of SIZE bytes to it through the
 *   default exchange. With CONFIRMS=1 the channel is in confirm mode and at most
 *   WINDOW publishes are unconfirmed at a time; only confirmed messages count.
 * recv: declares QUEUE, sets basic.qos PREFETCH and consumes. NOACK=1 consumes with
 *   no-ack; otherwise it acknowledges every ACK_EVERY-th delivery with multiple=true
 *   (ACK_EVERY=1: one basic.ack per message), and the last one.
 *
 * Both give up after TIMEOUT seconds. The project's own code, written against
 * librabbitmq's public headers (amqp.h, amqp_tcp_socket.h).
 */
#define _POSIX_C_SOURCE 200809L

#include <amqp.h>
#include <amqp_tcp_socket.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#define STAMP_SIZE 16
#define REPORT_EVERY_NS 100000000ULL

static uint64_t now_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static double cpu_s(void) { return (double)now_ns(CLOCK_PROCESS_CPUTIME_ID) / 1e9; }

static void put_be64(unsigned char *p, uint64_t v) {
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xff);
        v >>= 8;
    }
}

static uint64_t get_be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return v;
}

static void say(const char *line) {
    fputs(line, stdout);
    fputc('\n', stdout);
    fflush(stdout);
}

static void fail(const char *what, const char *why) {
    printf("error %s: %s\n", what, why);
    fflush(stdout);
    exit(1);
}

/* The outcome of the last synchronous method (login, declare, ...): fail on anything
 * but a normal reply. */
static void check_reply(amqp_rpc_reply_t r, const char *what) {
    char text[300];
    switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL:
        return;
    case AMQP_RESPONSE_NONE:
        fail(what, "no reply");
        break;
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
        fail(what, amqp_error_string2(r.library_error));
        break;
    case AMQP_RESPONSE_SERVER_EXCEPTION:
        if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD || r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
            amqp_bytes_t t = r.reply.id == AMQP_CONNECTION_CLOSE_METHOD
                                 ? ((amqp_connection_close_t *)r.reply.decoded)->reply_text
                                 : ((amqp_channel_close_t *)r.reply.decoded)->reply_text;
            snprintf(text, sizeof text, "closed by the broker: %.*s", (int)t.len, (char *)t.bytes);
            fail(what, text);
        }
        snprintf(text, sizeof text, "unexpected method 0x%08x", r.reply.id);
        fail(what, text);
        break;
    }
}

/* 1: the queue is declared durable and messages are published persistent (delivery-mode 2) */
static int persistent = 0;

static amqp_connection_state_t open_channel(const char *host, int port, const char *queue) {
    amqp_connection_state_t conn = amqp_new_connection();
    amqp_socket_t *sock = amqp_tcp_socket_new(conn);
    if (sock == NULL) fail("socket", "cannot create");
    int rc = amqp_socket_open(sock, host, port);
    if (rc != AMQP_STATUS_OK) fail("connect", amqp_error_string2(rc));
    check_reply(amqp_login(conn, "/", 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, "guest", "guest"),
                "login");
    amqp_channel_open(conn, 1);
    check_reply(amqp_get_rpc_reply(conn), "channel.open");
    amqp_queue_declare(conn, 1, amqp_cstring_bytes(queue), 0, persistent, 0, 0, amqp_empty_table);
    check_reply(amqp_get_rpc_reply(conn), "queue.declare");
    return conn;
}

static void close_all(amqp_connection_state_t conn) {
    amqp_channel_close(conn, 1, AMQP_REPLY_SUCCESS);
    amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(conn);
}

/* Read one frame (waiting at most *tv; NULL: block) and apply it to the unconfirmed
 * window. Returns the number of publishes it confirmed, -1 on timeout. */
static long read_confirm(amqp_connection_state_t conn, const struct timeval *tv, uint64_t *acked) {
    amqp_frame_t f;
    int rc = tv == NULL ? amqp_simple_wait_frame(conn, &f)
                        : amqp_simple_wait_frame_noblock(conn, &f, tv);
    if (rc == AMQP_STATUS_TIMEOUT) return -1;
    if (rc != AMQP_STATUS_OK) fail("reading confirms", amqp_error_string2(rc));
    if (f.frame_type != AMQP_FRAME_METHOD) return 0;
    if (f.payload.method.id == AMQP_BASIC_ACK_METHOD) {
        amqp_basic_ack_t *a = (amqp_basic_ack_t *)f.payload.method.decoded;
        uint64_t before = *acked;
        if (a->multiple) {
            if (a->delivery_tag > *acked) *acked = a->delivery_tag;
        } else {
            /* the broker acks in order here (one queue, no store): count it */
            *acked += 1;
        }
        return (long)(*acked - before);
    }
    if (f.payload.method.id == AMQP_BASIC_NACK_METHOD) fail("publish", "nacked by the broker");
    if (f.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD) {
        amqp_channel_close_t *c = (amqp_channel_close_t *)f.payload.method.decoded;
        char text[300];
        snprintf(text, sizeof text, "%.*s", (int)c->reply_text.len, (char *)c->reply_text.bytes);
        fail("channel closed", text);
    }
    return 0;
}

static int run_send(const char *host, int port, const char *queue, uint64_t count, size_t size,
                    int confirms, uint64_t window, double timeout) {
    amqp_connection_state_t conn = open_channel(host, port, queue);
    if (confirms) {
        amqp_confirm_select(conn, 1);
        check_reply(amqp_get_rpc_reply(conn), "confirm.select");
    }
    unsigned char *body = calloc(1, size);
    if (body == NULL) fail("memory", "calloc");
    amqp_bytes_t bytes = {size, body};
    amqp_bytes_t key = amqp_cstring_bytes(queue);
    amqp_basic_properties_t props;
    memset(&props, 0, sizeof props);
    if (persistent) {
        props._flags = AMQP_BASIC_DELIVERY_MODE_FLAG;
        props.delivery_mode = 2;
    }

    say("ready");
    char line[64];
    for (;;) {
        if (fgets(line, sizeof line, stdin) == NULL) {
            close_all(conn);
            return 0;
        }
        if (strncmp(line, "go", 2) == 0) break;
    }
    double cpu0 = cpu_s();
    uint64_t first = now_ns(CLOCK_MONOTONIC);
    uint64_t deadline = first + (uint64_t)(timeout * 1e9);
    uint64_t last_report = 0, sent = 0, acked = 0;
    struct timeval zero = {0, 0};
    while ((confirms ? acked : sent) < count) {
        uint64_t now = now_ns(CLOCK_MONOTONIC);
        if (now > deadline) fail("timed out", "publishing");
        if (now - last_report > REPORT_EVERY_NS) {
            last_report = now;
            printf("n %llu\n", (unsigned long long)(confirms ? acked : sent));
            fflush(stdout);
        }
        if (sent < count && (!confirms || sent - acked < window)) {
            put_be64(body, now);
            put_be64(body + 8, sent);
            int rc = amqp_basic_publish(conn, 1, amqp_empty_bytes, key, 0, 0, &props, bytes);
            if (rc != AMQP_STATUS_OK) fail("publish", amqp_error_string2(rc));
            sent++;
            /* take the acks already here, without waiting */
            while (confirms && (amqp_data_in_buffer(conn) || amqp_frames_enqueued(conn)))
                read_confirm(conn, &zero, &acked);
            continue;
        }
        /* window full (or all sent): wait for an ack, then take what else is here */
        struct timeval second = {1, 0};
        if (read_confirm(conn, &second, &acked) >= 0) {
            while (read_confirm(conn, &zero, &acked) >= 0) {
            }
        }
        amqp_maybe_release_buffers(conn);
    }
    uint64_t last = now_ns(CLOCK_MONOTONIC);
    printf("done {\"count\": %llu, \"first_ns\": %llu, \"last_ns\": %llu, \"cpu_s\": %.6f}\n",
           (unsigned long long)(confirms ? acked : sent), (unsigned long long)first,
           (unsigned long long)last, cpu_s() - cpu0);
    fflush(stdout);
    free(body);
    close_all(conn);
    return 0;
}

static int run_recv(const char *host, int port, const char *queue, uint64_t count,
                    unsigned prefetch, int no_ack, uint64_t ack_every, double timeout) {
    amqp_connection_state_t conn = open_channel(host, port, queue);
    amqp_basic_qos(conn, 1, 0, (uint16_t)prefetch, 0);
    check_reply(amqp_get_rpc_reply(conn), "basic.qos");
    amqp_basic_consume(conn, 1, amqp_cstring_bytes(queue), amqp_empty_bytes, 0, no_ack ? 1 : 0,
                       0, amqp_empty_table);
    check_reply(amqp_get_rpc_reply(conn), "basic.consume");
    uint32_t *lat = malloc(sizeof(uint32_t) * (count ? count : 1));
    if (lat == NULL) fail("memory", "malloc");
    double cpu0 = cpu_s();
    say("ready");
    uint64_t received = 0, first = 0, last = 0, last_report = 0;
    uint64_t deadline = now_ns(CLOCK_MONOTONIC) + (uint64_t)(timeout * 1e9);
    while (received < count) {
        amqp_envelope_t env;
        struct timeval second = {1, 0};
        amqp_maybe_release_buffers(conn);
        amqp_rpc_reply_t r = amqp_consume_message(conn, &env, &second, 0);
        uint64_t now = now_ns(CLOCK_MONOTONIC);
        if (now > deadline) fail("timed out", "consuming");
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
            r.library_error == AMQP_STATUS_TIMEOUT)
            continue;
        check_reply(r, "consume");
        if (env.message.body.len >= STAMP_SIZE) {
            uint64_t stamp = get_be64((const unsigned char *)env.message.body.bytes);
            lat[received] = (uint32_t)((now - stamp) / 1000);
        } else {
            lat[received] = 0;
        }
        if (received == 0) first = now;
        last = now;
        received++;
        if (!no_ack && (received % ack_every == 0 || received == count)) {
            int rc = amqp_basic_ack(conn, 1, env.delivery_tag, ack_every > 1);
            if (rc != AMQP_STATUS_OK) fail("ack", amqp_error_string2(rc));
        }
        amqp_destroy_envelope(&env);
        if (now - last_report > REPORT_EVERY_NS) {
            last_report = now;
            printf("n %llu\n", (unsigned long long)received);
            fflush(stdout);
        }
    }
    printf("done {\"count\": %llu, \"first_ns\": %llu, \"last_ns\": %llu, \"cpu_s\": %.6f, "
           "\"lat_us\": [",
           (unsigned long long)received, (unsigned long long)first, (unsigned long long)last,
           cpu_s() - cpu0);
    for (uint64_t i = 0; i < received; i++) printf(i ? ",%u" : "%u", lat[i]);
    printf("]}\n");
    fflush(stdout);
    free(lat);
    close_all(conn);
    return 0;
}

static void usage(void) {
    fputs("usage: amqp091_bench_client send HOST PORT QUEUE COUNT SIZE CONFIRMS WINDOW TIMEOUT "
          "PERSISTENT\n"
          "       amqp091_bench_client recv HOST PORT QUEUE COUNT PREFETCH NOACK ACK_EVERY "
          "TIMEOUT PERSISTENT\n",
          stderr);
    exit(2);
}

int main(int argc, char **argv) {
    if (argc != 11) usage();
    persistent = atoi(argv[10]) != 0;
    const char *host = argv[2], *queue = argv[4];
    int port = atoi(argv[3]);
    uint64_t count = strtoull(argv[5], NULL, 10);
    double timeout = atof(argv[9]);
    if (strcmp(argv[1], "send") == 0) {
        size_t size = (size_t)strtoul(argv[6], NULL, 10);
        uint64_t window = strtoull(argv[8], NULL, 10);
        if (size < STAMP_SIZE || window < 1) usage();
        return run_send(host, port, queue, count, size, atoi(argv[7]), window, timeout);
    }
    if (strcmp(argv[1], "recv") == 0) {
        uint64_t ack_every = strtoull(argv[8], NULL, 10);
        if (ack_every < 1) usage();
        return run_recv(host, port, queue, count, (unsigned)atoi(argv[6]), atoi(argv[7]),
                        ack_every, timeout);
    }
    usage();
    return 2;
}
