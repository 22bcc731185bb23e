// Package swarm serves one trainable model per swarm server: it exposes the
// model through an OpenAI-compatible chat-completions endpoint, hands each
// episode its own API key, takes the episode's reward when it ends, and trains
// the model with package rl once enough episodes are finished. Its wire
// protocol is that of AgentJet's swarm mode, so existing clients work
// unchanged. The client side drives workflows across several servers and
// reports to each model its own reward.
package swarm
