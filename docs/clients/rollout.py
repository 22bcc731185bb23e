"""A rollout against troupe swarm servers with requests: one episode of the
planner, then one team episode of the planner and the executor."""
import os
import uuid

import requests

PLANNER = os.environ.get("PLANNER", "http://127.0.0.1:8001")
EXECUTOR = os.environ.get("EXECUTOR", "http://127.0.0.1:8002")
CLIENT = str(uuid.uuid4())  # this client's id; any unique string


def claim(server, team=None):
    body = {"client_uuid": CLIENT, "episode_type": "train", "discard_episode_timeout": 600}
    if team:
        body |= {"team_id": team, "team_size": 2}
    r = requests.post(f"{server}/claim_episode", json=body, timeout=60)
    r.raise_for_status()
    ep = r.json()
    if not ep["success"]:
        raise RuntimeError(ep["fail_cause"])  # engine not rolling yet, or full: try again later
    return ep


def chat(ep, prompt):
    # Any OpenAI client works here, e.g. the openai package:
    # OpenAI(base_url=ep["openai_base_url"], api_key=ep["openai_api_key"]).chat.completions.create(...)
    r = requests.post(f"{ep['openai_base_url']}/chat/completions",
                      headers={"Authorization": f"Bearer {ep['openai_api_key']}"},
                      json={"messages": [{"role": "user", "content": prompt}], "max_tokens": 32}, timeout=300)
    r.raise_for_status()
    return r.json()["choices"][0]["message"]["content"]


def end(server, ep, task, **workflow_output):
    r = requests.post(f"{server}/end_episode", json={"client_uuid": CLIENT, "episode_uuid": ep["episode_uuid"],
                                                      "task_id": task, "workflow_output": workflow_output}, timeout=60)
    r.raise_for_status()


# One episode: claim, chat, end with a reward.
ep = claim(PLANNER)
reply = chat(ep, "Plan a day in Kyoto.")
end(PLANNER, ep, "kyoto", reward=len(reply))
print(f"planner said {len(reply)} characters")

# A team of two: both claim with one team_id; neither trains until both end.
team = str(uuid.uuid4())
p, e = claim(PLANNER, team), claim(EXECUTOR, team)
try:
    plan = chat(p, "Plan a day in Kyoto.")
    answer = chat(e, f"Carry out this plan: {plan}")
    shared = 1.0 if answer else 0.0  # the team's reward
    end(PLANNER, p, "kyoto", reward_components={"shared": shared, "own": 0.5})
    end(EXECUTOR, e, "kyoto", reward_components={"shared": shared, "own": 0.2})
except Exception:
    for server, ep in ((PLANNER, p), (EXECUTOR, e)):  # aborting one member discards the team
        requests.post(f"{server}/abort_episode", json={"client_uuid": CLIENT, "episode_uuid": ep["episode_uuid"]}, timeout=60)
    raise
print(f"team {team} ended")
