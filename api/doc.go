// Package api holds troupe's wire types: the JSON bodies of OpenAI's chat
// completions (messages, tools, requests, responses, streamed chunks,
// log-probabilities, usage) and of AgentJet's swarm protocol (claim, end
// and abort requests and their answers, the engine status), and the
// episode record the swarm journal stores. The server (package swarm and
// package openai), the Go client (swarm/client) and the models all speak
// these types, and none of them import each other for them.
//
// Fields that a server must tell missing from zero are pointers, as the
// pydantic models of AgentJet's server declare them optional.
package api
