// Renders templates with Hugging Face's own JavaScript Jinja engine
// (@huggingface/jinja), the reference the Go package is tested against.
//
//   node render.mjs /path/to/hf-jinja/dist/index.js < input.json
//
// input.json is either one case, {"template": "...", "context": {...}},
// whose rendering is written to stdout as is (an error goes to stderr with
// exit status 1), or an array of such cases, answered with a JSON array of
// {"output": "..."} or {"error": "..."} in the same order. A top-level
// "now" (milliseconds since the epoch, or an object {"now": ms, "cases": [...]})
// pins the clock that strftime_now reads; run with TZ=UTC to pin its zone.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const enginePath = process.argv[2];
if (!enginePath) {
	process.stderr.write("usage: node render.mjs /path/to/hf-jinja/dist/index.js < input.json\n");
	process.exit(2);
}
const { Template } = await import(pathToFileURL(enginePath).href);

let input = JSON.parse(readFileSync(0, "utf8"));
let now = null;
if (input && !Array.isArray(input) && Array.isArray(input.cases)) {
	now = input.now ?? null;
	input = input.cases;
} else if (input && !Array.isArray(input) && input.now != null) {
	now = input.now;
}
if (now != null) {
	const RealDate = Date;
	globalThis.Date = class extends RealDate {
		constructor(...args) {
			super(...(args.length ? args : [now]));
		}
		static now() {
			return now;
		}
	};
}

const render = (c) => new Template(c.template).render(c.context ?? {});

if (Array.isArray(input)) {
	const results = input.map((c) => {
		try {
			return { output: render(c) };
		} catch (e) {
			return { error: String(e && e.message !== undefined ? e.message : e) };
		}
	});
	process.stdout.write(JSON.stringify(results));
} else {
	try {
		process.stdout.write(render(input));
	} catch (e) {
		process.stderr.write(String(e && e.message !== undefined ? e.message : e) + "\n");
		process.exit(1);
	}
}
