// Entity-level authorization rules through the official JavaScript admin
// client (ServiceBusAdministrationClient): a queue and a topic created
// with rules answer them with their keys, the keys serve the SDK's
// ServiceBusClient per the rules' rights, an update replaces the rules
// (the old key and a dropped rule are refused), and what Azure refuses is
// 400. Usage:
//
//   NODE_EXTRA_CA_CERTS=<admin-cert.pem> node adminauth.mjs "<admin connection string>" <AMQP host:port>
//
// Exits 0 when every step behaved as on Azure, 1 with "FAIL <step>:
// <reason>" otherwise. A timer ends it.
import { randomBytes } from "node:crypto";
import { ServiceBusAdministrationClient, ServiceBusClient } from "@azure/service-bus";

const [connectionString, endpoint] = process.argv.slice(2);
setTimeout(() => fail("timeout", "did not finish within 150 s"), 150_000).unref();

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
const clients = [];

// client connects with a rule's name and key. The JS SDK retries
// UnauthorizedError (keys may have been rotated): one attempt keeps the
// refusals quick.
function client(name, key) {
  const cs = `Endpoint=sb://${endpoint};SharedAccessKeyName=${name};SharedAccessKey=${key};UseDevelopmentEmulator=true`;
  const c = new ServiceBusClient(cs, { retryOptions: { maxRetries: 0, timeoutInMs: 10_000 } });
  clients.push(c);
  return c;
}

function unauthorized(err) {
  const all = err instanceof AggregateError ? err.errors : [err];
  return all.length > 0 && all.every((e) => e.code === "UnauthorizedAccess");
}

// attempt runs fn until it succeeds (want "ok") or is refused as
// unauthorized (want "refused"): a rule reaches the front-ends a moment
// after the admin API answered.
async function attempt(step, want, fn) {
  const deadline = Date.now() + 20_000;
  for (;;) {
    let got, detail;
    try {
      detail = await fn();
      got = "ok";
    } catch (err) {
      if (!unauthorized(err)) fail(step, `${err.code}: ${err.message}`);
      got = "refused";
      detail = err.message;
    }
    if (got === want) {
      console.log(`ok   ${step}`);
      return detail;
    }
    if (Date.now() > deadline) fail(step, `${got}, want ${want}: ${detail}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function send(c, entity, body) {
  const s = c.createSender(entity);
  try {
    await s.sendMessages({ body });
  } finally {
    await s.close();
  }
}

async function receive(c, entity, sub) {
  const r = sub
    ? c.createReceiver(entity, sub, { receiveMode: "receiveAndDelete" })
    : c.createReceiver(entity, { receiveMode: "receiveAndDelete" });
  try {
    // Allowed but empty is null: an allowed receive, not a refusal.
    const msgs = await r.receiveMessages(1, { maxWaitTimeInMs: 5_000 });
    return msgs.length === 1 ? msgs[0].body : null;
  } finally {
    await r.close();
  }
}

const rule = (keyName, accessRights, keys = {}) => ({ claimType: "SharedAccessKey", keyName, accessRights, ...keys });
const azureKey = () => randomBytes(32).toString("base64");

try {
  const senderKey = azureKey();
  const created = await admin.createQueue("jsrules", {
    authorizationRules: [rule("js-reader", ["Listen"]), rule("js-sender", ["Send"], { primaryKey: senderKey })],
  });
  const reader = created.authorizationRules?.find((r) => r.keyName === "js-reader");
  const sender = created.authorizationRules?.find((r) => r.keyName === "js-sender");
  check("create answers the rules", reader && sender && reader.primaryKey?.length === 44 && reader.secondaryKey?.length === 44 &&
    sender.primaryKey === senderKey && reader.accessRights.join() === "Listen" && reader.claimType === "SharedAccessKey",
    JSON.stringify(created.authorizationRules?.map((r) => ({ ...r, primaryKey: !!r.primaryKey, secondaryKey: !!r.secondaryKey }))));
  await admin.createQueue("jsrules-other");

  const got = await admin.getQueue("jsrules");
  check("get answers the same keys", got.authorizationRules?.length === 2 &&
    got.authorizationRules.find((r) => r.keyName === "js-reader")?.primaryKey === reader.primaryKey, "other keys");

  await attempt("the Send rule sends", "ok", () => send(client("js-sender", senderKey), "jsrules", "hello"));
  await attempt("the Send rule cannot receive", "refused", () => receive(client("js-sender", senderKey), "jsrules"));
  await attempt("the Send rule cannot send to another queue", "refused", () => send(client("js-sender", senderKey), "jsrules-other", "x"));
  await attempt("the Listen rule cannot send", "refused", () => send(client("js-reader", reader.primaryKey), "jsrules", "x"));
  const body = await attempt("the Listen rule receives", "ok", () => receive(client("js-reader", reader.secondaryKey), "jsrules"));
  check("what it received", body === "hello", JSON.stringify(body));

  // The update gives the reader new keys and drops the sender.
  const newKey = azureKey();
  got.authorizationRules = [rule("js-reader", ["Listen"], { primaryKey: newKey, secondaryKey: azureKey() })];
  const updated = await admin.updateQueue(got);
  check("update answers the new rules", updated.authorizationRules?.length === 1 && updated.authorizationRules[0].primaryKey === newKey,
    `${updated.authorizationRules?.length} rules`);
  await attempt("the reader's old key after the update", "refused", () => receive(client("js-reader", reader.primaryKey), "jsrules"));
  await attempt("the dropped sender after the update", "refused", () => send(client("js-sender", senderKey), "jsrules", "x"));
  await attempt("the root rule sends", "ok", () => send(client("RootManageSharedAccessKey", "SAS_KEY_VALUE"), "jsrules", "after-update"));
  check("the reader's new key receives",
    (await attempt("the reader's new key", "ok", () => receive(client("js-reader", newKey), "jsrules"))) === "after-update", "another body");

  // A topic's rules serve its subscriptions.
  const topic = await admin.createTopic("jsevents", { authorizationRules: [rule("js-pub", ["Send"]), rule("js-sub", ["Listen"])] });
  await admin.createSubscription("jsevents", "audit");
  const pub = topic.authorizationRules?.find((r) => r.keyName === "js-pub");
  const sub = (await admin.getTopic("jsevents")).authorizationRules?.find((r) => r.keyName === "js-sub");
  check("topic rules", pub?.primaryKey && sub?.primaryKey, JSON.stringify(topic.authorizationRules?.map((r) => r.keyName)));
  await attempt("the topic's Send rule", "ok", () => send(client("js-pub", pub.primaryKey), "jsevents", "event-1"));
  check("the topic's Listen rule on its subscription",
    (await attempt("receive from the subscription", "ok", () => receive(client("js-sub", sub.primaryKey), "jsevents", "audit"))) === "event-1",
    "another body");

  // What Azure refuses.
  for (const [step, rules] of [
    ["Manage alone is 400", [rule("m", ["Manage"])]],
    ["a short key is 400", [rule("k", ["Listen"], { primaryKey: "too-short" })]],
    ["Manage with Listen only is 400", [rule("m", ["Manage", "Listen"])]],
  ]) {
    check(step, (await status(() => admin.createQueue("jsrefused", { authorizationRules: rules }))) === 400, "not 400");
  }
  check("a topic's invalid rule is 400",
    (await status(() => admin.createTopic("jsrefused-topic", { authorizationRules: [rule("m", ["Manage"])] }))) === 400, "not 400");
  check("a refused create left nothing",
    !(await admin.queueExists("jsrefused")) && !(await admin.topicExists("jsrefused-topic")), "it exists");
} catch (err) {
  fail("unexpected", `${err.code ?? ""} ${err.statusCode ?? ""} ${err.message}`);
} finally {
  for (const c of clients) await c.close().catch(() => {});
}
process.exit(0);
