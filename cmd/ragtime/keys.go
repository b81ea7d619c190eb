package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"ragtime/auth"
	"ragtime/pipeline"
	"ragtime/postgres"
)

const keysUsage = `keys create --name NAME --scopes ask,read,documents,metrics,admin [flags]
       ragtime keys list
       ragtime keys revoke ID|PREFIX`

// runKeys manages API keys: create (prints the token once), list, revoke.
func runKeys(ctx context.Context, env *environment, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintf(env.stdout, "Usage: ragtime %s\n\nRun `ragtime keys create -h` for create's flags; docs/auth.md explains keys.\n", keysUsage)
		if len(args) == 0 {
			return &usageError{msg: "keys needs a subcommand: create, list or revoke"}
		}
		return nil
	}
	switch args[0] {
	case "create":
		return runKeysCreate(ctx, env, args[1:])
	case "list":
		return runKeysList(ctx, env, args[1:])
	case "revoke":
		return runKeysRevoke(ctx, env, args[1:])
	}
	return &usageError{msg: unknownName("keys subcommand", args[0], []string{"create", "list", "revoke"}) + "; want create, list or revoke"}
}

// filterFlag is the repeatable --filter: doc_id=ID[,ID...] or
// metadata.KEY=VALUE.
type filterFlag struct{ f pipeline.Filter }

func (f *filterFlag) String() string {
	var parts []string
	if len(f.f.DocIDs) > 0 {
		parts = append(parts, "doc_id="+strings.Join(f.f.DocIDs, ","))
	}
	for _, k := range slices.Sorted(maps.Keys(f.f.Metadata)) {
		parts = append(parts, "metadata."+k+"="+f.f.Metadata[k])
	}
	return strings.Join(parts, " ")
}

func (f *filterFlag) Set(v string) error {
	name, value, ok := strings.Cut(v, "=")
	name, value = strings.TrimSpace(name), strings.TrimSpace(value)
	switch {
	case !ok || value == "":
		return fmt.Errorf("want doc_id=ID[,ID...] or metadata.KEY=VALUE, got %q", v)
	case name == "doc_id":
		for _, id := range strings.Split(value, ",") {
			if id = strings.TrimSpace(id); id != "" && !slices.Contains(f.f.DocIDs, id) {
				f.f.DocIDs = append(f.f.DocIDs, id)
			}
		}
	case strings.HasPrefix(name, "metadata.") && len(name) > len("metadata."):
		if f.f.Metadata == nil {
			f.f.Metadata = map[string]string{}
		}
		f.f.Metadata[strings.TrimPrefix(name, "metadata.")] = value
	default:
		return fmt.Errorf("want doc_id=ID[,ID...] or metadata.KEY=VALUE, got %q", v)
	}
	return nil
}

// expiryFlag is --expires: an age (90d, 36h) or an RFC 3339 time.
type expiryFlag struct {
	raw string
	age time.Duration
	at  time.Time
}

func (e *expiryFlag) String() string { return e.raw }

func (e *expiryFlag) Set(v string) error {
	e.raw = v
	if t, err := time.Parse(time.RFC3339, strings.TrimSpace(v)); err == nil {
		e.at = t
		return nil
	}
	d, err := parseAge(v)
	if err != nil {
		return fmt.Errorf("want an age such as 90d or 36h, or an RFC 3339 time, got %q", v)
	}
	e.age = d
	return nil
}

func (e *expiryFlag) time(now time.Time) time.Time {
	if e.age > 0 {
		return now.Add(e.age)
	}
	return e.at
}

func runKeysCreate(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "keys create", "keys create --name NAME --scopes ask,read,documents,metrics,admin [flags]")
	var db dbConfig
	db.register(fs)
	name := fs.String("name", "", "what the key is for, shown by `keys list` (required)")
	kindRaw := fs.String("kind", "secret", "secret (Authorization: Bearer, from servers; any scopes) or publishable (scope ask only, from browsers on --origins; may come as ?key=)")
	scopesRaw := fs.String("scopes", "", "comma-separated: ask (/ask), read (its own queries and stats), documents (add, list, delete documents), metrics (GET /metrics only, for a Prometheus scraper), admin (everything, every caller's queries, /metrics); required")
	var origins listFlag
	fs.Var(&origins, "origins", "comma-separated browser origins (https://app.example.com) the key may be used from; required for publishable keys")
	rateRaw := fs.String("rate", "", "asks allowed per period, e.g. 60/min, 5/s, 1000/hour (publishable keys default to 60/min; secret keys: no per-key rate)")
	concurrency := fs.Int("concurrency", 0, "streams the key may hold open at once (0: no per-key limit)")
	var models listFlag
	fs.Var(&models, "models", "comma-separated models the key may ask for (default: any the server allows)")
	var filter filterFlag
	fs.Var(&filter, "filter", "tenant filter, repeatable: doc_id=ID[,ID...] or metadata.KEY=VALUE; every search made with the key is restricted to it, whatever the request asks")
	ttftBudget := fs.Int("ttft-budget", 0, fmt.Sprintf("ttft_budget_ms, in milliseconds, of an ask made with the key that gives none; it wins over serve's --ttft-budget-ms (0: serve's; at most %d; docs/ttft.md)", pipeline.MaxTTFTBudgetMs))
	var expires expiryFlag
	fs.Var(&expires, "expires", "when the key stops working: an age (90d, 36h) or an RFC 3339 time (default: never)")
	if err := parseFlags(fs, env, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &usageError{msg: fmt.Sprintf("keys create takes only flags, got %q", fs.Arg(0))}
	}
	kind, err := auth.ParseKind(*kindRaw)
	if err != nil {
		return &usageError{msg: "--kind: " + err.Error()}
	}
	if *scopesRaw == "" && kind == auth.Publishable {
		*scopesRaw = string(auth.ScopeAsk)
	}
	if *scopesRaw == "" {
		return &usageError{msg: "--scopes is required: a comma-separated list of ask, read, documents, metrics, admin"}
	}
	scopes, err := auth.ParseScopes(*scopesRaw)
	if err != nil {
		return &usageError{msg: "--scopes: " + err.Error()}
	}
	rate, err := auth.ParseRate(*rateRaw)
	if err != nil {
		return &usageError{msg: "--rate: " + err.Error()}
	}
	if rate.N == 0 && kind == auth.Publishable {
		rate = auth.DefaultPublishableRate
	}
	now := time.Now()
	k := auth.Key{
		Name: strings.TrimSpace(*name), Kind: kind, Scopes: scopes, Rate: rate, Concurrency: *concurrency,
		Models: models, Filter: filter.f, ExpiresAt: expires.time(now), TTFTBudgetMs: *ttftBudget,
	}
	for _, o := range origins {
		k.Origins = append(k.Origins, auth.NormalizeOrigin(o))
	}
	if !k.ExpiresAt.IsZero() && !k.ExpiresAt.After(now) {
		return &usageError{msg: fmt.Sprintf("--expires %s is in the past", expires.raw)}
	}
	if err := k.Validate(); err != nil {
		return &usageError{msg: err.Error()}
	}
	token, prefix, hash, err := auth.NewToken(kind)
	if err != nil {
		return err
	}
	k.Prefix, k.Hash = prefix, hash

	pool, err := db.open(ctx, true)
	if err != nil {
		return err
	}
	defer pool.Close()
	k, err = postgres.NewKeys(pool).Create(ctx, k)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "created %s key %q: id %s, prefix %s, scopes %s\n", k.Kind, k.Name, k.ID, k.Prefix, scopeList(k.Scopes))
	fmt.Fprintf(env.stdout, "\n  %s\n\n", token)
	fmt.Fprintln(env.stdout, "This is the only time the key is shown: ragtime stores only its prefix and SHA-256. Keep it in a secret store.")
	if kind == auth.Publishable {
		fmt.Fprintf(env.stdout, "Browsers on %s may send it as ?key= (EventSource) or Authorization: Bearer; %s asks.\n", strings.Join(k.Origins, ", "), k.Rate)
	} else {
		fmt.Fprintln(env.stdout, "Send it as: Authorization: Bearer <key>")
	}
	if k.TTFTBudgetMs > 0 {
		fmt.Fprintf(env.stdout, "Its asks that give no ttft_budget_ms get %d ms (over serve's --ttft-budget-ms).\n", k.TTFTBudgetMs)
	}
	fmt.Fprintln(env.stdout, "A running serve picks it up within a few seconds.")
	return nil
}

func runKeysList(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "keys list", "keys list [flags]")
	var db dbConfig
	db.register(fs)
	if err := parseFlags(fs, env, args); err != nil {
		return err
	}
	pool, err := db.open(ctx, true)
	if err != nil {
		return err
	}
	defer pool.Close()
	keys, err := postgres.NewKeys(pool).LoadKeys(ctx)
	if err != nil {
		return err
	}
	where := postgres.Address(pool)
	if len(keys) == 0 {
		fmt.Fprintln(env.stdout, "no API keys in "+where+": serve runs open on a loopback address and refuses other addresses without --insecure-no-auth; create one with `ragtime keys create`")
		return nil
	}
	fmt.Fprintf(env.stdout, "%d API keys in %s:\n", len(keys), where)
	now := time.Now()
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPREFIX\tNAME\tKIND\tSCOPES\tSTATE\tLAST USED\tLIMITS\tORIGINS\tMODELS\tFILTER")
	for _, k := range keys {
		state := "active"
		switch {
		case !k.RevokedAt.IsZero():
			state = "revoked " + k.RevokedAt.Local().Format("2006-01-02 15:04")
		case !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt):
			state = "expired " + k.ExpiresAt.Local().Format("2006-01-02 15:04")
		case !k.ExpiresAt.IsZero():
			state = "expires " + k.ExpiresAt.Local().Format("2006-01-02 15:04")
		}
		used := "never"
		if !k.LastUsedAt.IsZero() {
			used = k.LastUsedAt.Local().Format("2006-01-02 15:04:05")
		}
		var limits []string
		if k.Rate.N > 0 {
			limits = append(limits, k.Rate.String())
		}
		if k.Concurrency > 0 {
			limits = append(limits, fmt.Sprintf("%d at once", k.Concurrency))
		}
		if k.TTFTBudgetMs > 0 {
			limits = append(limits, fmt.Sprintf("ttft budget %d ms", k.TTFTBudgetMs))
		}
		f := filterFlag{f: k.Filter}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Prefix, k.Name, k.Kind, scopeList(k.Scopes),
			state, used, dash(strings.Join(limits, ", ")), dash(strings.Join(k.Origins, ",")), dash(strings.Join(k.Models, ",")), dash(f.String()))
	}
	return tw.Flush()
}

func runKeysRevoke(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "keys revoke", "keys revoke ID|PREFIX [flags]")
	var db dbConfig
	db.register(fs)
	if err := parseFlags(fs, env, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &usageError{msg: "keys revoke takes one key id or prefix, as `ragtime keys list` shows"}
	}
	pool, err := db.open(ctx, true)
	if err != nil {
		return err
	}
	defer pool.Close()
	k, err := postgres.NewKeys(pool).Revoke(ctx, fs.Arg(0))
	if errors.Is(err, postgres.ErrKeyNotFound) {
		return &usageError{msg: err.Error()}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "revoked %s key %q (%s, id %s) at %s; a running serve refuses it within a few seconds\n",
		k.Kind, k.Name, k.Prefix, k.ID, k.RevokedAt.Local().Format(time.RFC3339))
	return nil
}

func scopeList(s []auth.Scope) string {
	parts := make([]string, len(s))
	for i, x := range s {
		parts[i] = string(x)
	}
	return strings.Join(parts, ",")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
