// Drives a swarm server with the official OpenAI Node SDK (npm "openai").
// usage: node openai_sdk_check.mjs http://127.0.0.1:PORT
// NODE_PATH must point at a node_modules folder holding the openai package.
import { createRequire } from "node:module";
const require = createRequire(import.meta.url);
const OpenAI = require("openai").default ?? require("openai");

const server = process.argv[2];
const post = async (path, body) => {
  const r = await fetch(server + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status} ${await r.text()}`);
  return r.json();
};
const check = (cond, msg) => { if (!cond) throw new Error("check failed: " + msg); };

const client_uuid = "node-sdk-client";
const claim = await post("/claim_episode", { client_uuid, episode_type: "train", discard_episode_timeout: 60 });
check(claim.success, "claim: " + claim.fail_cause);
const openai = new OpenAI({ baseURL: claim.openai_base_url, apiKey: claim.openai_api_key, maxRetries: 0 });

const models = await openai.models.list();
check(models.data.length === 1 && models.data[0].object === "model", "models.list");

const req = {
  model: models.data[0].id,
  messages: [{ role: "system", content: "be brief" }, { role: "user", content: "hello" }],
  max_tokens: 12, temperature: 0.9, top_p: 0.9, n: 2, seed: 7, logprobs: true, top_logprobs: 2, stop: ["\n\n"],
};
const c = await openai.chat.completions.create(req);
check(c.object === "chat.completion" && c.choices.length === 2, "completion shape");
check(c.choices[0].logprobs.content.length > 0 && c.choices[0].logprobs.content[0].top_logprobs.length === 2, "logprobs");
check(c.usage.total_tokens === c.usage.prompt_tokens + c.usage.completion_tokens, "usage");

const stream = await openai.chat.completions.create({ ...req, n: 1, stream: true, stream_options: { include_usage: true } });
let text = "", chunks = 0, usage = null, finish = null;
for await (const ch of stream) {
  chunks++;
  if (ch.usage) usage = ch.usage;
  for (const choice of ch.choices) {
    if (choice.delta.content) text += choice.delta.content;
    if (choice.finish_reason) finish = choice.finish_reason;
  }
}
check(text === c.choices[0].message.content, `stream text ${JSON.stringify(text)} != ${JSON.stringify(c.choices[0].message.content)}`);
check(usage !== null && finish !== null, "stream usage/finish");

// a wrong key is refused with the SDK's AuthenticationError
let authErr = null;
try {
  await new OpenAI({ baseURL: claim.openai_base_url, apiKey: "sk-wrong", maxRetries: 0 }).chat.completions.create(req);
} catch (e) { authErr = e; }
check(authErr && authErr.status === 401, "wrong key should give 401");

const end = await post("/end_episode", { client_uuid, episode_uuid: claim.episode_uuid, task_id: "sdk",
  workflow_output: { reward: 1.0, is_success: true, metadata: { task_id: "sdk" }, log_metrics: {} } });
check(end.success, "end_episode");
console.log(JSON.stringify({ ok: true, sdk: process.env.OPENAI_SDK_VERSION, chunks, text, finish }));
