#!/usr/bin/env bash
# A rollout against troupe swarm servers with curl and jq: one episode of
# the planner, then one team episode of the planner and the executor.
set -euo pipefail
PLANNER=${PLANNER:-http://127.0.0.1:8001}
EXECUTOR=${EXECUTOR:-http://127.0.0.1:8002}
CLIENT=$(cat /proc/sys/kernel/random/uuid)   # this client's id; any unique string

claim() { # claim SERVER [TEAM_ID]: prints the claim (episode id, base URL, API key)
  local body
  body=$(jq -n --arg c "$CLIENT" --arg t "${2:-}" '{client_uuid: $c, episode_type: "train", discard_episode_timeout: 600}
    + (if $t == "" then {} else {team_id: $t, team_size: 2} end)')
  local ep
  ep=$(curl -sSf "$1/claim_episode" -H 'Content-Type: application/json' -d "$body")
  jq -e .success <<<"$ep" >/dev/null || { jq -r .fail_cause <<<"$ep" >&2; return 1; }
  echo "$ep"
}

chat() { # chat CLAIM PROMPT: prints the reply (any OpenAI client works here)
  curl -sSf "$(jq -r .openai_base_url <<<"$1")/chat/completions" -H 'Content-Type: application/json' \
    -H "Authorization: Bearer $(jq -r .openai_api_key <<<"$1")" \
    -d "$(jq -n --arg p "$2" '{messages: [{role: "user", content: $p}], max_tokens: 32}')" |
    jq -r '.choices[0].message.content'
}

end() { # end SERVER CLAIM TASK WORKFLOW_OUTPUT
  curl -sSf "$1/end_episode" -H 'Content-Type: application/json' -d "$(jq -n --arg c "$CLIENT" \
    --arg e "$(jq -r .episode_uuid <<<"$2")" --arg t "$3" --argjson o "$4" \
    '{client_uuid: $c, episode_uuid: $e, task_id: $t, workflow_output: $o}')" >/dev/null
}

# One episode: claim, chat, end with a reward.
ep=$(claim "$PLANNER")
reply=$(chat "$ep" "Plan a day in Kyoto.")
end "$PLANNER" "$ep" kyoto "{\"reward\": ${#reply}}"
echo "planner said ${#reply} bytes"

# A team of two: both claim with one team_id; neither trains until both end.
team=$(cat /proc/sys/kernel/random/uuid)
p=$(claim "$PLANNER" "$team")
e=$(claim "$EXECUTOR" "$team")
plan=$(chat "$p" "Plan a day in Kyoto.")
answer=$(chat "$e" "Carry out this plan: $plan")
shared=$([ -n "$answer" ] && echo 1 || echo 0)   # the team's reward
end "$PLANNER" "$p" kyoto "{\"reward_components\": {\"shared\": $shared, \"own\": 0.5}}"
end "$EXECUTOR" "$e" kyoto "{\"reward_components\": {\"shared\": $shared, \"own\": 0.2}}"
echo "team $team ended"
