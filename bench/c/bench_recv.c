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
 * A bench consumer for amqp10's bench harness, adapted from Proton's
 * examples/c/receive.c (same proactor loop, delivery handling and credit
 * top-up). Differences: it decodes each message and reads the send time from
 * the body instead of printing it, keeps a credit window (not all credit at
 * once), accepts each message, and speaks the harness's line protocol.
 *
 *   bench_recv HOST PORT ADDRESS COUNT CREDIT PRESETTLED(0|1)
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
  int message_count, window, presettled;
  pn_proactor_t *proactor;
  pn_message_t *message;
  int received, finished;
  int64_t first_ns, last_ns, last_report_ns;
  int64_t *lat_us;
  pn_rwbytes_t msgin;
  size_t msgin_cap;
  double cpu0;
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

static uint64_t get_be64(const char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | (unsigned char)p[i];
  return v;
}

static void fail(pn_event_t *e, const char *what, pn_condition_t *cond) {
  if (pn_condition_is_set(cond)) {
    printf("error %s: %s: %s\n", what, pn_condition_get_name(cond), pn_condition_get_description(cond));
    fflush(stdout);
    if (pn_event_connection(e)) pn_connection_close(pn_event_connection(e));
    exit_code = 1;
  }
}

static void finish(app_data_t *app) {
  int i;
  app->finished = 1;
  printf("done {\"count\": %d, \"first_ns\": %lld, \"last_ns\": %lld, \"cpu_s\": %.4f, \"lat_us\": [",
         app->received, (long long)app->first_ns, (long long)app->last_ns, cpu_s() - app->cpu0);
  for (i = 0; i < app->received; ++i) printf(i ? ",%lld" : "%lld", (long long)app->lat_us[i]);
  printf("]}\n");
  fflush(stdout);
}

static int handle(app_data_t *app, pn_event_t *event) {
  switch (pn_event_type(event)) {
   case PN_CONNECTION_INIT: {
     pn_connection_t *c = pn_event_connection(event);
     pn_session_t *s = pn_session(c);
     pn_connection_set_container(c, "amqp10-bench-c-receiver");
     pn_connection_open(c);
     pn_session_open(s);
     {
       pn_link_t *l = pn_receiver(s, "bench_receiver");
       pn_terminus_set_address(pn_link_source(l), app->amqp_address);
       pn_link_set_snd_settle_mode(l, app->presettled ? PN_SND_SETTLED : PN_SND_UNSETTLED);
       pn_link_set_rcv_settle_mode(l, PN_RCV_FIRST);
       pn_link_open(l);
       pn_link_flow(l, app->window);
     }
     break;
   }
   case PN_LINK_REMOTE_OPEN: {
     printf("ready\n");
     fflush(stdout);
     app->cpu0 = cpu_s();
     break;
   }
   case PN_DELIVERY: {
     pn_delivery_t *d = pn_event_delivery(event);
     if (pn_delivery_readable(d)) {
       pn_link_t *l = pn_delivery_link(d);
       size_t size = pn_delivery_pending(d);
       pn_rwbytes_t *m = &app->msgin;
       ssize_t recv;
       if (m->size + size > app->msgin_cap) {
         app->msgin_cap = (m->size + size) * 2;
         m->start = (char *)realloc(m->start, app->msgin_cap);
       }
       recv = pn_link_recv(l, m->start + m->size, size);
       if (recv == PN_ABORTED) {
         m->size = 0;
         pn_delivery_settle(d);
         pn_link_flow(l, 1);
       } else if (recv < 0 && recv != PN_EOS) {
         pn_condition_format(pn_link_condition(l), "broker", "PN_DELIVERY error: %s", pn_code((int)recv));
         pn_link_close(l);
       } else {
         if (recv > 0) m->size += (size_t)recv;
         if (!pn_delivery_partial(d)) {
           int64_t t = now_ns();
           int err = pn_message_decode(app->message, m->start, m->size);
           m->size = 0;
           if (err) {
             printf("error decode_message: %s\n", pn_code(err));
             fflush(stdout);
             exit_code = 1;
             return 0;
           } else {
             pn_data_t *body = pn_message_body(app->message);
             pn_bytes_t b = {0, NULL};
             pn_data_rewind(body);
             if (pn_data_next(body) && pn_data_type(body) == PN_BINARY) b = pn_data_get_binary(body);
             if (b.size >= 8) app->lat_us[app->received] = (t - (int64_t)get_be64(b.start)) / 1000;
           }
           if (!pn_delivery_settled(d)) pn_delivery_update(d, PN_ACCEPTED);
           pn_delivery_settle(d);
           if (!app->received) app->first_ns = t;
           app->last_ns = t;
           ++app->received;
           if (t - app->last_report_ns > 100000000LL) {
             app->last_report_ns = t;
             printf("n %d\n", app->received);
             fflush(stdout);
           }
           if (app->received >= app->message_count) {
             pn_session_t *ssn = pn_link_session(l);
             finish(app);
             pn_link_close(l);
             pn_session_close(ssn);
             pn_connection_close(pn_session_connection(ssn));
           } else if (pn_link_credit(l) < app->window / 2) {
             int want = app->window;
             if (want > app->message_count - app->received) want = app->message_count - app->received;
             if (want > pn_link_credit(l)) pn_link_flow(l, want - pn_link_credit(l));
           }
         }
       }
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
    if (!app->finished) fail(event, "link", pn_link_remote_condition(pn_event_link(event)));
    pn_connection_close(pn_event_connection(event));
    break;
   case PN_PROACTOR_INACTIVE:
    return 0;
   default:
    break;
  }
  return 1;
}

int main(int argc, char **argv) {
  app_data_t app = {0};
  char addr[PN_MAX_ADDR];
  if (argc < 7) {
    fprintf(stderr, "usage: %s HOST PORT ADDRESS COUNT CREDIT PRESETTLED\n", argv[0]);
    return 2;
  }
  app.host = argv[1];
  app.port = argv[2];
  app.amqp_address = argv[3];
  app.message_count = atoi(argv[4]);
  app.window = atoi(argv[5]);
  app.presettled = atoi(argv[6]);
  if (app.window < 1) app.window = 1;
  if (app.window > app.message_count) app.window = app.message_count;
  app.lat_us = calloc((size_t)app.message_count + 1, sizeof(int64_t));
  app.message = pn_message();
  app.proactor = pn_proactor();
  pn_proactor_addr(addr, sizeof(addr), app.host, app.port);
  pn_proactor_connect2(app.proactor, NULL, NULL, addr);
  for (;;) {
    pn_event_batch_t *events = pn_proactor_wait(app.proactor);
    pn_event_t *e;
    int go = 1;
    for (e = pn_event_batch_next(events); e; e = pn_event_batch_next(events)) {
      if (!handle(&app, e) || exit_code != 0) { go = 0; break; }
    }
    pn_proactor_done(app.proactor, events);
    if (!go) break;
  }
  pn_proactor_free(app.proactor);
  pn_message_free(app.message);
  free(app.msgin.start);
  free(app.lat_us);
  if (!app.finished && !exit_code) {
    printf("error connection ended after %d of %d messages\n", app.received, app.message_count);
    fflush(stdout);
    exit_code = 1;
  }
  return exit_code;
}
