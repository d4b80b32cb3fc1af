// Drives quorumbus's management API with the official JavaScript admin
// client (ServiceBusAdministrationClient, ATOM over HTTPS): create, get,
// update, runtime properties, list in pages, exists, delete, namespace
// properties, runtime counts after sends, schedules and a dead-letter by
// the SDK's ServiceBusClient, forwarding (its supplementary authorization
// header), and the errors Azure gives. Usage:
//
//   NODE_EXTRA_CA_CERTS=<admin-cert.pem> node admin.mjs "<admin connection string>" "<AMQP connection string>"
//
// Exits 0 when every step behaved as Azure Service Bus documents, 1 with
// "FAIL <step>: <reason>" otherwise. A timer ends it.
import { ServiceBusAdministrationClient, ServiceBusClient } from "@azure/service-bus";

const [connectionString, amqpConnectionString] = process.argv.slice(2);
const deadline = setTimeout(() => fail("timeout", "did not finish within 100 s"), 100_000);

function fail(step, reason) {
  console.error(`FAIL ${step}: ${reason}`);
  process.exit(1);
}

function check(step, ok, reason) {
  if (!ok) fail(step, reason);
  console.log(`ok   ${step}`);
}

async function status(fn) {
  try {
    await fn();
    return 0;
  } catch (err) {
    return err.statusCode ?? -1;
  }
}

const admin = new ServiceBusAdministrationClient(connectionString, {
  retryOptions: { maxRetries: 5, retryDelayInMs: 200 },
});

try {
  const created = await admin.createQueue("jsq", { maxDeliveryCount: 4, lockDuration: "PT45S" });
  check("create", created.name === "jsq" && created.maxDeliveryCount === 4 && created.lockDuration === "PT45S",
    JSON.stringify(created));
  check("create again is 409", (await status(() => admin.createQueue("jsq"))) === 409, "no conflict");

  const got = await admin.getQueue("jsq");
  check("get", got.maxDeliveryCount === 4 && got.status === "Active" && got.requiresSession === false,
    JSON.stringify(got));

  got.maxDeliveryCount = 9;
  const updated = await admin.updateQueue(got);
  check("update", updated.maxDeliveryCount === 9 && updated.lockDuration === "PT45S", JSON.stringify(updated));
  got.requiresSession = true;
  check("update of RequiresSession is 400", (await status(() => admin.updateQueue(got))) === 400, "accepted");

  const rt = await admin.getQueueRuntimeProperties("jsq");
  check("runtime properties", rt.activeMessageCount === 0 && rt.deadLetterMessageCount === 0 &&
    rt.totalMessageCount === 0 && rt.createdAt instanceof Date && !isNaN(rt.createdAt), JSON.stringify(rt));

  for (const name of ["jsq-a", "jsq-b", "jsq-c"]) await admin.createQueue(name);
  const names = [];
  let pages = 0;
  for await (const page of admin.listQueues().byPage({ maxPageSize: 2 })) {
    pages++;
    for (const q of page) names.push(q.name);
  }
  check("list in pages", JSON.stringify(names) === JSON.stringify(["jsq", "jsq-a", "jsq-b", "jsq-c"]) && pages === 2,
    `${JSON.stringify(names)} in ${pages} pages`);
  // A feed's entries carry less than an entry answered alone; the
  // properties read from them must be the same.
  const gotJsq = await admin.getQueue("jsq");
  const listedJsq = [];
  for await (const q of admin.listQueues()) if (q.name === "jsq") listedJsq.push(q);
  check("listed as got", listedJsq.length === 1 && JSON.stringify(listedJsq[0]) === JSON.stringify(gotJsq),
    `${JSON.stringify(listedJsq)} against ${JSON.stringify(gotJsq)}`);
  const rts = [];
  for await (const q of admin.listQueuesRuntimeProperties()) rts.push(q.name);
  check("list runtime properties", rts.length === 4, JSON.stringify(rts));

  check("exists", (await admin.queueExists("jsq")) && !(await admin.queueExists("missing")), "wrong answer");
  check("get missing is 404", (await status(() => admin.getQueue("missing"))) === 404, "not 404");

  await admin.deleteQueue("jsq");
  check("delete", !(await admin.queueExists("jsq")), "still there");
  check("delete missing is 404", (await status(() => admin.deleteQueue("jsq"))) === 404, "not 404");

  const ns = await admin.getNamespaceProperties();
  check("namespace", ns.name === "quorumbus" && ns.messagingSku === "Standard", JSON.stringify(ns));

  // Runtime counts after real traffic: 4 sent, 2 scheduled an hour
  // ahead, 1 of the 4 dead-lettered.
  await admin.createQueue("jscount");
  const client = new ServiceBusClient(amqpConnectionString, { retryOptions: { maxRetries: 2, timeoutInMs: 20_000 } });
  const sender = client.createSender("jscount");
  await sender.sendMessages([1, 2, 3, 4].map((n) => ({ body: `m${n}` })));
  await sender.scheduleMessages([{ body: "s1" }, { body: "s2" }], new Date(Date.now() + 3_600_000));
  const receiver = client.createReceiver("jscount", { receiveMode: "peekLock" });
  let [poison] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 5000 });
  for (let i = 0; !poison && i < 5; i++) [poison] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 2000 });
  check("receive one to dead-letter", poison !== undefined, "no message");
  await receiver.deadLetterMessage(poison, { deadLetterReason: "Poison" });
  await client.close();
  let counts;
  for (let i = 0; i < 50; i++) {
    counts = await admin.getQueueRuntimeProperties("jscount");
    if (counts.activeMessageCount === 3 && counts.deadLetterMessageCount === 1 && counts.scheduledMessageCount === 2) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  check("runtime counts after sends", counts.activeMessageCount === 3 && counts.deadLetterMessageCount === 1 &&
    counts.scheduledMessageCount === 2 && counts.totalMessageCount === 6 && counts.transferMessageCount === 0 &&
    counts.sizeInBytes > 0 && counts.accessedAt > counts.createdAt, JSON.stringify(counts));
  const listed = [];
  for await (const q of admin.listQueuesRuntimeProperties()) if (q.name === "jscount") listed.push(q);
  check("listed runtime counts", listed.length === 1 && listed[0].activeMessageCount === 3 &&
    listed[0].deadLetterMessageCount === 1 && listed[0].scheduledMessageCount === 2, JSON.stringify(listed));

  // Forwarding: the client sends a token for the namespace's host in
  // ServiceBusSupplementaryAuthorization (and the DLQ one), which the
  // gateway requires.
  const fwd = await admin.createQueue("jsfwd", { forwardTo: "jscount", forwardDeadLetteredMessagesTo: "jscount" });
  check("create with forwardTo", fwd.forwardTo?.endsWith("jscount") && fwd.forwardDeadLetteredMessagesTo?.endsWith("jscount"),
    JSON.stringify(fwd));
  fwd.maxDeliveryCount = 3;
  const fwdUpdated = await admin.updateQueue(fwd);
  check("update with forwardTo", fwdUpdated.maxDeliveryCount === 3 && fwdUpdated.forwardTo?.endsWith("jscount"),
    JSON.stringify(fwdUpdated));

  // A wrong key is 401, which the client does not retry.
  const wrongKey = connectionString.replace(/SharedAccessKey=[^;]*/, "SharedAccessKey=wrong");
  const stranger = new ServiceBusAdministrationClient(wrongKey, { retryOptions: { maxRetries: 0 } });
  check("wrong key is 401", (await status(() => stranger.getQueueRuntimeProperties("jscount"))) === 401, "not 401");
  check("wrong key cannot create", (await status(() => stranger.createQueue("jsintruder"))) === 401 &&
    !(await admin.queueExists("jsintruder")), "created");

} catch (err) {
  fail("unexpected error", err?.stack ?? String(err));
}
clearTimeout(deadline);
process.exit(0);
