package sweep

import "ragtime/eval"

// Question is one question of a sweep: a line of a qrels file, with the ids
// of the documents that answer it (empty when no relevance is known).
type Question = eval.Question

// LoadQuestions reads the questions file (JSONL or TSV), as eval.Load
// describes; a bad line is an error naming the file and the line.
func LoadQuestions(path string) ([]Question, error) { return eval.Load(path) }
