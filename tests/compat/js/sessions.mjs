// Drives quorumbus's message sessions with the official JavaScript SDK:
// acceptSession, acceptNextSession, receive in order, abandon, session
// state, renew, subscribe. Usage:
//
//   node sessions.mjs "<connection string>" <session queue>
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

async function receiveN(r, n, step) {
  const got = [];
  for (let i = 0; i < 20 && got.length < n; i++) {
    const msgs = await r.receiveMessages(n - got.length, { maxWaitTimeInMs: 2000 });
    got.push(...msgs);
  }
  if (got.length < n) fail(step, `${got.length} of ${n} messages arrived`);
  return got;
}

try {
  await sender.sendMessages([
    { body: "a1", sessionId: "js-a" },
    { body: "a2", sessionId: "js-a" },
    { body: "b1", sessionId: "js-b" },
  ]);
  check("send to sessions", true, "");

  const a = await client.acceptSession(queue, "js-a");
  check("acceptSession", a.sessionId === "js-a" && a.sessionLockedUntilUtc > new Date(),
    `session ${a.sessionId} locked until ${a.sessionLockedUntilUtc}`);

  const first = await receiveN(a, 1, "receive");
  check("receive in order", first[0].body === "a1" && first[0].sessionId === "js-a", `got ${first[0].body} of ${first[0].sessionId}`);
  await a.abandonMessage(first[0]);
  const both = await receiveN(a, 2, "after abandon");
  check("abandoned comes back first", both[0].body === "a1" && both[1].body === "a2" && both[0].deliveryCount === 1,
    `got ${both.map((m) => m.body)} with delivery count ${both[0].deliveryCount}`);
  for (const m of both) await a.completeMessage(m);

  check("new session state is null", (await a.getSessionState()) == null, "state not null");
  await a.setSessionState("kept");
  const state = await a.getSessionState();
  check("session state", state === "kept" || (state && state.toString() === "kept"), `state ${JSON.stringify(state)}`);
  const before = a.sessionLockedUntilUtc;
  await new Promise((r) => setTimeout(r, 20));
  await a.renewSessionLock();
  check("renew session lock", a.sessionLockedUntilUtc > before, `locked until ${a.sessionLockedUntilUtc}, before ${before}`);
  await a.close();

  const next = await client.acceptNextSession(queue);
  check("acceptNextSession", next.sessionId === "js-b", `got session ${next.sessionId}`);
  const got = await new Promise((resolve, reject) => {
    const sub = next.subscribe({
      async processMessage(m) {
        await sub.close();
        resolve(m);
      },
      async processError(args) {
        reject(args.error);
      },
    }, { autoCompleteMessages: false });
  });
  check("subscribe on a session", got.body === "b1", `got ${got.body}`);
  await next.completeMessage(got);
  await next.close();

  const again = await client.acceptSession(queue, "js-a");
  const kept = await again.getSessionState();
  check("state kept while empty", kept === "kept" || (kept && kept.toString() === "kept"), `state ${JSON.stringify(kept)}`);
  await again.close();

  clearTimeout(deadline);
  await client.close();
  console.log("all ok");
  process.exit(0);
} catch (err) {
  fail("unexpected", err && err.stack ? err.stack : String(err));
}
