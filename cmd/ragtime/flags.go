package main

import (
	"flag"
	"fmt"
	"strings"
)

// newFlagSet returns a flag set that reports errors instead of exiting and
// prints its usage with the command's summary.
func newFlagSet(env *environment, name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet("ragtime "+name, flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	fs.Usage = func() {
		fmt.Fprintf(env.stderr, "Usage: ragtime %s\n\nFlags (each also read from RAGTIME_<FLAG>):\n", usage)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args, then fills every flag not given on the command
// line from RAGTIME_<FLAG> (upper case, dashes as underscores). The
// standard flag package has no environment fallback, and the few lines here
// keep the precedence (flag, then variable, then default) explicit.
func parseFlags(fs *flag.FlagSet, env *environment, args []string) error {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return &usageError{msg: err.Error()}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		name := envName(f.Name)
		v := env.getenv(name)
		if v == "" && f.Name == "database-url" {
			name, v = "DATABASE_URL", env.getenv("DATABASE_URL")
		}
		if v == "" {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = &usageError{msg: fmt.Sprintf("%s=%q: %v", name, v, e)}
		}
	})
	return err
}

// envName is the environment variable behind a flag.
func envName(flagName string) string {
	return "RAGTIME_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// listFlag is a comma-separated list flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	*l = nil
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}
