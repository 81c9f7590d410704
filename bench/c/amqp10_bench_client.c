/*
 * amqp10_bench_client.c - a bench worker for amqp10's benchmark harness
 * (amqp10/cli/bench, bench/compare.py), written on Qpid Proton's C proactor API.
 *
 *   amqp10_bench_client send HOST PORT ADDRESS COUNT SIZE PRESETTLED DURABLE CREDIT
 *   amqp10_bench_client recv HOST PORT ADDRESS COUNT CREDIT PRESETTLED
 *
 * It speaks the harness's line protocol. On stdout: "ready" once the peer has
 * attached the link, "n <count>" every 0.1 s, "done <json>" at the end, or
 * "error <text>" (exit status 1). On stdin: "go" (sender: start sending; EOF
 * before it means exit 0 without sending) and "stop" or EOF (receiver: stop).
 *
 * Each message body is one data section of SIZE bytes: the send time
 * (CLOCK_MONOTONIC, ns) and the sequence number, both big-endian uint64, then
 * zero padding. The receiver records each message's latency in microseconds.
 *
 * Threads: the main thread runs the proactor and does all AMQP and stdout work.
 * A second thread only reads stdin, sets flags and interrupts the proactor; the
 * main thread then wakes the connection so that it acts on them in a connection
 * event, where the connection's objects may be used.
 *
 * Build: cc -O2 -Wall -Wextra -o amqp10_bench_client amqp10_bench_client.c \
 *           -lqpid-proton -lpthread
 */

#include <proton/engine.h> /* connection, session, link, delivery, event, transport */
#include <proton/message.h>
#include <proton/proactor.h>
#include <proton/sasl.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STAMP_SIZE 16   /* send time + sequence number at the start of the body */
#define PROGRESS_MS 100 /* between "n <count>" lines, as amqp10/cli/bench's worker */

/* ------------------------------------------------------------------ state */

typedef struct {
    /* the command line */
    bool sender;
    const char *host, *port, *address;
    uint64_t count;
    size_t size;
    bool presettled, durable;
    uint64_t window;        /* receiver: credit window; sender: most unsettled at once */

    /* Proton objects */
    pn_proactor_t *proactor;
    pn_connection_t *conn;  /* NULL once its transport has closed (the proactor frees it) */
    pn_link_t *link;
    pn_message_t *msg;      /* reused for every message, both roles */

    char *buf;              /* encoded message (sender) or received bytes (receiver) */
    size_t buf_size;
    char *body;             /* sender: the body, SIZE bytes */

    /* progress */
    uint64_t sent;          /* sender: messages written to the link */
    uint64_t progress;      /* sender: messages accepted (or written, if presettled);
                               receiver: messages received */
    int64_t first_ns, last_ns;
    double cpu0;
    int64_t *lat_us;        /* receiver: one latency per message */
    size_t lat_len, lat_cap;

    bool ready, going, finished, quiet, failed, closing;
} bench_t;

/* What the stdin thread saw, and the proactor it may interrupt (NULL once freed). */
static atomic_bool saw_go, saw_stop, saw_eof;
static pthread_mutex_t proactor_lock = PTHREAD_MUTEX_INITIALIZER;
static pn_proactor_t *shared_proactor;

/* ------------------------------------------------------------------ helpers */

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void put_be64(char *p, uint64_t v) {
    for (int i = 7; i >= 0; i--, v >>= 8) p[i] = (char)(v & 0xff);
}

static uint64_t get_be64(const char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | (unsigned char)p[i];
    return v;
}

/* One protocol line on stdout (line breaks in the text become spaces), flushed. */
static void say(const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    for (char *c = line; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' ';
    puts(line);
    fflush(stdout);
}

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n);
    if (q == NULL) {
        say("error out of memory");
        exit(1);
    }
    return q;
}

/* Report a failure (once: "error <text>"), then drop the connection; the loop ends
   when it is gone. A receiver that has said "done" has nothing more to report. */
static void fail(bench_t *b, pn_condition_t *cond, const char *text) {
    if (b->failed || (!b->sender && b->finished)) return;
    b->failed = b->closing = true;
    if (cond != NULL && pn_condition_is_set(cond)) {
        const char *desc = pn_condition_get_description(cond);
        say("error %s: %s", pn_condition_get_name(cond), desc ? desc : text);
    } else {
        say("error %s", text);
    }
    pn_proactor_cancel_timeout(b->proactor);
    pn_proactor_disconnect(b->proactor, NULL);
}

/* Close the link and the connection politely; the loop ends once they are closed. */
static void close_all(bench_t *b) {
    b->closing = true;
    pn_proactor_cancel_timeout(b->proactor);
    if (b->conn != NULL) {
        pn_link_close(b->link);
        pn_connection_close(b->conn);
    }
}

/* ------------------------------------------------------------------ stdin thread */

static void poke_proactor(void) {
    pthread_mutex_lock(&proactor_lock);
    if (shared_proactor != NULL) pn_proactor_interrupt(shared_proactor);
    pthread_mutex_unlock(&proactor_lock);
}

static void *read_stdin(void *unused) {
    (void)unused;
    char line[256];
    while (fgets(line, sizeof line, stdin) != NULL) {
        line[strcspn(line, " \t\r\n")] = '\0';
        if (strcmp(line, "go") == 0)
            atomic_store(&saw_go, true);
        else if (strcmp(line, "stop") == 0)
            atomic_store(&saw_stop, true);
        else
            continue;
        poke_proactor();
    }
    atomic_store(&saw_eof, true);
    poke_proactor();
    return NULL;
}

/* ------------------------------------------------------------------ sender */

/* Encode message number `seq`, stamped now, into b->buf; return its length. */
static size_t encode_message(bench_t *b, uint64_t seq) {
    put_be64(b->body, (uint64_t)now_ns());
    put_be64(b->body + 8, seq);
    pn_data_t *body = pn_message_body(b->msg);
    pn_data_clear(body);
    pn_data_put_binary(body, pn_bytes(b->size, b->body));
    for (;;) {
        size_t len = b->buf_size;
        int rc = pn_message_encode(b->msg, b->buf, &len);
        if (rc == 0) return len;
        if (rc != PN_OVERFLOW) {
            say("error encoding a message failed (%d)", rc);
            exit(1);
        }
        b->buf_size *= 2;
        b->buf = xrealloc(b->buf, b->buf_size);
    }
}

static void finish_sender(bench_t *b) {
    b->finished = true;
    b->last_ns = now_ns();
    close_all(b);  /* "done" is printed once the connection has closed cleanly */
}

/* Send while the peer gives credit and (unsettled) the window has room. */
static void send_some(bench_t *b) {
    if (!b->going || b->closing) return;
    char tag[8];
    while (b->sent < b->count && pn_link_credit(b->link) > 0 &&
           (b->presettled || b->sent - b->progress < b->window)) {
        size_t len = encode_message(b, b->sent);
        put_be64(tag, b->sent);
        pn_delivery_t *d = pn_delivery(b->link, pn_dtag(tag, sizeof tag));
        ssize_t n = pn_link_send(b->link, b->buf, len);
        if (n < 0 || (size_t)n != len) {
            fail(b, NULL, "pn_link_send failed");
            return;
        }
        pn_link_advance(b->link);
        b->sent++;
        if (b->presettled) {  /* settled before it is written: it goes out settled */
            pn_delivery_settle(d);
            b->progress++;
        }
    }
    if (b->presettled && b->progress >= b->count) finish_sender(b);
}

/* The peer's outcome for one of our unsettled deliveries. */
static void on_outcome(bench_t *b, pn_delivery_t *d) {
    uint64_t state = pn_delivery_remote_state(d);
    if (state == PN_ACCEPTED) {
        pn_delivery_settle(d);
        if (b->finished) return;
        b->progress++;
        if (b->progress >= b->count)
            finish_sender(b);
        else
            send_some(b);  /* the window has room again */
    } else if (state == PN_REJECTED || state == PN_RELEASED || state == PN_MODIFIED) {
        pn_delivery_tag_t tag = pn_delivery_tag(d);
        pn_condition_t *cond = pn_disposition_condition(pn_delivery_remote(d));
        const char *desc = pn_condition_is_set(cond) ? pn_condition_get_description(cond) : NULL;
        char text[512];
        snprintf(text, sizeof text, "message %" PRIu64 " was not accepted: %s%s%s",
                 tag.size == 8 ? get_be64(tag.start) : 0,
                 state == PN_REJECTED ? "rejected" : state == PN_RELEASED ? "released" : "modified",
                 desc ? ": " : "", desc ? desc : "");
        pn_delivery_settle(d);
        fail(b, NULL, text);
    }  /* anything else (no outcome yet, "received"): wait */
}

/* ------------------------------------------------------------------ receiver */

static void finish_receiver(bench_t *b) {
    b->finished = true;
    printf("done {\"count\": %" PRIu64 ", \"first_ns\": %" PRId64 ", \"last_ns\": %" PRId64
           ", \"cpu_s\": %.6f, \"lat_us\": [",
           b->progress, b->first_ns, b->last_ns, cpu_seconds() - b->cpu0);
    for (size_t i = 0; i < b->lat_len; i++) printf(i ? ", %" PRId64 : "%" PRId64, b->lat_us[i]);
    fputs("]}\n", stdout);
    fflush(stdout);
    close_all(b);
}

/* Take every complete delivery at the head of the link, then top the credit up. */
static void on_receive(bench_t *b) {
    pn_link_t *l = b->link;
    pn_delivery_t *d;
    while (!b->finished && (d = pn_link_current(l)) != NULL && pn_delivery_readable(d) &&
           !pn_delivery_partial(d)) {
        if (pn_delivery_aborted(d)) {  /* the sender gave up on it: nothing to count */
            pn_link_advance(l);
            pn_delivery_settle(d);
            continue;
        }
        size_t pending = pn_delivery_pending(d);
        if (pending > b->buf_size) {
            b->buf_size = pending;
            b->buf = xrealloc(b->buf, b->buf_size);
        }
        ssize_t n = pn_link_recv(l, b->buf, pending);
        int64_t now = now_ns();
        pn_link_advance(l);
        if (!b->presettled && !pn_delivery_settled(d)) pn_delivery_update(d, PN_ACCEPTED);
        pn_delivery_settle(d);

        /* The send time is the first 8 bytes of the (single, binary) body. */
        pn_bytes_t data = {0, NULL};
        if (n >= 0 && pn_message_decode(b->msg, b->buf, (size_t)n) == 0) {
            pn_data_t *body = pn_message_body(b->msg);
            pn_data_rewind(body);
            if (pn_data_next(body) && pn_data_type(body) == PN_BINARY)
                data = pn_data_get_binary(body);
        }
        if (data.size < STAMP_SIZE) {
            fail(b, NULL, "a message without the bench's data section");
            return;
        }
        int64_t sent_ns = (int64_t)get_be64(data.start);
        if (b->lat_len == b->lat_cap) {
            b->lat_cap = b->lat_cap ? b->lat_cap * 2 : 4096;
            b->lat_us = xrealloc(b->lat_us, b->lat_cap * sizeof *b->lat_us);
        }
        b->lat_us[b->lat_len++] = (now - sent_ns) / 1000;
        if (b->progress == 0) b->first_ns = now;
        b->last_ns = now;
        if (++b->progress >= b->count) finish_receiver(b);
    }
    if (b->finished || b->closing) return;
    /* Top up in batches, never granting more than the messages still wanted. The
       credit may be negative: some brokers (RabbitMQ 3.10) send beyond it. */
    int64_t credit = pn_link_credit(l);
    if (credit <= (int64_t)(b->window / 2)) {
        uint64_t left = b->count - b->progress;
        int64_t want = (int64_t)(left < b->window ? left : b->window);
        if (want > credit) pn_link_flow(l, (int)(want - credit));
    }
}

/* ------------------------------------------------------------------ events */

/* The stdin flags, acted on inside a connection event. */
static void on_wake(bench_t *b) {
    if (b->closing) return;
    if (b->sender) {
        if (!b->going && atomic_load(&saw_go)) {
            b->going = true;
            b->first_ns = now_ns();
            b->cpu0 = cpu_seconds();
            send_some(b);
        } else if (!b->going && atomic_load(&saw_eof)) {
            b->quiet = true;  /* told nothing: leave without sending */
            close_all(b);
        }
    } else if (atomic_load(&saw_stop) || atomic_load(&saw_eof)) {
        finish_receiver(b);
    }
}

/* Handle one event; false once the proactor has nothing left to do. */
static bool handle(bench_t *b, pn_event_t *e) {
    switch (pn_event_type(e)) {
    case PN_LINK_REMOTE_OPEN: {
        pn_link_t *l = pn_event_link(e);
        /* A refused link comes back with no terminus, then a detach with the reason. */
        pn_terminus_t *t = b->sender ? pn_link_remote_target(l) : pn_link_remote_source(l);
        if (l == b->link && !b->ready && pn_terminus_get_type(t) != PN_UNSPECIFIED) {
            b->ready = true;
            b->cpu0 = cpu_seconds();
            say("ready");
            on_wake(b);  /* in case stdin spoke already */
        }
        if (b->sender) send_some(b);
        break;
    }
    case PN_LINK_FLOW:
        if (b->sender) send_some(b);
        break;
    case PN_DELIVERY:
        if (b->sender)
            on_outcome(b, pn_event_delivery(e));
        else
            on_receive(b);
        break;
    case PN_CONNECTION_WAKE:
        if (b->ready) on_wake(b);  /* before "ready", the flags wait for the attach */
        break;
    case PN_PROACTOR_INTERRUPT:  /* from the stdin thread */
        if (b->conn != NULL) pn_connection_wake(b->conn);
        break;
    case PN_PROACTOR_TIMEOUT:
        if (b->closing) break;
        if (b->ready) say("n %" PRIu64, b->progress);
        pn_proactor_set_timeout(b->proactor, PROGRESS_MS);
        break;
    /* Ends we did not ask for are failures (with the peer's reason, if any). */
    case PN_LINK_REMOTE_CLOSE:
    case PN_LINK_REMOTE_DETACH:
        if (!b->closing)
            fail(b, pn_link_remote_condition(pn_event_link(e)), "the peer detached the link");
        break;
    case PN_SESSION_REMOTE_CLOSE:
        if (!b->closing)
            fail(b, pn_session_remote_condition(pn_event_session(e)), "the peer ended the session");
        break;
    case PN_CONNECTION_REMOTE_CLOSE:
        if (!b->closing)
            fail(b, pn_connection_remote_condition(pn_event_connection(e)),
                 "the peer closed the connection");
        pn_connection_close(pn_event_connection(e));
        break;
    case PN_TRANSPORT_CLOSED: {  /* also: connection refused, SASL failure, I/O error */
        pn_condition_t *cond = pn_transport_condition(pn_event_transport(e));
        if (pn_condition_is_set(cond) || !b->closing)
            fail(b, cond, "the connection ended unexpectedly");
        b->conn = NULL;  /* the proactor frees it after this batch */
        b->closing = true;
        pn_proactor_cancel_timeout(b->proactor);
        break;
    }
    case PN_PROACTOR_INACTIVE:
        return false;
    default:
        break;
    }
    return true;
}

/* ------------------------------------------------------------------ main */

static bool parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v < min || v > max) return false;
    *out = v;
    return true;
}

static int usage(const char *why) {
    fprintf(stderr, "amqp10_bench_client: %s (usage: amqp10_bench_client"
                    " send HOST PORT ADDRESS COUNT SIZE PRESETTLED DURABLE CREDIT"
                    " | recv HOST PORT ADDRESS COUNT CREDIT PRESETTLED)\n", why);
    return 2;
}

int main(int argc, char **argv) {
    bench_t b = {0};
    uint64_t v[5];
    if (argc >= 2 && strcmp(argv[1], "send") == 0 && argc == 10) {
        b.sender = true;
        if (!parse_u64(argv[5], 1, INT64_MAX, &v[0]) ||
            !parse_u64(argv[6], STAMP_SIZE, 1u << 30, &v[1]) || !parse_u64(argv[7], 0, 1, &v[2]) ||
            !parse_u64(argv[8], 0, 1, &v[3]) || !parse_u64(argv[9], 1, INT32_MAX, &v[4]))
            return usage("bad COUNT (>= 1), SIZE (>= 16), PRESETTLED, DURABLE (0/1)"
                         " or CREDIT (>= 1)");
        b.count = v[0], b.size = v[1], b.presettled = v[2], b.durable = v[3], b.window = v[4];
    } else if (argc >= 2 && strcmp(argv[1], "recv") == 0 && argc == 8) {
        if (!parse_u64(argv[5], 1, INT64_MAX, &v[0]) || !parse_u64(argv[6], 1, INT32_MAX, &v[1]) ||
            !parse_u64(argv[7], 0, 1, &v[2]))
            return usage("bad COUNT (>= 1), CREDIT (>= 1) or PRESETTLED (0/1)");
        b.count = v[0], b.window = v[1], b.presettled = v[2];
    } else {
        return usage("wrong arguments");
    }
    b.host = argv[2], b.port = argv[3], b.address = argv[4];

    b.msg = pn_message();
    if (b.sender) {
        b.body = memset(xrealloc(NULL, b.size), 0, b.size);
        b.buf_size = b.size + 256;  /* room for the sections around the body */
        b.buf = xrealloc(NULL, b.buf_size);
        pn_message_set_inferred(b.msg, true);  /* a binary body is a data section */
        if (b.durable) pn_message_set_durable(b.msg, true);
    } else {
        b.buf_size = 4096;
        b.buf = xrealloc(NULL, b.buf_size);
    }

    /* One connection, one session, one link; all opened before connecting. */
    char name[64];
    snprintf(name, sizeof name, "amqp10-bench-%s-%ld", b.sender ? "send" : "recv", (long)getpid());
    b.conn = pn_connection();
    pn_connection_set_container(b.conn, name);
    pn_connection_set_hostname(b.conn, b.host);
    pn_session_t *ssn = pn_session(b.conn);
    pn_session_open(ssn);
    b.link = b.sender ? pn_sender(ssn, name) : pn_receiver(ssn, name);
    pn_terminus_set_address(b.sender ? pn_link_target(b.link) : pn_link_source(b.link), b.address);
    pn_link_set_snd_settle_mode(b.link, b.presettled ? PN_SND_SETTLED : PN_SND_UNSETTLED);
    pn_link_set_rcv_settle_mode(b.link, PN_RCV_FIRST);
    pn_link_open(b.link);
    if (!b.sender) pn_link_flow(b.link, (int)(b.window < b.count ? b.window : b.count));
    pn_connection_open(b.conn);

    pn_transport_t *transport = pn_transport();
    pn_sasl_allowed_mechs(pn_sasl(transport), "ANONYMOUS");  /* SASL, as a bench broker expects */

    char addr[512];
    pn_proactor_addr(addr, sizeof addr, b.host, b.port);
    b.proactor = pn_proactor();
    shared_proactor = b.proactor;
    pn_proactor_connect2(b.proactor, b.conn, transport, addr);
    pn_proactor_set_timeout(b.proactor, PROGRESS_MS);

    pthread_t reader;
    if (pthread_create(&reader, NULL, read_stdin, NULL) != 0) {
        say("error cannot start the stdin thread");
        return 1;
    }
    pthread_detach(reader);  /* it may stay blocked in fgets until exit */

    bool running = true;
    while (running) {
        pn_event_batch_t *batch = pn_proactor_wait(b.proactor);
        pn_event_t *e;
        while ((e = pn_event_batch_next(batch)) != NULL)
            if (!handle(&b, e)) running = false;
        pn_proactor_done(b.proactor, batch);
    }

    int status = 0;
    if (b.failed) {
        status = 1;
    } else if (b.sender && b.finished) {  /* closed cleanly: everything was delivered */
        say("done {\"count\": %" PRIu64 ", \"first_ns\": %" PRId64 ", \"last_ns\": %" PRId64
            ", \"cpu_s\": %.6f}", b.progress, b.first_ns, b.last_ns, cpu_seconds() - b.cpu0);
    } else if (!b.finished && !b.quiet) {
        say("error the connection ended before the run did");
        status = 1;
    }

    pthread_mutex_lock(&proactor_lock);
    shared_proactor = NULL;
    pthread_mutex_unlock(&proactor_lock);
    pn_proactor_free(b.proactor);
    pn_message_free(b.msg);
    free(b.buf);
    free(b.body);
    free(b.lat_us);
    return status;
}
