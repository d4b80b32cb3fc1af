// Checks that a SAS token that expires without renewal ends a receiver,
// with the official JavaScript SDK.
// Usage:
//
//   node expiry.mjs <host:port> <queue> <listen rule>:<key> <root rule>:<key>
//
// Connects with a SharedAccessSignature= connection string holding a
// token of the Listen rule that expires in about 3 s (the SDK cannot
// renew it), receives the one message the root rule sent, then receives
// until the SDK fails, which must be with UnauthorizedAccess and not
// before the token's expiry. Exits 0 when it did, 1 with
// "FAIL <step>: <reason>".
import { createHmac } from "node:crypto";
import { ServiceBusClient } from "@azure/service-bus";

const [endpoint, queue, listen, root] = process.argv.slice(2);
setTimeout(() => fail("timeout", "did not finish within 120 s"), 120_000).unref();

function fail(step, reason) {
  console.error(`FAIL ${step}: ${reason}`);
  process.exit(1);
}

function ok(step) {
  console.log(`ok   ${step}`);
}

// As the SDKs sign: HMAC-SHA256 of the URL-encoded audience, a line feed
// and the expiry.
function token(rule, audience, se) {
  const [name, key] = rule.split(":");
  const sr = encodeURIComponent(audience);
  const sig = encodeURIComponent(createHmac("sha256", key).update(`${sr}\n${se}`).digest("base64"));
  return `SharedAccessSignature sr=${sr}&sig=${sig}&se=${se}&skn=${encodeURIComponent(name)}`;
}

try {
  const [rootName, rootKey] = root.split(":");
  const rootClient = new ServiceBusClient(
    `Endpoint=sb://${endpoint};SharedAccessKeyName=${rootName};SharedAccessKey=${rootKey};UseDevelopmentEmulator=true`);
  await rootClient.createSender(queue).sendMessages({ body: "before-expiry" });
  await rootClient.close();
  ok("root sends");

  const se = Math.floor(Date.now() / 1000) + 3;
  const client = new ServiceBusClient(
    `Endpoint=sb://${endpoint};SharedAccessSignature=${token(listen, `sb://${endpoint}/${queue}`, se)};UseDevelopmentEmulator=true`,
    // The JS SDK retries UnauthorizedError (keys may have been rotated):
    // one attempt keeps the ending quick.
    { retryOptions: { maxRetries: 0, timeoutInMs: 10_000 } });
  const receiver = client.createReceiver(queue, { receiveMode: "receiveAndDelete" });
  let got = [];
  for (let i = 0; i < 5 && got.length === 0; i++) {
    got = await receiver.receiveMessages(1, { maxWaitTimeInMs: 1000 });
  }
  if (got.length !== 1 || got[0].body !== "before-expiry") fail("receive before expiry", `got ${JSON.stringify(got.map((m) => m.body))}`);
  ok("receives before the token expires");

  let err;
  for (let i = 0; i < 60 && !err; i++) {
    try {
      await receiver.receiveMessages(1, { maxWaitTimeInMs: 1000 });
    } catch (e) {
      err = e;
    }
  }
  if (!err) fail("after expiry", "the receiver still works a minute after its token expired");
  if (Date.now() / 1000 < se) fail("after expiry", `failed before the token expired: ${err.code}: ${err.message}`);
  if (err.code !== "UnauthorizedAccess") fail("after expiry", `failed with ${err.code}: ${err.message}, want UnauthorizedAccess`);
  ok(`the receiver ends with UnauthorizedAccess ${(Date.now() / 1000 - se).toFixed(1)} s after the expiry`);
  await client.close();
  process.exit(0);
} catch (err) {
  fail("unexpected", err.stack || err);
}
