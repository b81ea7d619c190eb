package main

import (
	"context"
	"fmt"
)

func runMigrate(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "migrate", "migrate [flags]")
	var db dbConfig
	db.register(fs)
	if err := parseFlags(fs, env, args); err != nil {
		return err
	}
	pool, err := db.open(ctx, true)
	if err != nil {
		return err
	}
	pool.Close()
	fmt.Fprintln(env.stdout, "migrations applied")
	return nil
}
