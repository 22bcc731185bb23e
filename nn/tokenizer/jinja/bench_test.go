package jinja

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkRenderChat renders Meta's Llama 3.2 template (tools in the user
// message, a tool call and its result) with a parsed template, the way a
// server renders every request.
func BenchmarkRenderChat(b *testing.B) {
	src, err := os.ReadFile(filepath.Join("testdata", "llama3.2-instruct.jinja"))
	if err != nil {
		b.Fatal(err)
	}
	tpl, err := Parse(string(src))
	if err != nil {
		b.Fatal(err)
	}
	var conv conversation
	for _, c := range conversations {
		if c.name == "tool call with object arguments" {
			conv = c
		}
	}
	in := ChatInput{AddGenerationPrompt: true, BOSToken: "<|begin_of_text|>", Extra: map[string]any{"date_string": "26 Jul 2024"}}
	for _, m := range mustJSON(b, conv.messages).([]any) {
		in.Messages = append(in.Messages, shallowGo(m.(*Map)))
	}
	for _, tool := range mustJSON(b, toolsJSON).([]any) {
		in.Tools = append(in.Tools, shallowGo(tool.(*Map)))
	}
	var n int
	for b.Loop() {
		out, err := tpl.RenderChat(in)
		if err != nil {
			b.Fatal(err)
		}
		n = len(out)
	}
	b.ReportMetric(float64(n), "bytes/render")
}

// BenchmarkParse parses the same template.
func BenchmarkParse(b *testing.B) {
	src, err := os.ReadFile(filepath.Join("testdata", "llama3.2-instruct.jinja"))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Parse(string(src)); err != nil {
			b.Fatal(err)
		}
	}
}
