// A rollout against troupe swarm servers with fetch (Node 18+): one episode
// of the planner, then one team episode of the planner and the executor.
import { randomUUID } from "node:crypto";

const PLANNER = process.env.PLANNER ?? "http://127.0.0.1:8001";
const EXECUTOR = process.env.EXECUTOR ?? "http://127.0.0.1:8002";
const CLIENT = randomUUID(); // this client's id; any unique string

async function post(url, body, key) {
  const headers = { "Content-Type": "application/json" };
  if (key) headers.Authorization = `Bearer ${key}`;
  const r = await fetch(url, { method: "POST", headers, body: JSON.stringify(body) });
  if (!r.ok) throw new Error(`${url}: ${r.status} ${await r.text()}`);
  return r.json();
}

async function claim(server, team) {
  const body = { client_uuid: CLIENT, episode_type: "train", discard_episode_timeout: 600 };
  if (team) Object.assign(body, { team_id: team, team_size: 2 });
  const ep = await post(`${server}/claim_episode`, body);
  if (!ep.success) throw new Error(ep.fail_cause); // engine not rolling yet, or full: try again later
  return ep;
}

async function chat(ep, prompt) { // any OpenAI client works here
  const r = await post(`${ep.openai_base_url}/chat/completions`,
    { messages: [{ role: "user", content: prompt }], max_tokens: 32 }, ep.openai_api_key);
  return r.choices[0].message.content;
}

const end = (server, ep, task, workflow_output) =>
  post(`${server}/end_episode`, { client_uuid: CLIENT, episode_uuid: ep.episode_uuid, task_id: task, workflow_output });

// One episode: claim, chat, end with a reward.
const ep = await claim(PLANNER);
const reply = await chat(ep, "Plan a day in Kyoto.");
await end(PLANNER, ep, "kyoto", { reward: reply.length });
console.log(`planner said ${reply.length} characters`);

// A team of two: both claim with one team_id; neither trains until both end.
const team = randomUUID();
const [p, e] = [await claim(PLANNER, team), await claim(EXECUTOR, team)];
const plan = await chat(p, "Plan a day in Kyoto.");
const answer = await chat(e, `Carry out this plan: ${plan}`);
const shared = answer ? 1 : 0; // the team's reward
await end(PLANNER, p, "kyoto", { reward_components: { shared, own: 0.5 } });
await end(EXECUTOR, e, "kyoto", { reward_components: { shared, own: 0.2 } });
console.log(`team ${team} ended`);
