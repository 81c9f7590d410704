// rhea over its WebSocket transport (with the `ws` package) against an AMQP 1.0 peer.
//
//   node rhea_ws.js URL SEND_ADDRESS COUNT RECEIVE_ADDRESS EXPECTED [USER PASSWORD]
//
// Sends COUNT messages (bodies "rhea-0"..., the last one 300 KB: several frames) to
// SEND_ADDRESS and waits for each to be accepted; receives EXPECTED messages from
// RECEIVE_ADDRESS. Prints one JSON line {"accepted": N, "received": [bodies...]} and
// exits 0, or prints {"error": "..."} and exits 1.
'use strict';
const rhea = require('rhea');
const WebSocket = require('ws');

const [url, sendAddress, countText, receiveAddress, expectedText, user, password] =
    process.argv.slice(2);
const count = Number(countText);
const expected = Number(expectedText);
const BIG = 'x'.repeat(300 * 1024);

const container = rhea.create_container({ id: 'rhea-ws-interop' });
const ws = container.websocket_connect(WebSocket);
const options = {
    connection_details: ws(url, ['binary', 'AMQPWSB10', 'amqp']),
    reconnect: false,
};
if (user) {
    options.username = user;
    options.password = password;
}

let sent = 0;
let accepted = 0;
const received = [];
let finished = false;

function finish(result, code) {
    if (finished) return;
    finished = true;
    process.stdout.write(JSON.stringify(result) + '\n');
    process.exit(code);
}

const timer = setTimeout(
    () => finish({ error: `timed out: accepted ${accepted}/${count}, received ${received.length}/${expected}` }, 1),
    20000,
);

function maybeDone(connection) {
    if (accepted === count && received.length === expected) {
        clearTimeout(timer);
        connection.close();
    }
}

const connection = container.connect(options);
connection.open_receiver({ source: receiveAddress, autoaccept: true });
connection.open_sender({ target: sendAddress });

container.on('sendable', (context) => {
    while (context.sender.sendable() && sent < count) {
        const body = sent === count - 1 ? `rhea-${sent}-${BIG}` : `rhea-${sent}`;
        context.sender.send({ message_id: sent, body });
        sent += 1;
    }
});
container.on('accepted', (context) => {
    accepted += 1;
    maybeDone(context.connection);
});
container.on('rejected', (context) => finish({ error: 'a message was rejected' }, 1));
container.on('message', (context) => {
    received.push(context.message.body);
    maybeDone(context.connection);
});
container.on('connection_close', () => finish({ accepted, received }, 0));
container.on('connection_error', (context) =>
    finish({ error: `connection error: ${JSON.stringify(context.connection.error)}` }, 1));
container.on('disconnected', (context) => {
    if (!finished) finish({ error: `disconnected: ${context.error || 'no error'}` }, 1);
});
container.on('error', (error) => finish({ error: String(error) }, 1));
