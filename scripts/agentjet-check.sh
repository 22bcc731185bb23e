#!/usr/bin/env bash
# scripts/agentjet-check.sh — runs AgentJet's own swarm client, unchanged,
# against `troupe swarm serve`.
#
#   bash scripts/agentjet-check.sh /path/to/AgentJet
#
# The argument (or $AGENTJET_DIR) is an AgentJet checkout (modelscope/AgentJet
# on GitHub; checked with commit c68c154 of 2026-05-26): at least
# ajet/tuner_lib/experimental/swarm_client.py and what it imports. Nothing of
# AgentJet is in this repository, so without it the script prints
# "skipped: ..." and exits 0; likewise when a Python dependency is missing.
#
# Python: python3 with pydantic 2, PyYAML and requests; httpx, loguru and
# omegaconf from the interpreter or from Debian (apt-get install -y
# python3-httpx python3-loguru python3-omegaconf), used through a folder of
# links so that Debian's pydantic 1 or antlr4 never shadow the interpreter's.
# Three packages that Debian lacks get stand-ins, and only when the
# interpreter cannot import the real one (none of them is on the client's
# HTTP path):
#   beast_logger  register_console() does nothing, print_dict() prints the
#                 dict (AgentJet's console pretty-printer);
#   openai        the two base classes as_oai_baseurl_apikey.py subclasses at
#                 import (openai.resources.chat.chat.AsyncChat,
#                 openai.resources.completions.AsyncCompletions); the chat
#                 completions themselves go over plain HTTP (requests) to the
#                 base_url and api_key the client returns, as the SDK would;
#   hydra         initialize() + compose() for AgentJetJob's YAML: a flat
#                 defaults list merged in order with OmegaConf.merge.
#
# It builds ./cmd/troupe (or takes the binary $TROUPE_BIN), then runs the
# driver (written below) twice:
#   (a) plain: the client is given http://127.0.0.1:PORT;
#   (b) TROUPE_ADMIN_TOKEN set, the client given http://127.0.0.1:PORT/t/TOKEN.
# The driver syncs an AgentJetJob config, stops and starts the engine, reads
# the experiment dir, claims 2 tasks x 2 episodes under a throttle policy
# (one chat streamed), holds back a third task by the throttle policy until
# the training step, aborts an episode, ends an eval episode, reads the pool
# and the episode buffer, then switches to
# rollout_until_any_client_agree_sync_weight and calls agree_sync_weight.
# A client-side error is a log record of level ERROR or above from AgentJet's
# code, an exception from a client call, or a call that does not return
# within its deadline; wrong answers are counted as failed checks. Exit 0
# when both runs have neither. With $AGENTJET_CHECK_LOGS set, each run's
# server log, client log and result line are copied there.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
aj="${1:-${AGENTJET_DIR:-}}"
if [ -z "$aj" ] || [ ! -f "$aj/ajet/tuner_lib/experimental/swarm_client.py" ]; then
	echo "skipped: no AgentJet checkout (usage: $0 /path/to/AgentJet; needs ajet/tuner_lib/experimental/swarm_client.py)"
	exit 0
fi
aj="$(cd "$aj" && pwd)"
py="${PYTHON:-python3}"
if ! command -v "$py" >/dev/null; then
	echo "skipped: no $py"
	exit 0
fi
work="$(mktemp -d /tmp/agentjet-check.XXXXXX)"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	rm -rf "$work"
}
trap cleanup EXIT

# The interpreter's own packages first; Debian's only for what it lacks.
has() { "$py" -c "import $1" 2>/dev/null; }
if ! "$py" -c 'import pydantic, sys; sys.exit(int(pydantic.VERSION.split(".")[0]) < 2)' 2>/dev/null; then
	echo "skipped: $py has no pydantic 2 (AgentJet's models use model_dump/model_validate)"
	exit 0
fi
for m in yaml requests; do
	has "$m" || { echo "skipped: $py cannot import $m"; exit 0; }
done
deb=/usr/lib/python3/dist-packages
mkdir -p "$work/deps" "$work/stubs"
link() { # link <module>: Debian's copy of module, if the interpreter lacks it
	has "$1" && return 0
	[ -e "$deb/$1" ] || { echo "skipped: $py cannot import $1 and Debian's package is not installed (apt-get install -y python3-httpx python3-loguru python3-omegaconf)"; exit 0; }
	ln -s "$deb/$1" "$work/deps/$1"
}
for m in httpx httpcore h11 anyio sniffio rfc3986 idna certifi loguru; do link "$m"; done
if ! has omegaconf; then
	link omegaconf
	# Debian's omegaconf needs Debian's antlr4 runtime (4.9), not a newer one.
	[ -e "$deb/antlr4" ] && ln -sfn "$deb/antlr4" "$work/deps/antlr4"
fi
stubbed=()
if ! has beast_logger; then
	stubbed+=(beast_logger)
	mkdir -p "$work/stubs/beast_logger"
	cat >"$work/stubs/beast_logger/__init__.py" <<'EOF'
"""Stand-in for the beast_logger package (not in Debian): AgentJet's swarm
client only calls register_console() and print_dict()."""
import sys


def register_console(*args, **kwargs):
    return None


def print_dict(d, mod=None, header=None, **kwargs):
    if header:
        print(f"== {header}", file=sys.stderr)
    for k, v in dict(d).items():
        print(f"   {k}: {v}", file=sys.stderr)
EOF
fi
if ! has openai; then
	stubbed+=(openai)
	mkdir -p "$work/stubs/openai/resources/chat"
	cat >"$work/stubs/openai/__init__.py" <<'EOF'
"""Stand-in for the openai package (not in Debian): AgentJet's
as_oai_baseurl_apikey module subclasses these two classes at import time;
the swarm client never instantiates them."""
EOF
	: >"$work/stubs/openai/resources/__init__.py"
	: >"$work/stubs/openai/resources/chat/__init__.py"
	printf 'class AsyncChat:\n    def __init__(self, client):\n        self._client = client\n' >"$work/stubs/openai/resources/chat/chat.py"
	printf 'class AsyncCompletions:\n    def __init__(self, client):\n        self._client = client\n' >"$work/stubs/openai/resources/completions.py"
fi
if ! has hydra; then
	stubbed+=(hydra)
	mkdir -p "$work/stubs/hydra"
	printf 'class MissingConfigException(Exception):\n    pass\n' >"$work/stubs/hydra/errors.py"
	cat >"$work/stubs/hydra/__init__.py" <<'EOF'
"""Stand-in for hydra-core (not in Debian) covering what AgentJet's
config_utils uses: initialize(config_path) + compose(config_name) on a
config whose flat `defaults` list names files found in hydra.searchpath,
merged in list order with OmegaConf.merge (`_self_` = the file itself,
without its defaults and hydra keys) — Hydra's own semantics for a flat
defaults list. Interpolations stay unresolved, as in Hydra's compose."""
import contextlib
import inspect
import os

from omegaconf import OmegaConf

from hydra import errors

_config_dir = []


@contextlib.contextmanager
def initialize(config_path=None, version_base=None, job_name=None):
    caller = inspect.stack()[2].filename
    base = os.path.dirname(os.path.abspath(caller))
    _config_dir.append(os.path.normpath(os.path.join(base, config_path or ".")))
    try:
        yield
    finally:
        _config_dir.pop()


def _find(name, dirs):
    for d in dirs:
        for cand in (os.path.join(d, name), os.path.join(d, name + ".yaml")):
            if os.path.isfile(cand):
                return cand
    raise errors.MissingConfigException(f"cannot find config {name!r} in {dirs}")


def compose(config_name=None, overrides=None, return_hydra_config=False):
    if overrides:
        raise NotImplementedError("overrides are not supported by this stand-in")
    primary_dir = _config_dir[-1]
    path = _find(config_name, [primary_dir])
    raw = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    search = [primary_dir]
    for p in (raw.get("hydra") or {}).get("searchpath") or []:
        p = p[len("file://"):] if p.startswith("file://") else p
        search.append(os.path.abspath(p))
    defaults = raw.pop("defaults", None) or ["_self_"]
    raw.pop("hydra", None)
    if "_self_" not in defaults:
        defaults = list(defaults) + ["_self_"]
    cfg = OmegaConf.create({})
    for d in defaults:
        if d == "_self_":
            cfg = OmegaConf.merge(cfg, OmegaConf.create(raw))
        elif isinstance(d, str):
            cfg = OmegaConf.merge(cfg, OmegaConf.load(_find(d, search)))
        else:
            raise NotImplementedError(f"defaults entry {d!r} is not supported by this stand-in")
    return cfg
EOF
fi
export PYTHONPATH="$work/stubs:$work/deps:$aj"
if ! out="$(cd "$aj" && "$py" -c 'from ajet.tuner_lib.experimental.swarm_client import SwarmClient; from ajet.copilot.job import AgentJetJob' 2>&1)"; then
	echo "skipped: AgentJet's client does not import here:"
	echo "$out" | tail -5
	exit 0
fi
cat >"$work/driver.py" <<'EOF'
"""Drive a troupe swarm server with AgentJet's own SwarmClient.

Usage: python3 driver.py SERVER_URL [ADMIN_TOKEN]

SERVER_URL is what the client is given (http://127.0.0.1:PORT or
http://127.0.0.1:PORT/t/TOKEN). Every log record of level ERROR or above
that AgentJet's code emits, and every exception a client call raises, is a
client-side error; WARNING records are listed with their text. A wrong
answer (a check) is counted apart. Exit status 0 only when both are zero.
"""
import json
import sys
import threading
import time

import requests
from loguru import logger

from ajet.copilot.job import AgentJetJob
from ajet.schema.task import Task, WorkflowOutput
from ajet.tuner_lib.experimental.interchange_utils import SwarmThrottlePolicy
from ajet.tuner_lib.experimental.swarm_client import SwarmClient

server_url = sys.argv[1].rstrip("/")
admin_token = sys.argv[2] if len(sys.argv) > 2 else ""

errors, warnings, failed_checks, steps = [], [], [], []


def sink(message):
    r = message.record
    if r["level"].no >= 40:
        errors.append(f"{r['level'].name} {r['name']}:{r['line']}: {r['message']}")
    elif r["level"].no == 30:
        warnings.append(f"{r['name']}:{r['line']}: {r['message']}")


logger.remove()
logger.add(sys.stderr, level="INFO", format="{time:HH:mm:ss.SSS} {level: <8} {name}:{line} {message}")
logger.add(sink, level="WARNING")


def step(name, fn, *args, **kwargs):
    """Run one client call; an exception is a client-side error."""
    t0 = time.time()
    try:
        out = fn(*args, **kwargs)
    except BaseException as e:  # noqa: BLE001 - every exception counts
        errors.append(f"EXCEPTION in {name}: {type(e).__name__}: {e}")
        steps.append((name, "EXCEPTION", time.time() - t0))
        return None
    steps.append((name, "ok", time.time() - t0))
    return out


def check(what, ok, detail=""):
    if not ok:
        failed_checks.append(f"{what}: {detail}")
    print(f"CHECK {'ok  ' if ok else 'FAIL'} {what} {detail}", file=sys.stderr)


def with_deadline(name, seconds, fn, *args, **kwargs):
    """Run a blocking client call in a thread; not returning in time is an error."""
    box = {}

    def run():
        box["out"] = step(name, fn, *args, **kwargs)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        errors.append(f"TIMEOUT: {name} did not return within {seconds}s")
        return None
    return box.get("out")


def chat(base_url, api_key, content, stream=False):
    """OpenAI chat completion by plain HTTP (the openai package is not
    installed): the same request the SDK sends to base_url + /chat/completions."""
    chat.seed += 1  # distinct samples, so that a GRPO group has a gradient
    body = {"model": "agentjet-model", "messages": [{"role": "user", "content": content}],
            "max_tokens": 8, "temperature": 1.0, "seed": chat.seed}
    if stream:
        body["stream"] = True
    r = requests.post(base_url.rstrip("/") + "/chat/completions", json=body, timeout=60,
                      headers={"Authorization": f"Bearer {api_key}"}, stream=stream)
    if r.status_code != 200:
        raise RuntimeError(f"chat {r.status_code}: {r.text[:300]}")
    if not stream:
        j = r.json()
        return j["choices"][0]["message"]["content"], j
    text, done = "", False
    # Lines split on bytes as the OpenAI SDK's SSE decoder does: str lines
    # would also split at U+0085 or U+2028 inside a JSON string.
    for raw in r.iter_lines():
        line = raw.decode("utf-8")
        if not line.startswith("data: "):
            continue
        data = line[len("data: "):]
        if data == "[DONE]":
            done = True
            break
        j = json.loads(data)
        if "error" in j:
            raise RuntimeError(f"stream error event: {j['error']}")
        for c in j.get("choices", []):
            text += (c.get("delta") or {}).get("content") or ""
    if not done:
        raise RuntimeError("stream ended without [DONE]")
    return text, None


chat.seed = 0


def episode(client, task_id, reward, episode_type="train", throttle=None, stream=False):
    claimed = step(f"begin_episode({task_id},{episode_type})", client.begin_episode,
                   discard_episode_timeout=120, episode_type=episode_type, throttle_policy=throttle)
    if not claimed:
        return None
    uuid, oai = claimed
    check("base_url keeps the client's server URL", oai.base_url.startswith(server_url + "/"), oai.base_url)
    out = step(f"chat({task_id})", chat, oai.base_url, oai.api_key, f"task {task_id}: say something", stream)
    if out is not None:
        check("chat answered text", isinstance(out[0], str), repr(out[0])[:40])
    check("can_continue_episode while open", step("can_continue_episode", client.can_continue_episode, uuid) is True)
    return uuid


def wait_step(client, target, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        status, js = client.get_engine_status()
        if js.get("global_step", 0) >= target and status == "ENGINE.ROLLING":
            return True
        time.sleep(0.5)
    return False


if admin_token:
    root = server_url.split("/t/")[0]
    r = requests.post(root + "/stop_engine", json={}, timeout=10)
    check("without the token an admin endpoint is refused", r.status_code == 401, str(r.status_code))
    r = requests.post(root + "/t/wrong-token/stop_engine", json={}, timeout=10)
    check("a wrong /t/<token> is refused", r.status_code == 401, str(r.status_code))

client = SwarmClient(server_url)
status, js = client.get_engine_status()
print(f"initial engine status {status} {js}", file=sys.stderr)
check("engine status readable", status.startswith("ENGINE.") and status != "ENGINE.CANNOT_CONNECT", status)

# Phase 1: rollout_until_finish_enough_tasks, 2 tasks x 2 repeats, with the throttle policy.
job = AgentJetJob(batch_size=2, num_repeat=2, swarm_mode_sample_collection_method="rollout_until_finish_enough_tasks",
                  experiment_name="agentjet-check")
if status != "ENGINE.OFFLINE":
    step("stop_engine", client.stop_engine)
step("sync_train_config", client.sync_train_config, job)
step("start_engine", client.start_engine)
status, js = client.get_engine_status()
check("engine rolling after start_engine", status == "ENGINE.ROLLING", status)
step0 = js.get("global_step", 0)

exp_dir = step("server_experiment_dir", client.server_experiment_dir)
direct = requests.get(server_url + "/get_server_experiment_dir", timeout=10).json().get("server_experiment_dir")
check("server_experiment_dir is the server's (not the client's fallback)", exp_dir == direct and exp_dir not in (None, "saved_experiments"), repr(exp_dir))


def policy(task_id):
    return SwarmThrottlePolicy(ratio=1.0, expected_batch_size=2, expected_num_repeat=2, current_task_id=task_id)


open_eps = []
for t in ("task-0", "task-1"):
    for r in range(2):
        u = episode(client, t, reward=float(r), throttle=policy(t), stream=(r == 1))
        if u:
            open_eps.append((t, u, float(r)))

pool = step("get_rollout_stat", client.get_rollout_stat)
if pool is not None:
    check("pool lists the running episodes", pool.running_episode_details is not None and len(pool.running_episode_details) == 4,
          str(pool.running_episode_details)[:200])
buf = step("get_episode_buffer", client.get_episode_buffer)
check("episode buffer holds the open episodes", buf is not None and {e.episode_uuid for e in buf} >= {u for _, u, _ in open_eps},
      str([e.episode_uuid for e in buf or []]))

# task-2 would be a third unique task while the batch (2 tasks) is full: throttled
# until the training step empties the pool.
third = {}


def claim_third():
    third["out"] = step("begin_episode(task-2, throttled)", client.begin_episode, discard_episode_timeout=120,
                        episode_type="train", throttle_policy=policy("task-2"))


th = threading.Thread(target=claim_third, daemon=True)
th.start()
time.sleep(5)
check("third task is held back by the throttle policy while the batch is full", th.is_alive() and "out" not in third)

for t, u, rew in open_eps:
    step(f"end_episode({t})", client.end_episode, Task(task_id=t), u, WorkflowOutput(reward=rew))
check("a training step ran after 2 tasks x 2 episodes", wait_step(client, step0 + 1), f"global_step {client.get_global_step()}")

th.join(60)
check("throttled claim proceeds after the step", not th.is_alive() and third.get("out") is not None)
if third.get("out"):
    u3, oai3 = third["out"]
    step("chat(task-2)", chat, oai3.base_url, oai3.api_key, "task-2")
    step("abort_episode", client.abort_episode, u3)
    check("aborted episode cannot continue", step("can_continue_episode(aborted)", client.can_continue_episode, u3) is False)
    step("abort_episode (again, idempotent)", client.abort_episode, u3)

# eval episode: never trains
ue = episode(client, "eval-0", reward=1.0, episode_type="eval")
if ue:
    step("end_episode(eval)", client.end_episode, Task(task_id="eval-0"), ue, WorkflowOutput(reward=1.0))
pool = step("get_rollout_stat", client.get_rollout_stat)
if pool is not None:
    check("eval episode not in the training pool", "eval-0" not in pool.completed_tasks_details, str(pool.completed_tasks_details))
step("print_rollout_stat", client.print_rollout_stat)

# Phase 2: rollout_until_any_client_agree_sync_weight and agree_sync_weight.
job2 = AgentJetJob(batch_size=2, num_repeat=2, swarm_mode_sample_collection_method="rollout_until_any_client_agree_sync_weight",
                   experiment_name="agentjet-check-agree")
step("stop_engine", client.stop_engine)
step("sync_train_config(agree)", client.sync_train_config, job2)
step("start_engine", client.start_engine)
g0 = client.get_global_step()
ua = episode(client, "task-a", reward=1.0)
if ua:
    step("end_episode(task-a)", client.end_episode, Task(task_id="task-a"), ua, WorkflowOutput(reward=1.0))
ub = episode(client, "task-a", reward=0.0)
if ub:
    step("end_episode(task-a)", client.end_episode, Task(task_id="task-a"), ub, WorkflowOutput(reward=0.0))
agreed = with_deadline("agree_sync_weight", 60, client.agree_sync_weight)
check("agree_sync_weight registered", agreed is True, repr(agreed))
check("a training step ran after the agreement", wait_step(client, g0 + 1), f"global_step {client.get_global_step()}")

print("\n== steps", file=sys.stderr)
for name, res, dt in steps:
    print(f"   {res:9s} {dt:6.2f}s {name}", file=sys.stderr)
print("== warnings (AgentJet's own log lines at WARNING)", file=sys.stderr)
for w in warnings:
    print("   " + w, file=sys.stderr)
print("== client-side errors", file=sys.stderr)
for e in errors:
    print("   " + e, file=sys.stderr)
print("== failed checks", file=sys.stderr)
for f in failed_checks:
    print("   " + f, file=sys.stderr)
print(f"RESULT calls={len(steps)} client_errors={len(errors)} warnings={len(warnings)} failed_checks={len(failed_checks)}")
sys.exit(0 if not errors and not failed_checks else 1)
EOF

troupe="${TROUPE_BIN:-$work/troupe}"
if [ -z "${TROUPE_BIN:-}" ]; then
	(cd "$root" && go build -o "$troupe" ./cmd/troupe) || { echo "FAIL: go build ./cmd/troupe"; exit 1; }
fi
freeport() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

echo "AgentJet: $aj ($(git -C "$aj" rev-parse --short HEAD 2>/dev/null || echo 'not a git checkout'))"
echo "python: $("$py" -c 'import sys, pydantic, httpx, loguru, yaml, omegaconf, requests; print(sys.version.split()[0], "pydantic", pydantic.VERSION, "httpx", httpx.__version__, "loguru", loguru.__version__, "PyYAML", yaml.__version__, "omegaconf", omegaconf.__version__, "requests", requests.__version__)')"
echo "stand-ins: ${stubbed[*]:-none}"

status=0
run() { # run <name> <admin token or empty>
	local name="$1" token="$2" port dir url
	port="$(freeport)"
	dir="$work/$name"
	mkdir -p "$dir"
	TROUPE_ADMIN_TOKEN="$token" "$troupe" swarm serve --autostart --port "$port" --checkpoint-dir "$dir/run" >"$dir/server.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do
		curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
		sleep 0.1
	done
	url="http://127.0.0.1:$port"
	[ -n "$token" ] && url="$url/t/$token"
	(cd "$aj" && timeout 600 "$py" "$work/driver.py" "$url" $token) >"$dir/result.txt" 2>"$dir/client.log"
	local rc=$?
	echo "== ($name) client given ${url//$token/<token>}: $(tail -1 "$dir/result.txt")"
	sed -n '/^== warnings/,$p' "$dir/client.log" | sed 's/^/   /'
	[ $rc -eq 0 ] || status=1
	kill "${pids[-1]}" 2>/dev/null
	wait "${pids[-1]}" 2>/dev/null
	if [ -n "${AGENTJET_CHECK_LOGS:-}" ]; then
		mkdir -p "$AGENTJET_CHECK_LOGS/$name" && cp "$dir"/*.log "$dir/result.txt" "$AGENTJET_CHECK_LOGS/$name/"
	fi
}
run a-plain ""
run b-token "ajtok-$("$py" -c 'import secrets; print(secrets.token_hex(12))')"
exit $status
