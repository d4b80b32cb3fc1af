// Checks Shared Access Signature rules with the official JavaScript SDK.
// Usage:
//
//   node auth.mjs <host:port> <queue> <listen rule>:<key> <send rule>:<key> <root rule>:<key>
//
// Sends exactly two messages that should arrive (one with the root rule,
// one with the Send rule); every refused send must enqueue nothing. Exits
// 0 when every step behaved as on Azure, 1 with "FAIL <step>: <reason>".
import { ServiceBusClient } from "@azure/service-bus";

const [endpoint, queue, listen, send, root] = process.argv.slice(2);
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
  await refused("Send rule cannot peek", () => sender.createReceiver(queue).peekMessages(1));
  await refused("Send rule cannot receive", () => sender.createReceiver(queue).receiveMessages(1, { maxWaitTimeInMs: 2000 }));
  await sender.close();
  await rootClient.close();
  process.exit(0);
} catch (err) {
  fail("unexpected", err.stack || err);
}
