// Encodes and decodes with Hugging Face's own JS tokenizer
// (@huggingface/tokenizers), the reference hf_test.go compares HF against.
//
//   node hf_reference.mjs TOKENIZERS_MJS MODEL_DIR < lines
//
// Each input line is a JSON string; each output line is the JSON object
// {"ids": encode(s, {add_special_tokens: false}).ids,
//  "text": decode(ids), "skip": decode(ids, {skip_special_tokens: true})},
// both decodes without clean_up_tokenization_spaces.
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";

const [lib, dir] = process.argv.slice(2);
const { Tokenizer } = await import(pathToFileURL(lib).href);
const read = (name) => JSON.parse(readFileSync(`${dir}/${name}`, "utf8"));
let config = {};
try {
  config = read("tokenizer_config.json");
} catch (e) {
  if (e.code !== "ENOENT") throw e;
}
const tok = new Tokenizer(read("tokenizer.json"), config);
const opts = { clean_up_tokenization_spaces: false };
const out = [];
for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  const ids = tok.encode(JSON.parse(line), { add_special_tokens: false }).ids;
  const dec = (skip) => (ids.length === 0 ? "" : tok.decode(ids, { ...opts, skip_special_tokens: skip }));
  out.push(JSON.stringify({ ids, text: dec(false), skip: dec(true) }));
}
process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
