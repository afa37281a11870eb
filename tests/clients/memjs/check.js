// memjs, the Node client that speaks the binary protocol (with SASL PLAIN when given a user),
// against the server named by HKV_ADDR. Exits non-zero on the first wrong answer.
const memjs = require("memjs");
const assert = require("assert");

async function main() {
  const opts = { retries: 0, timeout: 3 };
  if (process.env.HKV_USER) {
    opts.username = process.env.HKV_USER;
    opts.password = process.env.HKV_PASSWORD;
  }
  const c = memjs.Client.create(process.env.HKV_ADDR, opts);
  assert.strictEqual(await c.set("memjs:a", "hello", { expires: 60 }), true);
  const got = await c.get("memjs:a");
  assert.strictEqual(got.value.toString(), "hello");
  assert.strictEqual((await c.get("memjs:missing")).value, null);
  assert.strictEqual(await c.add("memjs:a", "x"), false);
  assert.strictEqual(await c.replace("memjs:a", "world"), true);
  assert.strictEqual((await c.get("memjs:a")).value.toString(), "world");
  assert.strictEqual(await c.append("memjs:a", "!"), true);
  assert.strictEqual((await c.get("memjs:a")).value.toString(), "world!");
  const inc = await c.increment("memjs:n", 5, { initial: 10 });
  assert.strictEqual(inc.value, 10);
  assert.strictEqual((await c.increment("memjs:n", 5, {})).value, 15);
  assert.strictEqual((await c.decrement("memjs:n", 20, {})).value, 0);
  assert.strictEqual(await c.touch("memjs:a", 100), true);
  assert.strictEqual(await c.delete("memjs:a"), true);
  assert.strictEqual((await c.get("memjs:a")).value, null);
  // (memjs 1.3.2's prepend sends the APPEND opcode, so it is not checked here.)
  const stats = await new Promise((resolve, reject) =>
    c.stats((err, server, s) => (err ? reject(err) : resolve(s)))
  );
  assert.ok(Number(stats.cmd_set) >= 3, JSON.stringify(stats));
  assert.ok(stats.version.startsWith("1.6"));
  await c.flush();
  c.close();
  console.log("memjs: all checks passed");
}

main().catch((e) => {
  console.error("memjs check failed:", e);
  process.exit(1);
});
