// Drives topics, subscriptions and rules through quorumbus's management
// API with the official JavaScript admin client
// (ServiceBusAdministrationClient, ATOM over HTTPS). Usage:
//
//   NODE_EXTRA_CA_CERTS=<admin-cert.pem> node admintopics.mjs "<connection string>"
//
// Exits 0 when every step behaved as Azure Service Bus documents, 1 with
// "FAIL <step>: <reason>" otherwise. A timer ends it.
import { ServiceBusAdministrationClient } from "@azure/service-bus";

const [connectionString] = process.argv.slice(2);
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
  const created = await admin.createTopic("jst", { defaultMessageTimeToLive: "PT1H", requiresDuplicateDetection: true });
  check("create topic", created.name === "jst" && created.defaultMessageTimeToLive === "PT1H" &&
    created.requiresDuplicateDetection === true, JSON.stringify(created));
  check("create topic again is 409", (await status(() => admin.createTopic("jst"))) === 409, "no conflict");
  const got = await admin.getTopic("jst");
  got.defaultMessageTimeToLive = "PT2H";
  const updated = await admin.updateTopic(got);
  check("update topic", updated.defaultMessageTimeToLive === "PT2H" && updated.requiresDuplicateDetection === true,
    JSON.stringify(updated));
  for (const name of ["jst-a", "jst-b"]) await admin.createTopic(name);
  const names = [];
  let pages = 0;
  for await (const page of admin.listTopics().byPage({ maxPageSize: 2 })) {
    pages++;
    for (const t of page) names.push(t.name);
  }
  check("list topics in pages", JSON.stringify(names) === JSON.stringify(["jst", "jst-a", "jst-b"]) && pages === 2,
    `${JSON.stringify(names)} in ${pages} pages`);

  const sub = await admin.createSubscription("jst", "s1", { maxDeliveryCount: 3, lockDuration: "PT20S" });
  check("create subscription", sub.subscriptionName === "s1" && sub.topicName === "jst" && sub.maxDeliveryCount === 3 &&
    sub.lockDuration === "PT20S", JSON.stringify(sub));
  await admin.createSubscription("jst", "s2", {
    defaultRuleOptions: { name: "odd", filter: { sqlExpression: "n % 2 = @one", sqlParameters: { "@one": 1 } } },
  });
  const gotSub = await admin.getSubscription("jst", "s1");
  gotSub.maxDeliveryCount = 8;
  gotSub.status = "ReceiveDisabled";
  const updSub = await admin.updateSubscription(gotSub);
  check("update subscription", updSub.maxDeliveryCount === 8 && updSub.status === "ReceiveDisabled", JSON.stringify(updSub));
  const subs = [];
  let subPages = 0;
  for await (const page of admin.listSubscriptions("jst").byPage({ maxPageSize: 1 })) {
    subPages++;
    for (const s of page) subs.push(s.subscriptionName);
  }
  check("list subscriptions in pages", JSON.stringify(subs) === JSON.stringify(["s1", "s2"]) && subPages === 2,
    `${JSON.stringify(subs)} in ${subPages} pages`);
  const srt = await admin.getSubscriptionRuntimeProperties("jst", "s1");
  check("subscription runtime properties", srt.activeMessageCount === 0 && srt.deadLetterMessageCount === 0 &&
    srt.totalMessageCount === 0, JSON.stringify(srt));
  const trt = await admin.getTopicRuntimeProperties("jst");
  check("topic runtime properties", trt.subscriptionCount === 2 && trt.sizeInBytes === 0, JSON.stringify(trt));

  const dflt = await admin.getRule("jst", "s2", "odd");
  check("default rule given", dflt.filter.sqlExpression === "n % 2 = @one" && dflt.filter.sqlParameters["@one"] === 1,
    JSON.stringify(dflt));
  const corr = await admin.createRule("jst", "s1", "corr",
    { correlationId: "c1", subject: "s", applicationProperties: { region: "eu", tier: 2 } },
    { sqlExpression: "SET seen = @v", sqlParameters: { "@v": true } });
  check("create correlation rule", corr.filter.correlationId === "c1" && corr.filter.subject === "s" &&
    corr.filter.applicationProperties.region === "eu" && corr.filter.applicationProperties.tier === 2 &&
    corr.action.sqlExpression === "SET seen = @v", JSON.stringify(corr));
  check("create rule again is 409", (await status(() => admin.createRule("jst", "s1", "corr", { sqlExpression: "1=1" }))) === 409,
    "no conflict");
  check("a filter that does not parse is 400",
    (await status(() => admin.createRule("jst", "s1", "bad", { sqlExpression: "a = = 1" }))) === 400, "accepted");
  corr.filter = { sqlExpression: "region = 'us'" };
  corr.action = {};
  const updRule = await admin.updateRule("jst", "s1", corr);
  check("update rule", updRule.filter.sqlExpression === "region = 'us'", JSON.stringify(updRule));
  const rules = [];
  let rulePages = 0;
  for await (const page of admin.listRules("jst", "s1").byPage({ maxPageSize: 1 })) {
    rulePages++;
    for (const r of page) rules.push(r.name);
  }
  check("list rules in pages", JSON.stringify(rules) === JSON.stringify(["$Default", "corr"]) && rulePages === 2,
    `${JSON.stringify(rules)} in ${rulePages} pages`);
  await admin.deleteRule("jst", "s1", "corr");
  check("delete rule", !(await admin.ruleExists("jst", "s1", "corr")), "still there");

  await admin.deleteSubscription("jst", "s1");
  check("delete subscription", !(await admin.subscriptionExists("jst", "s1")), "still there");
  check("get missing subscription is 404", (await status(() => admin.getSubscription("jst", "s1"))) === 404, "not 404");
  await admin.deleteTopic("jst");
  check("delete topic", !(await admin.topicExists("jst")), "still there");
  check("delete missing topic is 404", (await status(() => admin.deleteTopic("jst"))) === 404, "not 404");
} catch (err) {
  fail("unexpected error", err?.stack ?? String(err));
}
clearTimeout(deadline);
process.exit(0);
