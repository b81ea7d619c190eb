package pipeline

import (
	"context"
	"time"
)

type arrivalKey struct{}

// WithArrival returns ctx carrying when the request arrived: when its first
// byte reached the connection (the api package reads the kernel's receive
// stamp where there is one, else the time of the first read). The pipeline
// then starts its clock there and times the wait before Run as the accept
// stage, so TTFT covers what the client waited for.
func WithArrival(ctx context.Context, at time.Time) context.Context {
	return context.WithValue(ctx, arrivalKey{}, at)
}

// ArrivalFrom returns the arrival carried by ctx, or the zero time.
func ArrivalFrom(ctx context.Context) time.Time {
	at, _ := ctx.Value(arrivalKey{}).(time.Time)
	return at
}
