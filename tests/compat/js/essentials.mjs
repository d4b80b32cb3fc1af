// Drives quorumbus with the official JavaScript SDK: send, peek-lock,
// complete, abandon, dead-letter, defer, schedule, peek. Usage:
//
//   node essentials.mjs "<connection string>" <queue>
//
// Exits 0 when every step behaved as Azure Service Bus documents, 1 with
// "FAIL <step>: <reason>" otherwise. It never hangs: a timer ends it.
import { ServiceBusClient } from "@azure/service-bus";

const [connectionString, queue] = process.argv.slice(2);
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
const sender = client.createSender(queue);
const receiver = client.createReceiver(queue, { receiveMode: "peekLock" });

async function receiveOne(r, step) {
  for (let i = 0; i < 10; i++) {
    const msgs = await r.receiveMessages(1, { maxWaitTimeInMs: 2000 });
    if (msgs.length > 0) return msgs[0];
  }
  fail(step, "no message arrived");
}

try {
  // send + peek-lock + complete
  await sender.sendMessages([
    { body: "one", applicationProperties: { n: 1 } },
    { body: "two", applicationProperties: { n: 2 } },
  ]);
  const first = await receiveOne(receiver, "receive");
  check("receive", first.body === "one" && first.applicationProperties.n === 1 && first.sequenceNumber !== undefined && first.lockToken,
    `got ${JSON.stringify(first.body)}, props ${JSON.stringify(first.applicationProperties)}, lock token ${first.lockToken}`);
  await receiver.completeMessage(first);
  check("complete", true, "");

  // abandon: redelivered with the delivery count increased
  const second = await receiveOne(receiver, "receive second");
  const before = second.deliveryCount;
  await receiver.abandonMessage(second, { touched: "yes" });
  const again = await receiveOne(receiver, "abandon");
  check("abandon", again.body === "two" && again.deliveryCount === before + 1 && again.applicationProperties.touched === "yes",
    `got ${JSON.stringify(again.body)} with delivery count ${again.deliveryCount} (before ${before}), props ${JSON.stringify(again.applicationProperties)}`);

  // dead-letter with reason and description, received from the sub-queue
  await receiver.deadLetterMessage(again, { deadLetterReason: "Poison", deadLetterErrorDescription: "cannot parse" });
  const dlq = client.createReceiver(queue, { subQueueType: "deadLetter" });
  const dead = await receiveOne(dlq, "dead-letter");
  check("dead-letter", dead.body === "two" && dead.deadLetterReason === "Poison" && dead.deadLetterErrorDescription === "cannot parse",
    `got ${JSON.stringify(dead.body)} reason ${dead.deadLetterReason} description ${dead.deadLetterErrorDescription}`);
  await dlq.completeMessage(dead);
  await dlq.close();

  // defer, then receive it back by sequence number
  await sender.sendMessages({ body: "later" });
  const toDefer = await receiveOne(receiver, "receive for defer");
  await receiver.deferMessage(toDefer);
  const [deferred] = await receiver.receiveDeferredMessages(toDefer.sequenceNumber);
  check("defer", deferred && deferred.body === "later", `receiveDeferredMessages gave ${deferred && JSON.stringify(deferred.body)}`);
  await receiver.completeMessage(deferred);

  // schedule far ahead: visible to peek as scheduled, then cancelled
  const when = new Date(Date.now() + 3600_000);
  const [seq] = await sender.scheduleMessages({ body: "scheduled" }, when);
  const peeked = await receiver.peekMessages(10, { fromSequenceNumber: seq });
  check("schedule+peek", peeked.length >= 1 && peeked[0].body === "scheduled" && peeked[0].state === "scheduled",
    `peek gave ${JSON.stringify(peeked.map((m) => [m.body, m.state]))}`);
  await sender.cancelScheduledMessages(seq);
  const afterCancel = await receiver.peekMessages(10, { fromSequenceNumber: seq });
  check("cancel", afterCancel.every((m) => m.body !== "scheduled"), `still peeked: ${JSON.stringify(afterCancel.map((m) => m.body))}`);

  await receiver.close();
  await sender.close();
  await client.close();
  clearTimeout(deadline);
  console.log("all JavaScript SDK steps passed");
} catch (err) {
  fail("exception", err && err.stack ? err.stack : String(err));
}
