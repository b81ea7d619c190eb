// Package load is an open-loop load generator for OpenAI-compatible chat
// servers on this machine, made for llmsim: Poisson arrivals of a mix of
// prompt lengths, optionally behind shared prefixes, bounded in count, time
// and requests in flight.
//
// It reports TTFT percentiles (overall and per prompt length, as the client
// saw them and as the server modelled them) and the share of prompt tokens
// served from the prefix cache, the figures of llmsim's experiments.
package load
