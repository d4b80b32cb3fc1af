// Checks Shared Access Signature rules with the official JavaScript SDK.
// Usage:
//
//   node auth.mjs <host:port> <queue> <listen rule>:<key> <send rule>:<key> <root rule>:<key> <other queue>
//
// The Send rule is an entity rule of <queue>. Sends exactly two messages
// that should arrive (one with the root rule, one with the Send rule);
// every refused send must enqueue nothing, on <queue> and on <other
// queue> (which the Go driver checks stays empty). Exits 0 when every
// step behaved as on Azure, 1 with "FAIL <step>: <reason>".
import { createHmac } from "node:crypto";
import { ServiceBusClient } from "@azure/service-bus";

const [endpoint, queue, listen, send, root, other] = process.argv.slice(2);
setTimeout(() => fail("timeout", "did not finish within 120 s"), 120_000).unref();

function fail(step, reason) {
  console.error(`FAIL ${step}: ${reason}`);
  process.exit(1);
}

function ok(step) {
  console.log(`ok   ${step}`);
}

function client(rule) {
  const [name, key] = rule.split(":");
  const cs = `Endpoint=sb://${endpoint};SharedAccessKeyName=${name};SharedAccessKey=${key};UseDevelopmentEmulator=true`;
  // The JS SDK retries UnauthorizedError (keys may have been rotated):
  // one attempt keeps the refusals quick.
  return new ServiceBusClient(cs, { retryOptions: { maxRetries: 0, timeoutInMs: 10_000 } });
}

// sasClient connects with a SharedAccessSignature= connection string: a
// token the caller made, which the SDK puts on $cbs as it is for every
// audience (it cannot renew it). The token is made as the SDKs make
// theirs: HMAC-SHA256 of the URL-encoded audience, a line feed and the
// expiry.
function sasClient(rule, entity, ttlSeconds) {
  const [name, key] = rule.split(":");
  const sr = encodeURIComponent(`sb://${endpoint}/${entity}`);
  const se = Math.floor(Date.now() / 1000) + ttlSeconds;
  const sig = encodeURIComponent(createHmac("sha256", key).update(`${sr}\n${se}`).digest("base64"));
  const token = `SharedAccessSignature sr=${sr}&sig=${sig}&se=${se}&skn=${encodeURIComponent(name)}`;
  const cs = `Endpoint=sb://${endpoint};SharedAccessSignature=${token};UseDevelopmentEmulator=true`;
  return new ServiceBusClient(cs, { retryOptions: { maxRetries: 0, timeoutInMs: 10_000 } });
}

async function refused(step, fn) {
  try {
    await fn();
  } catch (err) {
    const all = err instanceof AggregateError ? err.errors : [err];
    if (all.length > 0 && all.every((e) => e.code === "UnauthorizedAccess")) {
      ok(step);
      return;
    }
    fail(step, `refused with ${all.map((e) => `${e.code}: ${e.message}`).join("; ")}`);
  }
  fail(step, "succeeded");
}

async function receiveOne(r, step) {
  for (let i = 0; i < 10; i++) {
    const msgs = await r.receiveMessages(1, { maxWaitTimeInMs: 2000 });
    if (msgs.length > 0) return msgs[0];
  }
  fail(step, "no message arrived");
}

try {
  const [rootName] = root.split(":");
  const wrong = client(`${rootName}:not-the-key`);
  await refused("wrong key cannot send", () => wrong.createSender(queue).sendMessages({ body: "wrong" }));
  await wrong.close();

  const rootClient = client(root);
  await rootClient.createSender(queue).sendMessages({ body: "from-root" });
  ok("root sends");

  const listener = client(listen);
  await refused("Listen rule cannot send", () => listener.createSender(queue).sendMessages({ body: "from-listener" }));
  const lr = listener.createReceiver(queue, { receiveMode: "peekLock" });
  const m = await receiveOne(lr, "Listen rule receives");
  if (m.body !== "from-root") fail("Listen rule receives", `got ${JSON.stringify(m.body)}`);
  await lr.completeMessage(m);
  ok("Listen rule receives and completes");
  await listener.close();

  const sender = client(send);
  await sender.createSender(queue).sendMessages({ body: "from-sender" });
  ok("Send rule sends");
  await refused("Send rule of one queue cannot send to another", () => sender.createSender(other).sendMessages({ body: "misplaced-rule" }));
  await refused("Send rule cannot peek", () => sender.createReceiver(queue).peekMessages(1));
  await refused("Send rule cannot receive", () => sender.createReceiver(queue).receiveMessages(1, { maxWaitTimeInMs: 2000 }));
  await sender.close();

  // A token signed for <queue> (what an owner hands out instead of a key)
  // sends there and is refused on <other>.
  const tokenClient = sasClient(send, queue, 600);
  await tokenClient.createSender(queue).sendMessages({ body: "from-token" });
  ok("SAS token for the queue sends there");
  await refused("SAS token for the queue cannot send to another", () => tokenClient.createSender(other).sendMessages({ body: "misplaced-token" }));
  await tokenClient.close();
  await rootClient.close();
  process.exit(0);
} catch (err) {
  fail("unexpected", err.stack || err);
}
