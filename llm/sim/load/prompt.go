package load

import (
	"errors"
	"math/rand/v2"
	"strings"

	"ragtime/llm/tokens"
)

// commonWords are candidates for prompt text; promptGen keeps those that are
// exactly one token with a leading space, so a prompt of n words is n tokens.
var commonWords = strings.Fields(`time year people way day man thing woman life child world school state family
student group country problem hand part place case week company system program question work government number
night point home water room mother area money story fact month lot right study book eye job word business issue
side kind head house service friend father power hour game line end member law car city community name president
team minute idea kid body information back parent face others level office door health person art war history
party result change morning reason research girl guy moment air teacher force education foot boy age policy process
music market sense nation plan college interest death experience effect use class control care field development
role effort rate heart drug show leader light voice wife police mind price report decision son view relationship
town road arm difference value building action model season society tax director position player record paper
space ground form event official matter center couple site project activity star table need court oil situation
cost industry figure street image phone data picture practice piece land product doctor wall patient worker news
test movie north love support technology step baby computer type attention film tree source organization hair
window evidence population truth song energy letter garden river summer memory disease brother army sound green
stone glass paper cloud signal bridge engine token cache model prompt query answer server client stream vector`)

// promptGen writes prompts of an exact token length.
type promptGen struct {
	words []string
}

func newPromptGen(counter *tokens.Counter) (*promptGen, error) {
	var words []string
	for _, w := range commonWords {
		if counter.Count(" "+w) == 1 {
			words = append(words, w)
		}
	}
	if len(words) < 64 {
		return nil, errors.New("the tokenizer splits too many common words to size prompts exactly")
	}
	return &promptGen{words: words}, nil
}

// text returns n tokens of words drawn with seed: " w w w ...". Distinct
// seeds give distinct texts (a shared prefix-cache block between two of them
// has a chance of about 1 in 64^16).
func (g *promptGen) text(n int, seed uint64) string {
	r := rand.New(rand.NewPCG(seed, 0x7e47))
	var b strings.Builder
	b.Grow(n * 7)
	for range n {
		b.WriteByte(' ')
		b.WriteString(g.words[r.IntN(len(g.words))])
	}
	return b.String()
}
