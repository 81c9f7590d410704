// The interop matrix's rhea scenarios: `node scenarios.js SCENARIO PORT ADDRESS`.
// Each prints one JSON line with what it saw and exits 0 (or prints {"error": ...}).
// Written for this project to behave like rhea's examples (server.js/client.js,
// simple_send.js/simple_recv.js, drain.js), which the npm package does not ship.
'use strict';
var rhea = require('rhea');

var scenario = process.argv[2], port = parseInt(process.argv[3], 10), address = process.argv[4];
var HOST = '127.0.0.1';

function done(result) {
    console.log(JSON.stringify(result));
    process.exit(0);
}

function fail(what) {
    done({error: String(what)});
}

function connect(container) {
    var conn = container.connect({port: port, host: HOST, reconnect: false, idle_time_out: 5000});
    conn.on('connection_error', function (context) { fail('connection error: ' + JSON.stringify(context.connection.error)); });
    conn.on('disconnected', function (context) { if (context.error) fail('disconnected: ' + context.error); });
    return conn;
}

// simple_send.js: send `total` messages unsettled, close once all are accepted
function simpleSend(total, then) {
    var c = rhea.create_container();
    var confirmed = 0, sent = 0;
    c.on('sendable', function (context) {
        while (context.sender.sendable() && sent < total) {
            sent++;
            context.sender.send({message_id: sent, body: {sequence: sent}});
        }
    });
    c.on('accepted', function (context) {
        if (++confirmed === total) {
            context.connection.close();
        }
    });
    c.on('rejected', function (context) { fail('a message was rejected'); });
    c.on('connection_close', function () { then(confirmed); });
    connect(c).open_sender(address);
}

// simple_recv.js: receive `expected` messages (auto-accepted), then detach and close
function simpleRecv(expected, then) {
    var c = rhea.create_container();
    var bodies = [];
    c.on('message', function (context) {
        bodies.push(context.message.body);
        if (bodies.length === expected) {
            context.receiver.detach();
            context.connection.close();
        }
    });
    c.on('connection_close', function () { then(bodies); });
    connect(c).open_receiver(address);
}

// server.js: answer each request through connection.send (a sender with an empty target)
function server(limit) {
    var c = rhea.create_container();
    var served = 0;
    c.on('connection_open', function (context) {
        context.connection.open_receiver(address);
    });
    c.on('message', function (context) {
        var request = context.message;
        var response = {to: request.reply_to, body: request.body.toString().toUpperCase()};
        if (request.correlation_id) {
            response.correlation_id = request.correlation_id;
        }
        context.connection.send(response);
        if (++served === limit) {
            setTimeout(function () { context.connection.close(); }, 200);
        }
    });
    return connect(c);
}

// client.js: a dynamic receiver, one request at a time, reply_to = its address
function client(requests, then) {
    var c = rhea.create_container();
    var sender, answers = [], pending = requests.slice();
    function next(context) {
        if (context.receiver.source.address) {
            sender.send({reply_to: context.receiver.source.address, body: pending[0]});
        }
    }
    c.on('connection_open', function (context) {
        sender = context.connection.open_sender(address);
        context.connection.open_receiver({source: {dynamic: true}});
    });
    c.on('receiver_open', function (context) { next(context); });
    c.on('message', function (context) {
        answers.push([pending.shift(), context.message.body]);
        if (pending.length) {
            next(context);
        } else {
            context.connection.close();
        }
    });
    c.on('connection_close', function () { then(answers); });
    connect(c);
}

var REQUESTS = ['Twas brillig, and the slithy toves', 'Did gire and gymble in the wabe.',
                'All mimsy were the borogroves,', 'And the mome raths outgrabe.'];

var scenarios = {
    'sasl-anonymous': function () {
        var c = rhea.create_container();
        c.on('connection_open', function (context) {
            var caps = context.connection.remote.open.offered_capabilities;
            context.connection.close();
            done({opened: true, offered: caps === undefined ? [] : [].concat(caps)});
        });
        connect(c);
    },
    'at-least-once': function () {
        simpleSend(10, function (confirmed) {
            simpleRecv(10, function (bodies) {
                done({confirmed: confirmed, sequences: bodies.map(function (b) { return b.sequence; })});
            });
        });
    },
    'request-response': function () {
        server(REQUESTS.length);
        setTimeout(function () {
            client(REQUESTS, function (answers) { done({answers: answers}); });
        }, 300);
    },
    'anonymous-relay': function () {
        // the request/response pair, then a relayed message whose `to` names no node
        server(REQUESTS.length);
        setTimeout(function () {
            client(REQUESTS, function (answers) {
                var c = rhea.create_container();
                var conn = connect(c);
                var outcome = null;
                c.on('accepted', function (context) { outcome = 'accepted'; context.connection.close(); });
                c.on('rejected', function (context) {
                    var e = context.delivery.remote_state && context.delivery.remote_state.error;
                    outcome = 'rejected:' + (e ? e.condition : '');
                    context.connection.close();
                });
                c.on('released', function (context) { outcome = 'released'; context.connection.close(); });
                c.on('connection_close', function () { done({answers: answers, unknown: outcome}); });
                conn.send({to: address + '.absent', body: 'nowhere'});
            });
        }, 300);
    },
    'drain': function () {
        // fill the node with 25, then drain.js: credit 10 with drain set, 10 more each
        // time 10 arrived, stop at the first flow that says drained
        simpleSend(25, function () {
            var c = rhea.create_container();
            var batch = 10, received = 0, bodies = [];
            c.on('message', function (context) {
                bodies.push(context.message.body.sequence);
                if (++received === batch) {
                    received = 0;
                    context.receiver.add_credit(batch);
                }
            });
            c.on('receiver_open', function (context) {
                context.receiver.flow(batch);
                context.receiver.drain = true;
            });
            c.on('receiver_drained', function (context) {
                context.receiver.detach();
                context.connection.close();
                setTimeout(function () { done({sequences: bodies}); }, 100);
            });
            connect(c).open_receiver({source: {address: address}, credit_window: 0});
        });
    },
};

// -- #14's conventions ------------------------------------------------------------------
var EMPTY_WAIT = 800;  // ms without more messages before a receiver is judged complete

// send `messages` (rhea message objects) to `target` unsettled; then(outcomes)
function publish(target, messages, then) {
    var c = rhea.create_container();
    var sent = 0, outcomes = [];
    c.on('sendable', function (context) {
        while (context.sender.sendable() && sent < messages.length) {
            context.sender.send(messages[sent++]);
        }
    });
    function settled(context, what) {
        outcomes.push(what);
        if (outcomes.length === messages.length) {
            context.connection.close();
        }
    }
    c.on('accepted', function (context) { settled(context, 'accepted'); });
    c.on('rejected', function (context) { settled(context, 'rejected'); });
    c.on('released', function (context) { settled(context, 'released'); });
    c.on('connection_close', function () { then(outcomes); });
    connect(c).open_sender(target);
}

// publish to several targets, one after the other
function publishAll(list, then) {
    if (!list.length) {
        return then();
    }
    publish(list[0][0], list[0][1], function () { publishAll(list.slice(1), then); });
}

// open receivers (rhea receiver options) on one connection of a container with `copts`;
// ready(receivers, got, conn) once all are open; got[i] collects receiver i's bodies
// (auto-accepted)
function receivers(copts, specs, ready) {
    var c = rhea.create_container(copts);
    var conn = connect(c);
    var got = specs.map(function () { return []; }), opened = 0, links = [];
    c.on('message', function (context) {
        got[links.indexOf(context.receiver)].push(context.message.body);
    });
    c.on('receiver_open', function () {
        if (++opened === specs.length) {
            ready(links, got, conn);
        }
    });
    links = specs.map(function (spec) { return conn.open_receiver(spec); });
}

// call then() once `got` holds `want` messages in all and EMPTY_WAIT passed without more
function settle(got, want, then) {
    function count() { return got.reduce(function (n, g) { return n + g.length; }, 0); }
    var last = -1;
    var timer = setInterval(function () {
        var n = count();
        if (n >= want && n === last) {
            clearInterval(timer);
            then();
        }
        last = n;
    }, EMPTY_WAIT);
}

function remoteSource(link) {
    var a = link.remote.attach;
    return a && a.source ? a.source : null;
}

function caps(terminus) {
    var c = terminus && terminus.capabilities;
    return c === undefined || c === null ? [] : [].concat(c).map(String);
}

function coloured() {
    var out = [];
    for (var i = 1; i <= 8; i++) {
        var colour = i % 2 ? 'green' : 'red';
        out.push({body: colour + ' ' + i, application_properties: {colour: colour}});
    }
    return out;
}

var conventions = {
    'attach-answer': function () {
        var c = rhea.create_container();
        var conn = connect(c);
        var out = {};
        c.on('receiver_open', function (context) {
            var a = context.receiver.remote.attach;
            out.receiver = {source: a.source, target: a.target};
            conn.open_sender({target: {address: address}, source: {address: address + '.from'}});
        });
        c.on('sendable', function (context) {
            if (out.sender) { return; }
            var a = context.sender.remote.attach;
            out.sender = {source: a.source, target: a.target};
            out.offered = caps({capabilities: conn.remote.open.offered_capabilities});
            conn.close();
            done(out);
        });
        conn.open_receiver({source: {address: address}, target: {address: address + '.mine'}, credit_window: 0});
    },
    'selector': function () {
        publish(address, coloured(), function () {
            var green = {source: {address: address, filter: rhea.filter.selector("colour = 'green'")}};
            receivers({}, [green], function (links, got, conn) {
                var src = remoteSource(links[0]);
                settle(got, 4, function () {
                    conn.close();
                    receivers({}, [{source: {address: address}}], function (l2, rest, conn2) {
                        settle(rest, 4, function () {
                            conn2.close();
                            done({filter: src && src.filter ? Object.keys(src.filter) : [],
                                  green: got[0], red: rest[0]});
                        });
                    });
                });
            });
        });
    },
    'filter-expressions': function () {
        // FILTER_ROWS of interop/scenarios/__init__.py, from rhea.py
        var T = rhea.types, data = JSON.parse(process.env.INTEROP_FILTERS);
        var msgs = data.messages.map(function (m) {
            return {body: m[0], subject: m[1], application_properties: {colour: m[2], n: m[3]}};
        });
        var echoed = [], got = [];
        function next(i) {
            if (i === data.filters.length) {
                return receivers({}, [{source: {address: address}}], function (l, rest, conn) {
                    settle(rest, data.rest.length, function () {
                        conn.close();
                        done({filters: echoed, got: got, rest: rest[0]});
                    });
                });
            }
            var f = data.filters[i], key = f[0], filter = {};
            // a properties filter's keys are symbols (field names), an application-properties
            // filter's strings
            filter[key] = key === 'props' ? T.described(T.wrap_symbol(f[1]), T.wrap_symbolic_map(f[3]))
                                          : T.wrap_described(f[3], f[1]);
            receivers({}, [{source: {address: address, filter: filter}}], function (links, g, conn) {
                var src = remoteSource(links[0]);
                echoed.push(src && src.filter ? Object.keys(src.filter) : []);
                if (echoed[i].indexOf(key) < 0) {  // not applied: it would take everything
                    conn.close();
                    return done({filters: echoed, got: got, rest: null});
                }
                settle(g, f[4].length, function () {
                    conn.close();
                    got.push(g[0]);
                    next(i + 1);
                });
            });
        }
        publish(address, msgs, function () { next(0); });
    },
    'no-local': function () {
        var topic = 'topic://' + address, filter = {};
        filter['no-local'] = rhea.types.wrap_described([], JSON.parse(process.env.INTEROP_FILTERS).no_local);
        var specs = [{source: {address: topic, filter: filter}}, {source: {address: topic}}];
        receivers({}, specs, function (links, got, conn) {
            var src = remoteSource(links[0]);
            var sender = conn.open_sender(topic), sent = false;
            sender.on('sendable', function () {
                if (!sent) {
                    sent = true;
                    sender.send({body: 'own'});
                }
            });
            sender.on('accepted', function () {
                publish(topic, [{body: 'other'}], function () {
                    settle(got, 3, function () {
                        conn.close();
                        done({filter: src && src.filter ? Object.keys(src.filter) : [],
                              sub: got[0], plain: got[1]});
                    });
                });
            });
        });
    },
    'topic-wildcard': function () {
        var base = address;
        var specs = [
            {source: {address: 'topic://' + base + '.news'}},
            {source: {address: 'topic://' + base + '.news'}},
            {source: {address: 'topic://' + base + '.*'}},
            {source: {address: base + '.#', capabilities: ['topic']}},
        ];
        receivers({}, specs, function (links, got, conn) {
            var topicCaps = caps(remoteSource(links[0]));
            publishAll([['topic://' + base + '.news', [{body: 'n'}]],
                        ['topic://' + base + '.news.deep', [{body: 'x'}]],
                        ['topic://' + base + '.other', [{body: 'o'}]]], function () {
                settle(got, 7, function () {
                    conn.close();
                    done({caps: topicCaps, got: got});
                });
            });
        });
    },
    'durable-subscription': function () {
        var topic = 'topic://' + address, cid = 'rhea-' + address, name = 'sub-' + address;
        function spec(credit) {
            return {name: name, credit_window: credit,
                    source: {address: topic, durable: 2, expiry_policy: 'never', capabilities: ['topic']}};
        }
        receivers({id: cid}, [spec(0)], function (links, _got, conn) {
            var durable = (remoteSource(links[0]) || {}).durable;
            links[0].detach();  // closed=false: the subscription stays
            conn.close();
            publish(topic, [{body: 'd1'}, {body: 'd2'}, {body: 'd3'}], function () {
                receivers({id: cid}, [spec(10)], function (l2, kept, conn2) {
                    settle(kept, 3, function () {
                        l2[0].close();  // closed=true: unsubscribe
                        conn2.close();
                        publish(topic, [{body: 'gone'}], function () {
                            receivers({id: cid}, [spec(10)], function (l3, after, conn3) {
                                settle(after, 0, function () {
                                    l3[0].close();
                                    conn3.close();
                                    done({durable: durable, kept: kept[0], after: after[0]});
                                });
                            });
                        });
                    });
                });
            });
        });
    },
    'shared-subscription': function () {
        var topic = 'topic://' + address, name = 'shared-' + address;
        function spec(n) {
            return {name: n, credit_window: 0,
                    source: {address: topic, capabilities: ['topic', 'shared', 'global']}};
        }
        receivers({}, [spec(name)], function (la, gotA, connA) {
            var shared = caps(remoteSource(la[0]));
            receivers({}, [spec(name + '|2')], function (lb, gotB, connB) {
                var six = [0, 1, 2, 3, 4, 5].map(function (i) { return {body: 'p' + i}; });
                publish(topic, six, function () {
                    la[0].flow(3);
                    lb[0].flow(3);
                    settle([gotA[0], gotB[0]], 6, function () {
                        connA.close();
                        connB.close();
                        done({caps: shared, a: gotA[0], b: gotB[0]});
                    });
                });
            });
        });
    },
    'scheduled-delivery': function () {
        var due = Date.now() + 1500;
        var later = {body: 'later', message_annotations: {'x-opt-delivery-time': due}};
        publish(address, [later, {body: 'now'}], function () {
            var c = rhea.create_container();
            var conn = connect(c), order = [], arrived = null, offered = null;
            c.on('connection_open', function () {
                offered = caps({capabilities: conn.remote.open.offered_capabilities});
            });
            c.on('message', function (context) {
                order.push(context.message.body);
                if (context.message.body === 'later') { arrived = Date.now(); }
                if (order.length === 2) {
                    conn.close();
                    done({offered: offered, order: order, early_ms: due - arrived});
                }
            });
            conn.open_receiver(address);
        });
    },
    'message-groups': function () {
        var msgs = [];
        for (var i = 1; i <= 3; i++) {
            ['A', 'B', 'C'].forEach(function (g) {
                msgs.push({body: g + i, group_id: g, group_sequence: i});
            });
        }
        // both consumers have credit before the messages come: a broker without groups
        // would spread each group over the two
        var specs = [{source: {address: address}, credit_window: 9},
                     {source: {address: address}, credit_window: 9}];
        receivers({}, specs, function (links, got, conn) {
            publish(address, msgs, function () {
                settle(got, 9, function () {
                    conn.close();
                    done({got: got});
                });
            });
        });
    },
};
Object.keys(conventions).forEach(function (k) { scenarios[k] = conventions[k]; });

if (!scenarios[scenario]) {
    fail('no such scenario: ' + scenario);
}
setTimeout(function () { fail('timed out'); }, 20000);
scenarios[scenario]();
