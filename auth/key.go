package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"ragtime/pipeline"
)

// Scope is what a key may do.
type Scope string

// The scopes. Admin implies every other.
const (
	// ScopeAsk: GET/POST /ask.
	ScopeAsk Scope = "ask"
	// ScopeRead: /v1/queries, /v1/queries/:id, /v1/stats (the key's own
	// queries unless it is admin).
	ScopeRead Scope = "read"
	// ScopeDocuments: list, add and delete documents.
	ScopeDocuments Scope = "documents"
	// ScopeMetrics: GET /metrics and nothing else, for a Prometheus
	// scraper (the figures of every caller, never their questions).
	ScopeMetrics Scope = "metrics"
	// ScopeAdmin: everything, every caller's queries, /metrics and the
	// details of /readyz.
	ScopeAdmin Scope = "admin"
)

// Scopes lists every scope in the order they are shown.
var Scopes = []Scope{ScopeAsk, ScopeRead, ScopeDocuments, ScopeMetrics, ScopeAdmin}

// ParseScopes reads a comma-separated list such as "ask,read".
func ParseScopes(s string) ([]Scope, error) {
	var out []Scope
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(strings.ToLower(part))
		if part == "" {
			continue
		}
		sc := Scope(part)
		if !slices.Contains(Scopes, sc) {
			return nil, fmt.Errorf("unknown scope %q; known: ask, read, documents, metrics, admin", part)
		}
		if !slices.Contains(out, sc) {
			out = append(out, sc)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("at least one scope is needed: ask, read, documents, metrics or admin")
	}
	return out, nil
}

// Kind is secret or publishable.
type Kind string

// The key kinds.
const (
	// Secret keys go in "Authorization: Bearer" from servers; any scopes.
	Secret Kind = "secret"
	// Publishable keys may sit in a browser: scope ask only, allowed
	// origins required, accepted as ?key= too.
	Publishable Kind = "publishable"
)

// ParseKind reads "secret" or "publishable".
func ParseKind(s string) (Kind, error) {
	switch k := Kind(strings.ToLower(strings.TrimSpace(s))); k {
	case Secret, Publishable:
		return k, nil
	}
	return "", fmt.Errorf("want secret or publishable, got %q", s)
}

// Rate is a number of asks per period; the zero Rate is no limit.
type Rate struct {
	N   int
	Per time.Duration
}

// ParseRate reads "60/min", "10/s", "1000/hour" or "" (no limit).
func ParseRate(s string) (Rate, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Rate{}, nil
	}
	n, unit, ok := strings.Cut(s, "/")
	if !ok {
		return Rate{}, fmt.Errorf("want a rate such as 60/min, 5/s or 1000/hour, got %q", s)
	}
	count, err := strconv.Atoi(strings.TrimSpace(n))
	if err != nil || count < 1 {
		return Rate{}, fmt.Errorf("the count of %q must be a whole number of at least 1", s)
	}
	var per time.Duration
	switch strings.ToLower(strings.TrimSpace(unit)) {
	case "s", "sec", "second":
		per = time.Second
	case "m", "min", "minute":
		per = time.Minute
	case "h", "hour":
		per = time.Hour
	case "d", "day":
		per = 24 * time.Hour
	default:
		return Rate{}, fmt.Errorf("the period of %q must be s, min, hour or day", s)
	}
	return Rate{N: count, Per: per}, nil
}

// Set makes *Rate a flag.Value (serve's --rate): ParseRate, with "0" and
// "off" also meaning no limit.
func (r *Rate) Set(s string) error {
	if v := strings.ToLower(strings.TrimSpace(s)); v == "0" || v == "off" {
		*r = Rate{}
		return nil
	}
	v, err := ParseRate(s)
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// String is the rate as ParseRate reads it, or "" for no limit.
func (r Rate) String() string {
	switch r.Per {
	case 0:
		return ""
	case time.Second:
		return fmt.Sprintf("%d/s", r.N)
	case time.Minute:
		return fmt.Sprintf("%d/min", r.N)
	case time.Hour:
		return fmt.Sprintf("%d/hour", r.N)
	case 24 * time.Hour:
		return fmt.Sprintf("%d/day", r.N)
	}
	return fmt.Sprintf("%d/%s", r.N, r.Per)
}

// DefaultPublishableRate applies to a publishable key created without
// --rate: a key sitting in a web page must be limited.
var DefaultPublishableRate = Rate{N: 60, Per: time.Minute}

// Key is one API key as stored: everything but the secret.
type Key struct {
	ID   string
	Name string
	Kind Kind
	// Prefix is the token's public part (rt_sk_xxxxxxxxxxxx), which
	// identifies the key in lists and logs.
	Prefix string
	// Hash is the SHA-256 of the whole token. Never shown or logged.
	Hash   [32]byte
	Scopes []Scope
	// Origins are the browser origins (scheme://host[:port]) the key may be
	// used from; required for publishable keys.
	Origins []string
	// Rate bounds asks per period; zero is no per-key limit.
	Rate Rate
	// Concurrency bounds the key's streams at once; 0 is no per-key limit.
	Concurrency int
	// Models, when not empty, are the only models the key may ask for.
	Models []string
	// Filter restricts every search made with the key (tenant isolation).
	Filter pipeline.Filter
	// TTFTBudgetMs is the ttft_budget_ms of an ask made with the key that
	// gives none, over serve's --ttft-budget-ms; 0 is serve's default.
	TTFTBudgetMs int
	CreatedAt    time.Time
	// ExpiresAt, RevokedAt and LastUsedAt are zero when not set.
	ExpiresAt  time.Time
	RevokedAt  time.Time
	LastUsedAt time.Time
}

// Has reports whether the key grants scope s; admin grants all.
func (k *Key) Has(s Scope) bool {
	return slices.Contains(k.Scopes, s) || slices.Contains(k.Scopes, ScopeAdmin)
}

// Tenant reports whether the key carries a document filter.
func (k *Key) Tenant() bool { return len(k.Filter.DocIDs) > 0 || len(k.Filter.Metadata) > 0 }

// Validate checks the rules a key must follow before it is stored, naming
// the flag to change.
func (k *Key) Validate() error {
	if strings.TrimSpace(k.Name) == "" {
		return errors.New("--name is required")
	}
	if len(k.Scopes) == 0 {
		return errors.New("--scopes is required: ask, read, documents, metrics, admin (comma-separated)")
	}
	for _, o := range k.Origins {
		if err := ValidateOrigin(o); err != nil {
			return fmt.Errorf("--origins: %w", err)
		}
	}
	if k.Kind == Publishable {
		if len(k.Scopes) != 1 || k.Scopes[0] != ScopeAsk {
			return errors.New("a publishable key may only have --scopes ask: it sits in web pages anyone can read")
		}
		if len(k.Origins) == 0 {
			return errors.New("a publishable key needs --origins (the web origins allowed to use it, e.g. https://app.example.com)")
		}
	}
	if k.Tenant() && (k.Has(ScopeDocuments) || k.Has(ScopeMetrics) || k.Has(ScopeAdmin)) {
		return errors.New("a key with --filter is a tenant's key: it may have scopes ask and read, not documents, metrics or admin")
	}
	if k.Concurrency < 0 {
		return fmt.Errorf("--concurrency must be 0 (no per-key limit) or more, got %d", k.Concurrency)
	}
	if k.TTFTBudgetMs < 0 || k.TTFTBudgetMs > pipeline.MaxTTFTBudgetMs {
		return fmt.Errorf("--ttft-budget must be 0 (serve's default) or at most %d milliseconds, got %d", pipeline.MaxTTFTBudgetMs, k.TTFTBudgetMs)
	}
	for _, m := range k.Models {
		if m == "" || len(m) > 200 {
			return fmt.Errorf("--models: %q is not a model name", m)
		}
	}
	return nil
}

// ValidateOrigin checks that o is a web origin: scheme://host[:port], with
// no path, query or wildcard.
func ValidateOrigin(o string) error {
	u, err := url.Parse(o)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return fmt.Errorf("%q is not an origin: want scheme://host[:port], e.g. https://app.example.com", o)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q: the scheme must be http or https", o)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("%q is not an origin: it must have no path, query or user, just scheme://host[:port]", o)
	}
	if strings.Contains(u.Host, "*") {
		return fmt.Errorf("%q: wildcards are not allowed; list each origin", o)
	}
	return nil
}

// NormalizeOrigin is o as browsers send it in Origin: lower case, without a
// trailing slash.
func NormalizeOrigin(o string) string { return strings.TrimSuffix(strings.ToLower(o), "/") }

// Token shapes.
const (
	secretPrefix      = "rt_sk_"
	publishablePrefix = "rt_pk_"
	publicLen         = 12 // characters after rt_sk_ that identify the key
	secretBytes       = 32
	// TokenLen is the length of every token.
	TokenLen = len(secretPrefix) + publicLen + 1 + 43
)

const publicAlphabet = "abcdefghijklmnopqrstuvwxyz234567"

// NewToken makes a token of kind: its public prefix, the token itself and
// the hash to store. The token is shown once and never kept.
func NewToken(kind Kind) (token, prefix string, hash [32]byte, err error) {
	head := secretPrefix
	if kind == Publishable {
		head = publishablePrefix
	}
	pub := make([]byte, publicLen)
	if _, err := rand.Read(pub); err != nil {
		return "", "", hash, fmt.Errorf("reading random bytes: %w", err)
	}
	for i, b := range pub {
		pub[i] = publicAlphabet[int(b)%len(publicAlphabet)]
	}
	secret := make([]byte, secretBytes)
	if _, err := rand.Read(secret); err != nil {
		return "", "", hash, fmt.Errorf("reading random bytes: %w", err)
	}
	prefix = head + string(pub)
	token = prefix + "_" + base64.RawURLEncoding.EncodeToString(secret)
	return token, prefix, HashToken(token), nil
}

// HashToken is the SHA-256 of a token, as stored.
func HashToken(token string) [32]byte { return sha256.Sum256([]byte(token)) }

// splitToken returns the token's prefix when it has a token's shape.
func splitToken(token string) (prefix string, ok bool) {
	if len(token) != TokenLen || (!strings.HasPrefix(token, secretPrefix) && !strings.HasPrefix(token, publishablePrefix)) {
		return "", false
	}
	prefix = token[:len(secretPrefix)+publicLen]
	if token[len(prefix)] != '_' {
		return "", false
	}
	for _, c := range prefix[len(secretPrefix):] {
		if !strings.ContainsRune(publicAlphabet, c) {
			return "", false
		}
	}
	if _, err := base64.RawURLEncoding.DecodeString(token[len(prefix)+1:]); err != nil {
		return "", false
	}
	return prefix, true
}

// KindOfPrefix is the kind a token or prefix names by its start.
func KindOfPrefix(s string) Kind {
	if strings.HasPrefix(s, publishablePrefix) {
		return Publishable
	}
	return Secret
}

// LooksLikePrefix reports whether s is a key prefix (rt_sk_ or rt_pk_ and
// twelve characters), as `ragtime keys revoke` accepts.
func LooksLikePrefix(s string) bool {
	if len(s) != len(secretPrefix)+publicLen || (!strings.HasPrefix(s, secretPrefix) && !strings.HasPrefix(s, publishablePrefix)) {
		return false
	}
	for _, c := range s[len(secretPrefix):] {
		if !strings.ContainsRune(publicAlphabet, c) {
			return false
		}
	}
	return true
}
