// Drives topics and subscriptions with the official JavaScript SDK: a
// send to a topic fans out to the subscriptions whose rules match, each
// receives its copy, settlement on one leaves the other's, and a
// subscription's dead-letter queue works. Usage:
//
//   node topics.mjs "<connection string>" <topic>
//
// The topic has subscriptions "all" (every message) and "red" (SQL filter
// color = 'red'). Exits 0 when every step behaved as Azure Service Bus
// documents, 1 with "FAIL <step>: <reason>" otherwise. A timer ends it.
import { ServiceBusClient } from "@azure/service-bus";

const [connectionString, topic] = process.argv.slice(2);
const deadline = setTimeout(() => fail("timeout", "did not finish within 120 s"), 120_000);

function fail(step, reason) {
  console.error(`FAIL ${step}: ${reason}`);
  process.exit(1);
}

function check(step, ok, reason) {
  if (!ok) fail(step, reason);
  console.log(`ok   ${step}`);
}

const client = new ServiceBusClient(connectionString, {
  retryOptions: { maxRetries: 2, timeoutInMs: 20_000 },
});

// receiveAll receives until a wait of 1.5 s brings nothing.
async function receiveAll(r) {
  const out = [];
  for (;;) {
    const msgs = await r.receiveMessages(10, { maxWaitTimeInMs: 1500 });
    if (msgs.length === 0) return out;
    out.push(...msgs);
  }
}

try {
  const sender = client.createSender(topic);
  await sender.sendMessages([
    { body: "r1", applicationProperties: { color: "red" } },
    { body: "b1", applicationProperties: { color: "blue" } },
    { body: "r2", applicationProperties: { color: "red" } },
  ]);
  check("send to a topic", true, "");

  const red = client.createReceiver(topic, "red", { receiveMode: "peekLock" });
  const redMsgs = await receiveAll(red);
  const redBodies = redMsgs.map((m) => m.body).sort().join(",");
  check("red receives the red messages", redBodies === "r1,r2", `got ${redBodies}`);
  await red.completeMessage(redMsgs.find((m) => m.body === "r1"));
  await red.deadLetterMessage(redMsgs.find((m) => m.body === "r2"), { deadLetterReason: "js", deadLetterErrorDescription: "checked" });
  check("complete and dead-letter on red", true, "");

  const redDLQ = client.createReceiver(topic, "red", { subQueueType: "deadLetter", receiveMode: "receiveAndDelete" });
  const dead = await receiveAll(redDLQ);
  check("red's dead-letter queue", dead.length === 1 && dead[0].body === "r2" && dead[0].deadLetterReason === "js",
    `got ${JSON.stringify(dead.map((m) => [m.body, m.deadLetterReason]))}`);

  const all = client.createReceiver(topic, "all", { receiveMode: "peekLock" });
  const peeked = await all.peekMessages(10);
  const peekedBodies = peeked.map((m) => m.body).join(",");
  check("all still holds its three copies (peek)", peekedBodies === "r1,b1,r2", `got ${peekedBodies}`);
  const allMsgs = await receiveAll(all);
  for (const m of allMsgs) await all.completeMessage(m);
  check("all receives every message", allMsgs.length === 3, `got ${allMsgs.length}`);

  clearTimeout(deadline);
  await client.close();
} catch (err) {
  fail("unexpected error", err?.stack ?? String(err));
}
