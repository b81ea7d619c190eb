package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// newFlagSet returns a flag set that reports errors instead of exiting and
// prints its usage with the command's summary.
func newFlagSet(env *environment, name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet("ragtime "+name, flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: ragtime %s\n\nFlags (each also read from RAGTIME_<FLAG>):\n", usage)
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
	// A mistake gets one line naming the flag, not the whole flag list: the
	// flag package prints its error and the usage to the output, so parse
	// quietly and print the usage only when it was asked for.
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(out)
	if err != nil {
		if err == flag.ErrHelp {
			fs.Usage()
			return nil, err
		}
		return nil, &usageError{msg: parseErrorMessage(fs, err)}
	}
	sources := map[string]string{}
	fs.Visit(func(f *flag.Flag) { sources[f.Name] = fromFlag })
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
			err = &usageError{msg: fmt.Sprintf("%s=%q (--%s): %v", name, v, f.Name, valueError(f, e))}
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
				return nil, &usageError{msg: fmt.Sprintf("--config %s: %s: %v", path, configKeyOf(name), valueError(f, e))}
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

// valueError says what a flag's value should look like when the flag
// package's own error is its bare "parse error" or "invalid syntax".
func valueError(f *flag.Flag, err error) error {
	g, ok := f.Value.(flag.Getter)
	if !ok || !(strings.Contains(err.Error(), "parse error") || strings.Contains(err.Error(), "invalid syntax") ||
		strings.Contains(err.Error(), "out of range")) {
		return err
	}
	switch g.Get().(type) {
	case time.Duration:
		return errors.New("want a duration such as 500ms, 30s, 1m or 2h")
	case bool:
		return errors.New("want true or false")
	case int, int64, uint, uint64:
		return errors.New("want a whole number")
	case float64:
		return errors.New("want a number")
	}
	return err
}

// parseErrorMessage rewords the flag package's parse errors for a person:
// an unknown flag gets the closest known name, and every message points at
// -h for the full list.
func parseErrorMessage(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	const unknown = "flag provided but not defined: -"
	if name, ok := strings.CutPrefix(msg, unknown); ok {
		msg = fmt.Sprintf("unknown flag --%s", name)
		if near := closestFlag(fs, name); near != "" {
			msg += fmt.Sprintf(" (did you mean --%s?)", near)
		}
	} else if f, rest, ok := strings.Cut(msg, ": "); ok && strings.HasPrefix(f, "invalid ") {
		// "invalid value "x" for flag -n: parse error": say what n wants.
		if i := strings.LastIndex(f, " -"); i >= 0 {
			if fl := fs.Lookup(f[i+2:]); fl != nil {
				msg = fmt.Sprintf("%s: %v", strings.Replace(f, " -"+fl.Name, " --"+fl.Name, 1), valueError(fl, errors.New(rest)))
			}
		}
	}
	return fmt.Sprintf("%s; `%s -h` lists the flags", msg, fs.Name())
}

// closestFlag is the defined flag nearest to name (closestName), or "".
func closestFlag(fs *flag.FlagSet, name string) string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return closestName(name, names)
}

// closestName is the one of names nearest to name by edit distance (at
// most 2, or a prefix match of at least 3 characters), or "": the "did you
// mean" of a mistyped flag or command. Hand-written: a dozen lines do not
// justify a dependency.
func closestName(name string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		d := editDistance(name, n)
		if strings.HasPrefix(n, name) && len(name) >= 3 {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
