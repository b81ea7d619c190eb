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
// line from RAGTIME_<FLAG> (upper case, dashes as underscores), then from
// the --config file when the flag set has one. The standard flag package has
// no environment fallback, and the few lines here keep the precedence (flag,
// then variable, then file, then default) explicit.
func parseFlags(fs *flag.FlagSet, env *environment, args []string) error {
	_, err := parseFlagSources(fs, env, args)
	return err
}

// Where a flag's value came from, as `ragtime config` shows it.
const (
	fromFlag    = "flag"
	fromDefault = "default"
)

// parseFlagSources is parseFlags that also reports, per flag name, where
// its value came from: "flag", "env NAME", "file PATH" or "default".
func parseFlagSources(fs *flag.FlagSet, env *environment, args []string) (map[string]string, error) {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil, err
		}
		return nil, &usageError{msg: err.Error()}
	}
	sources := map[string]string{}
	fs.Visit(func(f *flag.Flag) { sources[f.Name] = fromFlag })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if sources[f.Name] != "" || err != nil {
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
			return
		}
		sources[f.Name] = "env " + name
	})
	if err != nil {
		return nil, err
	}
	if cf := fs.Lookup("config"); cf != nil && cf.Value.String() != "" {
		path := cf.Value.String()
		values, err := loadConfigFile(path)
		if err != nil {
			return nil, err
		}
		for name, v := range values {
			f := fs.Lookup(name)
			if f == nil || sources[name] != "" {
				continue // not this command's flag, or set by flag or variable
			}
			if e := fs.Set(name, v); e != nil {
				return nil, &usageError{msg: fmt.Sprintf("--config %s: %s: %v", path, configKeyOf(name), e)}
			}
			sources[name] = "file " + path
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if sources[f.Name] == "" {
			sources[f.Name] = fromDefault
		}
	})
	return sources, nil
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
