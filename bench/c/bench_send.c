/*
 * Licensed to the Apache Software Foundation (ASF) under one
 * or more contributor license agreements.  See the NOTICE file
 * distributed with this work for additional information
 * regarding copyright ownership.  The ASF licenses this file
 * to you under the Apache License, Version 2.0 (the
 * "License"); you may not use this file except in compliance
 * with the License.  You may obtain a copy of the License at
 *
 *   http://www.apache.org/licenses/LICENSE-2.0
 *
 * Unless required by applicable law or agreed to in writing,
 * software distributed under the License is distributed on an
 * "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY
 * KIND, either express or implied.  See the License for the
 * specific language governing permissions and limitations
 * under the License.
 */

/*
 * A bench producer for amqp10's bench harness, adapted from Proton's
 * examples/c/send.c (same proactor loop and event handling). Differences:
 * the body is one data section of SIZE bytes carrying the send time
 * (CLOCK_MONOTONIC ns, big-endian) and the sequence number; it speaks the
 * harness's line protocol (ready / go / n / done / error); settle mode and
 * durability are arguments.
 *
 *   bench_send HOST PORT ADDRESS COUNT SIZE PRESETTLED(0|1) DURABLE(0|1)
 */

#include <proton/connection.h>
#include <proton/condition.h>
#include <proton/delivery.h>
#include <proton/link.h>
#include <proton/message.h>
#include <proton/proactor.h>
#include <proton/session.h>
#include <proton/transport.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct app_data_t {
  const char *host, *port, *amqp_address;
  int message_count, size, presettled, durable;
  pn_proactor_t *proactor;
  pn_message_t *message;
  pn_rwbytes_t message_buffer;
  char *body;
  int sent, acknowledged, started, finished;
  int64_t first_ns, last_ns, last_report_ns;
} app_data_t;

static int exit_code = 0;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void put_be64(char *p, uint64_t v) {
  for (int i = 7; i >= 0; --i) { p[i] = (char)(v & 0xff); v >>= 8; }
}

static void fail(pn_event_t *e, const char *what, pn_condition_t *cond) {
  if (pn_condition_is_set(cond)) {
    printf("error %s: %s: %s\n", what, pn_condition_get_name(cond), pn_condition_get_description(cond));
    fflush(stdout);
    if (pn_event_connection(e)) pn_connection_close(pn_event_connection(e));
    exit_code = 1;
  }
}

static void report(app_data_t *app, int force) {
  int64_t t = now_ns();
  if (force || t - app->last_report_ns > 100000000LL) {
    app->last_report_ns = t;
    printf("n %d\n", app->presettled ? app->sent : app->acknowledged);
    fflush(stdout);
  }
}

static void finish(app_data_t *app, pn_connection_t *c, double cpu0) {
  app->finished = 1;
  app->last_ns = now_ns();
  printf("done {\"count\": %d, \"first_ns\": %lld, \"last_ns\": %lld, \"cpu_s\": %.4f}\n",
         app->presettled ? app->sent : app->acknowledged, (long long)app->first_ns,
         (long long)app->last_ns, cpu_s() - cpu0);
  fflush(stdout);
  pn_connection_close(c);
}

static double cpu_start;

static void send_message(app_data_t *app, pn_link_t *sender) {
  pn_data_t *body;
  pn_message_clear(app->message);
  pn_message_set_inferred(app->message, true); /* binary body -> data section */
  if (app->durable) pn_message_set_durable(app->message, true);
  put_be64(app->body, (uint64_t)now_ns());
  put_be64(app->body + 8, (uint64_t)app->sent);
  body = pn_message_body(app->message);
  pn_data_put_binary(body, pn_bytes(app->size, app->body));
  if (pn_message_send(app->message, sender, &app->message_buffer) < 0) {
    printf("error encoding message: %s\n", pn_error_text(pn_message_error(app->message)));
    fflush(stdout);
    exit(1);
  }
}

static int wait_go(void) {
  char line[64];
  while (fgets(line, sizeof line, stdin)) {
    if (strncmp(line, "go", 2) == 0) return 1;
  }
  return 0;
}

static int handle(app_data_t *app, pn_event_t *event) {
  switch (pn_event_type(event)) {
   case PN_CONNECTION_INIT: {
     pn_connection_t *c = pn_event_connection(event);
     pn_session_t *s = pn_session(c);
     pn_connection_set_container(c, "amqp10-bench-c-sender");
     pn_connection_open(c);
     pn_session_open(s);
     {
       pn_link_t *l = pn_sender(s, "bench_sender");
       pn_terminus_set_address(pn_link_target(l), app->amqp_address);
       pn_link_set_snd_settle_mode(l, app->presettled ? PN_SND_SETTLED : PN_SND_UNSETTLED);
       pn_link_set_rcv_settle_mode(l, PN_RCV_FIRST);
       pn_link_open(l);
     }
     break;
   }
   case PN_LINK_FLOW: {
     pn_link_t *sender = pn_event_link(event);
     if (!app->started) {
       printf("ready\n");
       fflush(stdout);
       if (!wait_go()) { pn_connection_close(pn_event_connection(event)); break; }
       app->started = 1;
       cpu_start = cpu_s();
       app->first_ns = now_ns();
     }
     while (pn_link_credit(sender) > 0 && app->sent < app->message_count) {
       pn_delivery_t *d;
       ++app->sent;
       d = pn_delivery(sender, pn_dtag((const char *)&app->sent, sizeof(app->sent)));
       send_message(app, sender); /* pn_message_send advances the link */
       if (app->presettled) pn_delivery_settle(d);
     }
     if (app->presettled) {
       report(app, 0);
       if (app->sent >= app->message_count && !app->finished) finish(app, pn_event_connection(event), cpu_start);
     }
     break;
   }
   case PN_DELIVERY: {
     pn_delivery_t *d = pn_event_delivery(event);
     if (!pn_delivery_remote_state(d) && !pn_delivery_settled(d)) break;
     if (pn_delivery_remote_state(d) == PN_ACCEPTED) {
       pn_delivery_settle(d);
       ++app->acknowledged;
       report(app, 0);
       if (app->acknowledged == app->message_count && !app->finished)
         finish(app, pn_event_connection(event), cpu_start);
     } else {
       printf("error unexpected delivery state %d\n", (int)pn_delivery_remote_state(d));
       fflush(stdout);
       pn_connection_close(pn_event_connection(event));
       exit_code = 1;
     }
     break;
   }
   case PN_TRANSPORT_CLOSED:
    if (!app->finished) fail(event, "transport", pn_transport_condition(pn_event_transport(event)));
    break;
   case PN_CONNECTION_REMOTE_CLOSE:
    fail(event, "connection", pn_connection_remote_condition(pn_event_connection(event)));
    pn_connection_close(pn_event_connection(event));
    break;
   case PN_SESSION_REMOTE_CLOSE:
    fail(event, "session", pn_session_remote_condition(pn_event_session(event)));
    pn_connection_close(pn_event_connection(event));
    break;
   case PN_LINK_REMOTE_CLOSE:
   case PN_LINK_REMOTE_DETACH:
    fail(event, "link", pn_link_remote_condition(pn_event_link(event)));
    pn_connection_close(pn_event_connection(event));
    break;
   case PN_PROACTOR_INACTIVE:
    return 0;
   default: break;
  }
  return 1;
}

int main(int argc, char **argv) {
  app_data_t app = {0};
  char addr[PN_MAX_ADDR];
  if (argc < 8) {
    fprintf(stderr, "usage: %s HOST PORT ADDRESS COUNT SIZE PRESETTLED DURABLE\n", argv[0]);
    return 2;
  }
  app.host = argv[1];
  app.port = argv[2];
  app.amqp_address = argv[3];
  app.message_count = atoi(argv[4]);
  app.size = atoi(argv[5]);
  app.presettled = atoi(argv[6]);
  app.durable = atoi(argv[7]);
  if (app.size < 16) app.size = 16;
  app.body = calloc(1, app.size);
  app.message = pn_message();
  app.proactor = pn_proactor();
  pn_proactor_addr(addr, sizeof(addr), app.host, app.port);
  pn_proactor_connect2(app.proactor, NULL, NULL, addr);
  for (;;) {
    pn_event_batch_t *events = pn_proactor_wait(app.proactor);
    pn_event_t *e;
    int go = 1;
    for (e = pn_event_batch_next(events); e; e = pn_event_batch_next(events)) {
      if (!handle(&app, e)) { go = 0; break; }
    }
    pn_proactor_done(app.proactor, events);
    if (!go) break;
  }
  pn_proactor_free(app.proactor);
  free(app.message_buffer.start);
  free(app.body);
  pn_message_free(app.message);
  if (!app.finished && !exit_code) {
    printf("error connection ended after %d of %d messages\n", app.sent, app.message_count);
    fflush(stdout);
    exit_code = 1;
  }
  return exit_code;
}
