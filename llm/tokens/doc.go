// Package tokens counts, encodes and decodes text with a real BPE tokenizer
// (tiktoken-go, o200k_base by default, BPE files embedded so nothing is
// downloaded at run time).
//
// It is the one token counter ragtime uses: the assemble stage trims context
// with it and the llmsim simulator prices prefill with it, so both agree.
package tokens
