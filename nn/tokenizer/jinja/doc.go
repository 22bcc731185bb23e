// Package jinja renders Hugging Face chat templates — the Jinja
// chat_template of a tokenizer_config.json — exactly as Hugging Face's own
// JavaScript engine, @huggingface/jinja, renders them.
//
// Pretrained checkpoints (Qwen3, Llama 3) define their prompt format as a
// Jinja template. transformers renders it with Python's Jinja2
// (trim_blocks, lstrip_blocks, a raise_exception global, strftime_now, a
// tojson that keeps non-ASCII text); @huggingface/jinja is the port of that
// subset that transformers.js uses, and it is the reference here: the tests
// render the real Qwen3, Llama 3 and Llama 3.2 templates and a table of
// small templates with both engines and compare the bytes.
//
// # Usage
//
//	out, err := jinja.RenderChat(cfg.ChatTemplate, jinja.ChatInput{
//		Messages:            []map[string]any{{"role": "user", "content": "Hi"}},
//		AddGenerationPrompt: true,
//		Extra:               map[string]any{"enable_thinking": false},
//	})
//
// Parse compiles a template once (syntax errors are *SyntaxError with line
// and column); Template.Render evaluates it with arbitrary variables and
// Template.RenderChat with the variables transformers passes. A parsed
// Template may be rendered from several goroutines at once. A call of
// raise_exception(msg) makes rendering fail with an *Exception carrying
// msg; other evaluation failures (unknown filter, type errors) are
// *RenderError with the position of the failing expression. Nothing a
// template or its variables contain makes the package panic.
//
// # Limits
//
// A chat template comes with a model directory, which may be hostile. A
// render runs within Limits: the bytes of output, the work (bytes read and
// written by every string operation, with evaluation steps), and the
// memory of the strings and lists it makes; RenderContext and
// RenderChatContext take them with a context.Context, whose cancellation
// or deadline stops the render. Past a limit, or past the fixed bounds on
// one string, one list and macro recursion, rendering fails with a
// *BudgetError naming the limit and its value (errors.Is(err, ErrBudget));
// Render and RenderChat use the defaults, which leave room for the real
// templates with 128 tools and a conversation of 1 MiB.
//
// # Values and key order
//
// Templates see JSON-shaped values: none, booleans, integers, floats,
// strings, lists and mappings. Mappings keep insertion order, because
// templates print them with tojson (a tool's JSON schema, a tool call's
// arguments) and the order is part of the prompt the model was trained on.
// ParseJSON decodes JSON into *Map values that keep the order of the text;
// plain Go maps, which have none, are read in sorted key order (with the
// get_json_schema order for ChatInput.Tools, see there). Mappings with keys
// that look like array indices ("0", "1") are an exception: JavaScript puts
// such keys first, Python and this package keep them where they were.
//
// # Semantics
//
// The package follows @huggingface/jinja 0.5.13 where it differs from
// Python's Jinja2, since that is what is checked: == compares as
// JavaScript's == does (so 1 == 1.0 and "1" == 1), a number with an
// integral value is an integer as JSON.parse makes it (a tool-call
// argument of 2.0 serialises as 2, where Python keeps 2.0), booleans print
// as true and false, lists and mappings print as JSON, the length of a string
// counts UTF-16 code units, str.strip/lstrip/rstrip ignore their argument
// and strip whitespace (Qwen3's reasoning_content.strip('\n') therefore
// also drops spaces, where Python would keep them), string comparison with
// < is an error, and
// strftime_now knows %Y %m %d %b %B %H %M (English month names, local
// time). The supported statements are if/elif/else, for (with else, loop
// filters, tuple unpacking, loop.index0, first, last, previtem, nextitem,
// …), set (including namespace attributes and {% set %} blocks), macro,
// call, filter, break and continue; expressions include slicing with
// negative steps, inline if/else, in/not in, ~, the str and dict methods
// and the filters and tests of the JS port (tojson with indent,
// ensure_ascii, sort_keys and separators; trim, length, items, default,
// join, map, selectattr, sort, …).
//
// A few corners differ from the JS port on purpose, mostly where it fails
// on a JavaScript error rather than a template error: first and last of an
// empty list are undefined, as in Jinja2 (the JS port crashes on most uses
// of its result); a tuple is a list, so it prints and serialises as one and
// unpacks in a for loop (the JS port rejects all three); negative zero is
// the integer 0 (the JS port keeps -0, which only shows as "-0.0" after a
// float filter); tojson's sort_keys orders keys by code unit, as Python
// does (the JS port uses localeCompare). A randomised differential test
// (TestRandomTemplatesMatchJS) keeps everything else in step with the JS
// port.
//
// # Tests
//
// go test runs scripts/fetch-hf-refs.sh (pinned, sha256-verified npm
// packages into data/hf) and drives the JS engine through
// testdata/render.mjs with node; without node, npm or network those
// comparisons are skipped with the reason, and a checksum mismatch fails.
//
// # Why an interpreter of its own
//
// Of the Go Jinja engines, github.com/nikolalohinski/gonja/v2 was tried on
// these templates. It parses and renders their plain text, but its tojson
// sorts keys, drops the spaces after ',' and ':' and escapes '<' as
// \u003c, it prints booleans as True and lists in Python's repr, it has no
// raise_exception, and a Go map cannot carry a schema's key order into it —
// each of which changes the Qwen3 tools prompt. Patching all of that would
// have meant forking it. The subset chat templates use is small, so the
// package has its own lexer, parser (to an AST) and evaluator, organised as
// the JS port is, whose source (data/hf/hf-jinja/src after
// scripts/fetch-hf-refs.sh) documents every rule it copies in behaviour.
package jinja
