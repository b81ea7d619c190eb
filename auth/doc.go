// Package auth holds ragtime's API keys and the caller a request is made by.
//
// A key is either a secret key (rt_sk_…, sent as "Authorization: Bearer",
// server to server, any scopes) or a publishable key (rt_pk_…, scope ask
// only, usable from a browser on the origins it lists, also as ?key= because
// EventSource cannot set headers) — the split Stripe makes between its sk_
// and pk_ keys. A key may carry a document filter that every search it makes
// is intersected with (tenant isolation, after Algolia's secured API keys), a
// model allow-list, a rate and a concurrency limit, and an expiry.
//
// A token is "rt_sk_" or "rt_pk_", twelve public characters that identify the
// key (its prefix, shown by `ragtime keys list`), "_" and 32 random bytes in
// base64url. Only the prefix and the SHA-256 of the whole token are stored:
// the secret has 256 bits of entropy, so a fast hash cannot be reversed by
// guessing, and a slow one (bcrypt, argon2) would only add milliseconds to
// every request (docs/auth.md argues this in full).
//
// The Keyring holds every key in memory, reloaded from the store every few
// seconds, so a request's key check is a map lookup plus one SHA-256 and a
// constant-time comparison — against a dummy hash when the prefix is unknown,
// so a failed check takes the same time whether the prefix exists or not —
// and keeps working while Postgres is away.
package auth
