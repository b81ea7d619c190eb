package auth

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Caller is who a request is made by: the key it carried, or nobody, and
// the client's address. Admission limits are kept per Caller.ID.
type Caller struct {
	// Key is the request's key; nil when it carried none.
	Key *Key
	// IP is the client's address (no port; an IPv6 client's /64).
	IP string
	// Open is set when the server runs without keys (no key was ever
	// created): the caller may do everything.
	Open bool
}

// ID identifies the caller for per-caller limits: "key:<id>" for a secret
// key, "key:<id>@ip:<address>" for a publishable key (one key sits in every
// visitor's browser: each visitor gets the key's limits, so one cannot use
// up everyone's), else "ip:<address>". Never a secret.
func (c Caller) ID() string {
	switch {
	case c.Key == nil:
		return "ip:" + c.IP
	case c.Key.Kind == Publishable:
		return "key:" + c.Key.ID + "@ip:" + c.IP
	}
	return "key:" + c.Key.ID
}

// KeyID is the id of the caller's key, or "".
func (c Caller) KeyID() string {
	if c.Key == nil {
		return ""
	}
	return c.Key.ID
}

// Limits are the caller's own rate and concurrency (zero: none of its own).
func (c Caller) Limits() (Rate, int) {
	if c.Key == nil {
		return Rate{}, 0
	}
	return c.Key.Rate, c.Key.Concurrency
}

// Can reports whether the caller has scope s.
func (c Caller) Can(s Scope) bool { return c.Open || (c.Key != nil && c.Key.Has(s)) }

// Admin reports whether the caller sees everything: every caller's
// queries, /metrics, the details of /readyz.
func (c Caller) Admin() bool { return c.Can(ScopeAdmin) }

// Authorize checks that the caller may use an endpoint needing scope from
// the given Origin header ("" when the request has none).
func (c Caller) Authorize(scope Scope, origin string) error {
	if c.Open {
		return nil
	}
	if c.Key == nil {
		return ErrMissing
	}
	if !c.Key.Has(scope) {
		return fmt.Errorf("%w: key %s (%q) has scopes %s; this endpoint needs %s",
			ErrScope, c.Key.Prefix, c.Key.Name, joinScopes(c.Key.Scopes), scope)
	}
	if c.Key.Kind == Publishable || len(c.Key.Origins) > 0 {
		if origin == "" {
			return fmt.Errorf("%w: key %s may only be used from %s, and the request has no Origin header",
				ErrOrigin, c.Key.Prefix, strings.Join(c.Key.Origins, ", "))
		}
		if !slices.Contains(c.Key.Origins, NormalizeOrigin(origin)) {
			return fmt.Errorf("%w: key %s may only be used from %s, not %.100q",
				ErrOrigin, c.Key.Prefix, strings.Join(c.Key.Origins, ", "), origin)
		}
	}
	return nil
}

// AllowModel checks the model a request asks for ("" is the server's
// default, always allowed) against the server's allow-list and the key's:
// when both are set, the model must be in both.
func (c Caller) AllowModel(model string, serverAllowed []string) error {
	if model == "" {
		return nil
	}
	if len(serverAllowed) > 0 && !slices.Contains(serverAllowed, model) {
		return fmt.Errorf("%w: %.200q is not one of the server's --allowed-models: %s",
			ErrModel, model, strings.Join(serverAllowed, ", "))
	}
	if c.Key != nil && len(c.Key.Models) > 0 && !slices.Contains(c.Key.Models, model) {
		return fmt.Errorf("%w: key %s may use only %s, not %.200q",
			ErrModel, c.Key.Prefix, strings.Join(c.Key.Models, ", "), model)
	}
	return nil
}

func joinScopes(s []Scope) string {
	parts := make([]string, len(s))
	for i, x := range s {
		parts[i] = string(x)
	}
	return strings.Join(parts, ",")
}

type callerKey struct{}

// WithCaller returns ctx carrying c.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the caller ctx carries, and whether it carries one.
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}
