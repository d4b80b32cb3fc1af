// Drives a subscription's rules with the official JavaScript SDK's rule
// manager (com.microsoft:add-rule, remove-rule and enumerate-rules on the
// subscription's $management node), then checks that sends to the topic
// follow the new rules. Usage:
//
//   node rules.mjs "<connection string>" <topic> <subscription>
//
// The subscription starts with only $Default. Exits 0 when every step
// behaved as Azure Service Bus documents, 1 with "FAIL <step>: <reason>"
// otherwise. A timer ends it.
import { ServiceBusClient } from "@azure/service-bus";

const [connectionString, topic, subscription] = process.argv.slice(2);
const deadline = setTimeout(() => fail("timeout", "did not finish within 120 s"), 120_000);

function fail(step, reason) {
  console.error(`FAIL ${step}: ${reason}`);
  process.exit(1);
}

function check(step, ok, reason) {
  if (!ok) fail(step, reason);
  console.log(`ok   ${step}`);
}

async function refused(step, fn, want) {
  try {
    await fn();
  } catch (err) {
    check(step, want.test(String(err?.message)), `refused, but with ${err?.code}: ${err?.message}`);
    return;
  }
  fail(step, "was accepted");
}

const client = new ServiceBusClient(connectionString, {
  retryOptions: { maxRetries: 1, timeoutInMs: 20_000 },
});

// receiveAll receives and completes until a wait of 1.5 s brings nothing.
async function receiveAll(r) {
  const out = [];
  for (;;) {
    const msgs = await r.receiveMessages(10, { maxWaitTimeInMs: 1500 });
    if (msgs.length === 0) return out;
    for (const m of msgs) await r.completeMessage(m);
    out.push(...msgs);
  }
}

try {
  const rm = client.createRuleManager(topic, subscription);
  const list = async () => {
    const out = [];
    for await (const r of rm.listRules()) out.push(r);
    return out;
  };

  const initial = await list();
  check("a new subscription lists $Default", initial.length === 1 && initial[0].name === "$Default" &&
    initial[0].filter.sqlExpression === "1=1", JSON.stringify(initial));

  await rm.createRule("red", { sqlExpression: "color = 'red'" }, { sqlExpression: "SET tagged = 'yes'" });
  await rm.createRule("corr", { correlationId: "c1", applicationProperties: { kind: "x" } });
  check("add a SQL rule with an action and a correlation rule", true, "");

  await refused("a duplicate rule name is refused",
    () => rm.createRule("RED", { sqlExpression: "1=1" }), /already|exists|409/i);
  await refused("a filter that does not parse is refused with its position",
    () => rm.createRule("bad", { sqlExpression: "color = " }), /position/i);
  await refused("an action that does not parse is refused",
    () => rm.createRule("bad", { sqlExpression: "1=1" }, { sqlExpression: "SET" }), /position|action/i);

  await rm.deleteRule("$Default");
  await refused("removing a rule that is not there is refused",
    () => rm.deleteRule("nope"), /not found|no rule|404|could not be found/i);

  const rules = await list();
  const names = rules.map((r) => r.name).join(",");
  check("list after the changes", names === "corr,red", names);
  const corr = rules.find((r) => r.name === "corr");
  check("the correlation filter comes back", corr.filter.correlationId === "c1" && corr.filter.applicationProperties?.kind === "x",
    JSON.stringify(corr));
  const red = rules.find((r) => r.name === "red");
  check("the SQL filter and action come back", red.filter.sqlExpression === "color = 'red'" &&
    red.action.sqlExpression === "SET tagged = 'yes'", JSON.stringify(red));
  const page = [];
  for await (const p of rm.listRules().byPage({ maxPageSize: 1 })) page.push(p.map((r) => r.name).join(""));
  check("paging with top and skip", page.join("|") === "corr|red", page.join("|"));

  // Rule changes reach the partitions asynchronously: send red probes
  // until one arrives exactly once and tagged (no $Default copy beside it).
  const sender = client.createSender(topic);
  const receiver = client.createReceiver(topic, subscription, { receiveMode: "peekLock" });
  let settled = false;
  for (let i = 0; i < 30 && !settled; i++) {
    await sender.sendMessages({ body: `probe${i}`, applicationProperties: { color: "red" } });
    const got = await receiveAll(receiver);
    settled = got.length === 1 && got[0].applicationProperties?.tagged === "yes";
  }
  check("the partitions follow the new rules", settled, "no probe arrived once and tagged within 30 tries");

  await sender.sendMessages([
    { body: "blue", applicationProperties: { color: "blue" } },
    { body: "c1", correlationId: "c1", applicationProperties: { kind: "x" } },
    { body: "c1y", correlationId: "c1", applicationProperties: { kind: "y" } },
    { body: "red", applicationProperties: { color: "red" } },
  ]);
  const got = await receiveAll(receiver);
  const bodies = got.map((m) => m.body).sort().join(",");
  check("sends follow the rules", bodies === "c1,red", bodies);
  check("the action tagged the red copy only", got.find((m) => m.body === "red").applicationProperties.tagged === "yes" &&
    got.find((m) => m.body === "c1").applicationProperties.tagged === undefined, "");

  clearTimeout(deadline);
  await client.close();
} catch (err) {
  fail("unexpected error", err?.stack ?? String(err));
}
