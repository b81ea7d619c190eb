package sweep

import (
	"strings"
	"testing"
)

func TestParamsCheckNamesTheFlag(t *testing.T) {
	t.Parallel()
	ok := Params{Runs: 1, Concurrency: 1, MaxTokens: 16, RecallTolerance: 0.02}
	if err := ok.Check(); err != nil {
		t.Fatalf("valid params: %v", err)
	}
	for want, mod := range map[string]func(*Params){
		"--runs":             func(p *Params) { p.Runs = 0 },
		"--concurrency":      func(p *Params) { p.Concurrency = 0 },
		"--recall-tolerance": func(p *Params) { p.RecallTolerance = 1.5 },
		"--ttft-budget-ms":   func(p *Params) { p.TTFTBudgetMs = -1 },
		"--max-tokens":       func(p *Params) { p.MaxTokens = 0 },
	} {
		p := ok
		mod(&p)
		if err := p.Check(); err == nil || !strings.HasPrefix(err.Error(), want+" must be") {
			t.Errorf("%s out of range: %v", want, err)
		}
	}
}

func TestCheckQuestionsNamesFileAndLine(t *testing.T) {
	t.Parallel()
	qs := []Question{{Text: "What is prefill?", Line: 1}, {Text: "bad\x00", Line: 7}}
	if err := CheckQuestions("q.jsonl", qs); err == nil || !strings.HasPrefix(err.Error(), "q.jsonl:7: ") {
		t.Fatalf("a question with NUL on line 7: %v", err)
	}
	if err := CheckQuestions("q.jsonl", qs[:1]); err != nil {
		t.Fatalf("a valid question: %v", err)
	}
}
