// A burst of sends beyond the namespace's credits, with the official
// JavaScript SDK and its default retry policy (fixed, 30 s, 3 retries).
// Usage:
//
//   node throttle.mjs <host:port> <queue> <root rule>:<key> <sends>
//
// Sends <sends> messages at once (bodies m0, m1, ...); every one must
// succeed, the throttled ones after the SDK retried server-busy. The Go
// driver checks each arrived exactly once and that the throttled counter
// moved. Exits 0 when every send succeeded, 1 with "FAIL <step>: <reason>".
import { ServiceBusClient } from "@azure/service-bus";

const [endpoint, queue, root, sends] = process.argv.slice(2);
setTimeout(() => fail("timeout", "did not finish within 150 s"), 150_000).unref();

function fail(step, reason) {
  console.error(`FAIL ${step}: ${reason}`);
  process.exit(1);
}

try {
  const [name, key] = root.split(":");
  const client = new ServiceBusClient(
    `Endpoint=sb://${endpoint};SharedAccessKeyName=${name};SharedAccessKey=${key};UseDevelopmentEmulator=true`);
  const sender = client.createSender(queue);
  const start = Date.now();
  const results = await Promise.allSettled(
    Array.from({ length: Number(sends) }, (_, i) => sender.sendMessages({ body: `m${i}`, messageId: `m${i}` })));
  const failed = results.filter((r) => r.status === "rejected");
  if (failed.length > 0) {
    fail("burst", `${failed.length} sends failed: ${failed.map((r) => `${r.reason.code}: ${r.reason.message}`).join("; ")}`);
  }
  console.log(`ok   ${sends} concurrent sends succeeded in ${((Date.now() - start) / 1000).toFixed(1)} s`);
  await client.close();
  process.exit(0);
} catch (err) {
  fail("unexpected", err.stack || err);
}
