package main

import (
	"fmt"

	"ragtime"
	"ragtime/pipeline"
)

// lexicalLeg is what a store offers a hybrid or lexical retrieval: the
// embedded store's in-process BM25 index (lex), or a store that runs both
// legs itself (hybrid: Qdrant's sparse vectors), whose data may lack the
// leg (a collection created before it). serve and sweep read it the same
// way, through defaults and check.
type lexicalLeg struct {
	lex    pipeline.LexicalSearcher
	hybrid pipeline.HybridSearcher
}

func lexicalLegOf(store any) lexicalLeg {
	var l lexicalLeg
	l.lex, _ = store.(pipeline.LexicalSearcher)
	if l.lex == nil {
		l.hybrid, _ = store.(pipeline.HybridSearcher)
	}
	return l
}

// has says the store has a lexical leg at all.
func (l lexicalLeg) has() bool { return l.lex != nil || l.hybrid != nil }

// missing says why the store's data cannot answer a hybrid or lexical
// retrieval now (nil when it can, or it is not known yet).
func (l lexicalLeg) missing() error {
	if l.hybrid == nil {
		return nil
	}
	return l.hybrid.LexicalMissing()
}

// defaultMode is the retrieval of an ask that names none when the
// command's --retrieval is unset: hybrid when the leg is there and its
// data has it, vector otherwise.
func (l lexicalLeg) defaultMode() string {
	if l.has() && l.missing() == nil {
		return ragtime.RetrievalHybrid
	}
	return ragtime.RetrievalVector
}

// apply sets d's lexical fields: whether the leg exists, and the check a
// hybrid or lexical ask passes first (a 400 naming the fix when the data
// lacks the leg).
func (l lexicalLeg) apply(d *pipeline.Defaults) {
	d.Lexical = l.has()
	if l.hybrid != nil {
		d.LexicalMissing = l.hybrid.LexicalMissing
	}
}

// check refuses a command configured for a retrieval (flag names it) that
// the store cannot run: no lexical leg, or data without it.
func (l lexicalLeg) check(flag, mode, storeName string) error {
	if mode == "" || mode == ragtime.RetrievalVector {
		return nil
	}
	if !l.has() {
		return &usageError{msg: fmt.Sprintf("%s %s needs a store with a lexical leg; --store %s has only vectors", flag, mode, storeName)}
	}
	if err := l.missing(); err != nil {
		return &usageError{msg: fmt.Sprintf("%s %s: %s", flag, mode, err)}
	}
	return nil
}
