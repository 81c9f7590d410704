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

if (!scenarios[scenario]) {
    fail('no such scenario: ' + scenario);
}
setTimeout(function () { fail('timed out'); }, 20000);
scenarios[scenario]();
