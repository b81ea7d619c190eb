package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultDatabaseURL is the database ragtime uses when DATABASE_URL is unset.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/ragtime?sslmode=disable"

// ErrInvalidURL is what Setup's error matches when the URL is not one
// PostgreSQL (pgx) understands.
var ErrInvalidURL = errors.New("not a PostgreSQL URL")

// Setup readies the database dbURL names for ragtime: it creates it when
// missing (EnsureDatabase), connects (Open) and, when migrate is set,
// applies the migrations (Migrate). The caller closes the pool.
func Setup(ctx context.Context, dbURL string, migrate bool) (*pgxpool.Pool, error) {
	if _, err := pgx.ParseConfig(dbURL); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidURL, err)
	}
	// Bound the connection attempts (not the migrations, which may take
	// long on a big table): a server that drops packets counts as
	// unreachable rather than hanging the command.
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := EnsureDatabase(cctx, dbURL); err != nil {
		return nil, err
	}
	pool, err := Open(cctx, dbURL)
	if err != nil {
		return nil, err
	}
	if migrate {
		if err := Migrate(ctx, pool); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return pool, nil
}

// connectTimeout bounds Setup's connection attempts.
const connectTimeout = 15 * time.Second

// maintenanceDatabase is the database every PostgreSQL server has, used to
// create the target database.
const maintenanceDatabase = "postgres"

// ErrUnreachable is what an UnreachableError matches with errors.Is: no
// PostgreSQL server answered at the configured address.
var ErrUnreachable = errors.New("cannot reach PostgreSQL")

// UnreachableError says that no PostgreSQL server answered at Addr. Its
// message is one line that ends with the Hint for its error, so a CLI can
// print it as is.
type UnreachableError struct {
	// Addr is host:port (or the socket directory) that was dialled.
	Addr string
	// Err is the underlying dial error.
	Err error
}

// Error returns "cannot reach PostgreSQL at ADDR (CAUSE): HINT".
func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach PostgreSQL at %s (%s): %s", e.Addr, rootCause(e.Err), Hint(e.Err))
}

// Unwrap returns the underlying dial error.
func (e *UnreachableError) Unwrap() error { return e.Err }

// Is reports whether target is ErrUnreachable.
func (e *UnreachableError) Is(target error) bool { return target == ErrUnreachable }

// connectHints maps what went wrong connecting to the advice that fits it,
// first match wins: a server that runs but refuses the password must not be
// told to start, nor a mistyped host to start the local cluster.
var connectHints = []struct {
	match  func(error) bool
	advice func(error) string
}{
	{func(err error) bool { var d *net.DNSError; return errors.As(err, &d) },
		func(error) string {
			return "the host name does not resolve: check the host in DATABASE_URL (or --database-url), e.g. 127.0.0.1 for a local server"
		}},
	{func(err error) bool { return isPgCode(err, "28P01") || isPgCode(err, "28000") },
		func(error) string {
			return "the server runs but refused the user or password: check the user and password in DATABASE_URL (or --database-url), or the server's pg_hba.conf"
		}},
	{func(err error) bool { return isPgCode(err, "3D000") },
		func(error) string {
			return "the server runs but the database does not exist: create it (createdb NAME) or name an existing one in DATABASE_URL (or --database-url)"
		}},
	{func(err error) bool { return isPgCode(err, "42501") },
		func(error) string {
			return "the server runs but this user may not create the database: create it as a superuser (createdb NAME) or name an existing one in DATABASE_URL"
		}},
	{func(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) },
		func(err error) string {
			if !dialledLocal(err) {
				return "nothing listens at that host and port: check the port in DATABASE_URL (or --database-url) and that the server runs there"
			}
			want := dialledPort(err)
			if ports := LocalPorts(want); len(ports) > 0 {
				says := "names another"
				if want > 0 {
					says = fmt.Sprintf("says %d", want)
				}
				return fmt.Sprintf("a PostgreSQL answers on port %s of this machine, DATABASE_URL (or --database-url) %s: put port %d in it, or start the server meant for the port it names",
					joinPorts(ports), says, ports[0])
			}
			if versions, rerr := os.ReadDir("/etc/postgresql"); rerr == nil && len(versions) > 0 {
				return fmt.Sprintf("nothing listens there: start the local cluster with `pg_ctlcluster --skip-systemctl-redirect %s main start`, or if PostgreSQL runs on another port or host, set DATABASE_URL",
					versions[len(versions)-1].Name())
			}
			return "nothing listens there: start PostgreSQL (`docker compose up -d postgres`, or `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`), or if it runs on another port or host, set DATABASE_URL"
		}},
	{func(err error) bool {
		return pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
	},
		func(error) string {
			return "no answer in time: check the host and port in DATABASE_URL (or --database-url) and any firewall between"
		}},
}

// Hint returns the advice that fits a failed connection's error (unknown
// host, refused connection, wrong password, missing database, timeout),
// or a general one naming DATABASE_URL.
func Hint(err error) string {
	for _, h := range connectHints {
		if h.match(err) {
			return h.advice(err)
		}
	}
	return "check DATABASE_URL (or --database-url) and that PostgreSQL runs there"
}

// dialledLocal reports whether err's dial went to this machine: a loopback
// address or a Unix socket, where starting the local cluster is the fix.
func dialledLocal(err error) bool {
	var op *net.OpError
	if !errors.As(err, &op) || op.Addr == nil {
		return true // pgx names no address: the usual case is the local default
	}
	switch a := op.Addr.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	host, _, serr := net.SplitHostPort(op.Addr.String())
	if serr != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}

// dialledPort is the port err's dial went to (a TCP port, or the number
// in a Unix socket's .s.PGSQL.N name), 0 when err does not say.
func dialledPort(err error) int {
	var op *net.OpError
	if !errors.As(err, &op) || op.Addr == nil {
		return 0
	}
	if a, ok := op.Addr.(*net.TCPAddr); ok {
		return a.Port
	}
	_, n, ok := strings.Cut(filepath.Base(op.Addr.String()), ".s.PGSQL.")
	if !ok {
		return 0
	}
	p, _ := strconv.Atoi(n)
	return p
}

// Where PostgreSQL listens on a machine by default: Debian's and the
// upstream socket directories, and the ports clusters are given one
// after another (pg_createcluster starts at 5432).
var (
	socketDirs = []string{"/var/run/postgresql", "/tmp"}
	tcpPorts   = []int{5432, 5433, 5434, 5435, 5436, 5437, 5438, 5439}
)

// LocalPorts lists, in ascending order, the ports other than skip on which
// a PostgreSQL answers on this machine: the .s.PGSQL.N sockets of its
// socket directories and the ports 5432–5439 of 127.0.0.1, each counted
// only when a server there answers PostgreSQL's SSL request (so neither a
// stale socket file nor another service passes). It is for hints: a
// database URL naming the wrong port of a running server. The probes run
// at once and take at most about 0.6 s; their answer is kept for a few
// seconds, since an error's message (and so its hint) may be asked for
// again and again while PostgreSQL stays away.
func LocalPorts(skip int) []int {
	localPortsMu.Lock()
	defer localPortsMu.Unlock()
	if time.Since(localPortsAt) > localPortsTTL {
		localPortsFound, localPortsAt = probeLocalPorts(), time.Now()
	}
	var out []int
	for _, p := range localPortsFound {
		if p != skip {
			out = append(out, p)
		}
	}
	return out
}

const localPortsTTL = 5 * time.Second

var (
	localPortsMu    sync.Mutex
	localPortsAt    time.Time
	localPortsFound []int
)

// probeLocalPorts is LocalPorts without the cache and the skip.
func probeLocalPorts() []int {
	type probe struct {
		port          int
		network, addr string
	}
	var probes []probe
	for _, dir := range socketDirs {
		names, _ := filepath.Glob(filepath.Join(dir, ".s.PGSQL.*"))
		for _, name := range names {
			if p, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(name), ".s.PGSQL.")); err == nil {
				probes = append(probes, probe{p, "unix", name})
			}
		}
	}
	for _, p := range tcpPorts {
		probes = append(probes, probe{p, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))})
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	found := map[int]bool{}
	for _, pr := range probes {
		wg.Go(func() {
			if answersPostgres(pr.network, pr.addr) {
				mu.Lock()
				found[pr.port] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return slices.Sorted(maps.Keys(found))
}

// answersPostgres reports whether a PostgreSQL server answers at addr: it
// sends the SSLRequest message, to which a server replies with one byte,
// 'S' or 'N', and hangs up.
func answersPostgres(network, addr string) bool {
	conn, err := net.DialTimeout(network, addr, 300*time.Millisecond)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(300 * time.Millisecond))
	// Length 8, then the SSLRequest code 80877103 (1234 << 16 | 5679).
	if _, err := conn.Write([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}); err != nil {
		return false
	}
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return false
	}
	return b[0] == 'S' || b[0] == 'N'
}

// joinPorts is "5433" or "5433 and 5434" or "5433, 5434 and 5435".
func joinPorts(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	if len(s) == 1 {
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// Address says which database pool reads, as host:port/dbname (the host
// may be a socket directory), with neither user nor password: for a
// command to name what it read.
func Address(pool *pgxpool.Pool) string {
	c := pool.Config().ConnConfig
	return net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port))) + "/" + c.Database
}

// RedactURL returns databaseURL with its password replaced by "xxxxx", for
// logs and error messages. Strings that are not URLs (key=value connection
// strings) have their password=... value replaced.
func RedactURL(databaseURL string) string {
	u, err := url.Parse(databaseURL)
	if err == nil && u.Scheme != "" {
		if u.User != nil {
			if _, has := u.User.Password(); has {
				u.User = url.UserPassword(u.User.Username(), "xxxxx")
			}
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	fields := strings.Fields(databaseURL)
	for i, f := range fields {
		if strings.HasPrefix(f, "password=") {
			fields[i] = "password=xxxxx"
		}
	}
	return strings.Join(fields, " ")
}

// Open connects a pool to databaseURL and checks that the database answers.
// An unreachable server yields an *UnreachableError.
func Open(ctx context.Context, databaseURL string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, connectError(cfg.ConnConfig, err)
	}
	return pool, nil
}

// EnsureDatabase creates the database databaseURL names when it does not
// exist yet, by connecting to the "postgres" maintenance database on the same
// server, so that a fresh server works without manual setup. It is
// idempotent and safe when several processes call it at once. An unreachable
// server yields an *UnreachableError.
func EnsureDatabase(ctx context.Context, databaseURL string) error {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("parse database url: %w", err)
	}
	name := cfg.Database
	if name == "" {
		name = cfg.User
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		return conn.Close(ctx)
	}
	if !isPgCode(err, "3D000") { // invalid_catalog_name: the database does not exist
		return connectError(cfg, err)
	}

	mcfg := cfg.Copy()
	mcfg.Database = maintenanceDatabase
	mconn, err := pgx.ConnectConfig(ctx, mcfg)
	if err != nil {
		return connectError(mcfg, err)
	}
	defer mconn.Close(context.WithoutCancel(ctx))

	var exists bool
	if err := mconn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("look up database %q: %w", name, err)
	}
	if exists {
		return nil
	}
	_, err = mconn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	// 42P04 duplicate_database, 23505 unique_violation: another process
	// created it between our check and our CREATE.
	if err != nil && !isPgCode(err, "42P04") && !isPgCode(err, "23505") {
		return fmt.Errorf("create database %q: %w; %s", name, err, Hint(err))
	}
	return nil
}

// connectError turns a failed connection attempt into an *UnreachableError
// when no server answered, and otherwise into an error naming the server and
// database (never the password).
func connectError(cfg *pgx.ConnConfig, err error) error {
	addr := serverAddr(cfg)
	if isUnreachable(err) {
		return &UnreachableError{Addr: addr, Err: err}
	}
	return fmt.Errorf("connect to PostgreSQL at %s, database %q: %w; %s", addr, cfg.Database, err, Hint(err))
}

// serverAddr is host:port, or the socket path for a Unix socket.
func serverAddr(cfg *pgx.ConnConfig) string {
	if filepath.IsAbs(cfg.Host) {
		return filepath.Join(cfg.Host, ".s.PGSQL."+strconv.Itoa(int(cfg.Port)))
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// isUnreachable reports whether err means no server answered: a failed dial,
// an unknown host, or a connection attempt that timed out.
func isUnreachable(err error) bool {
	var opErr *net.OpError
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return false
	}
	return pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded)
}

// isPgCode reports whether err carries the PostgreSQL SQLSTATE code.
func isPgCode(err error, code string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code
}

// rootCause returns the dial error's message when there is one (it names
// the address and the reason), else the innermost error's, on one line.
func rootCause(err error) string {
	if err == nil {
		return "no error"
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return strings.ReplaceAll(opErr.Error(), "\n", " ")
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return strings.ReplaceAll(dnsErr.Error(), "\n", " ")
	}
	for {
		next := errors.Unwrap(err)
		if next == nil {
			break
		}
		err = next
	}
	return strings.ReplaceAll(err.Error(), "\n", " ")
}
