package lexical

import "math/rand/v2"

// SyntheticCorpus calls each with n chunks of 150 words drawn from a Zipf
// (s = 1.07) vocabulary of 40,000 made-up words, and returns 64 queries of five
// words drawn the same way, less the 50 most frequent (which stand for the
// stop words the analyzer drops), deterministically: the corpus of the lexical and hybrid retrieval
// benchmarks.
func SyntheticCorpus(n int, each func(words []string)) [][]string {
	r := rand.New(rand.NewPCG(1, 2))
	vocab := make([]string, 40_000)
	for i := range vocab {
		vocab[i] = syntheticWord(i)
	}
	z := rand.NewZipf(r, 1.07, 1, uint64(len(vocab)-1))
	words := make([]string, 150)
	for range n {
		for j := range words {
			words[j] = vocab[z.Uint64()]
		}
		each(words)
	}
	queries := make([][]string, 64)
	for i := range queries {
		for len(queries[i]) < 5 {
			if w := z.Uint64(); w >= 50 {
				queries[i] = append(queries[i], vocab[w])
			}
		}
	}
	return queries
}

// syntheticWord spells i in letters (so the stemmer sees words).
func syntheticWord(i int) string {
	const letters = "bcdfghjklmnprstvz"
	const vowels = "aeiou"
	var b []byte
	for i++; i > 0; i /= len(letters) * len(vowels) {
		b = append(b, letters[i%len(letters)], vowels[(i/len(letters))%len(vowels)])
	}
	return string(b)
}
