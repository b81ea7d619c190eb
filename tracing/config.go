package tracing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// The OTLP protocols ragtime exports with (OTEL_EXPORTER_OTLP_PROTOCOL's
// values; http/json is not offered by the Go exporters).
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// DefaultQueueSize bounds the finished queries waiting for their spans to be
// built and handed to the batching span processor.
const DefaultQueueSize = 4096

// ServiceName is the service.name of ragtime's spans unless
// OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) says
// otherwise.
const ServiceName = "ragtime"

// Config chooses where traces go. The zero value reads everything from the
// standard OTEL_* variables.
type Config struct {
	// EndpointFrom says where Endpoint came from, for the start-up line and
	// `ragtime config` ("flag", "env RAGTIME_OTLP_ENDPOINT", "file PATH");
	// empty reads "flag".
	EndpointFrom string
	// Endpoint is serve's --otlp-endpoint: the base URL of an OTLP receiver,
	// such as http://127.0.0.1:4318 (HTTP; /v1/traces is added when the URL
	// has no path) or http://127.0.0.1:4317 (gRPC); https means TLS. It
	// overrides OTEL_EXPORTER_OTLP_ENDPOINT and
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT. Empty: those variables decide, and
	// without them (and without OTEL_TRACES_EXPORTER=otlp) tracing is off.
	Endpoint string
	// Protocol is --otlp-protocol: grpc or http/protobuf. Empty reads
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, then OTEL_EXPORTER_OTLP_PROTOCOL,
	// then takes the specification's default, http/protobuf.
	Protocol string
	// ServiceVersion is the resource's service.version.
	ServiceVersion string
	// QueueSize bounds the finished queries waiting for their spans to be
	// built (0: DefaultQueueSize); past it a query's spans are dropped and
	// counted.
	QueueSize int
	// Getenv reads the OTEL_* variables that decide whether tracing is on and
	// with which protocol (nil: none set). The exporters and the SDK read
	// the rest of them from the process environment themselves.
	Getenv func(string) string
	// Logger receives the SDK's errors (an unreachable receiver, a refused
	// export); nil discards them.
	Logger *slog.Logger
}

// Setup builds the Tracer that Config describes, or returns nil (and no
// error) when tracing is not configured or is turned off by
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none. Nothing is dialled:
// an unreachable receiver shows up as logged export errors and in Stats,
// never as a failure here or a delay to an answer.
//
// Setup installs its provider and the W3C trace-context propagator as
// OpenTelemetry's globals, which is how ragtime's outbound calls (upstream,
// the Qdrant client) find them. Shutdown flushes and undoes nothing else.
func Setup(ctx context.Context, cfg Config) (*Tracer, error) {
	return setup(ctx, cfg, true)
}

// setup is Setup; globals says whether to install the provider and the
// propagator as OpenTelemetry's globals.
func setup(ctx context.Context, cfg Config, globals bool) (*Tracer, error) {
	target, err := Resolve(cfg)
	if err != nil || target.Endpoint == "" {
		return nil, err
	}
	exporter, err := newExporter(ctx, cfg.Endpoint, target.Protocol)
	if err != nil {
		return nil, err
	}
	res, err := newResource(ctx, cfg.ServiceVersion)
	if err != nil {
		return nil, err
	}
	if globals && cfg.Logger != nil {
		log := cfg.Logger
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			log.Warn("OpenTelemetry trace export failed", "err", err)
		}))
	}
	t := newTracer(exporter, res, cfg.QueueSize)
	t.target = target
	if globals {
		otel.SetTracerProvider(t.provider)
		otel.SetTextMapPropagator(Propagator)
	}
	return t, nil
}

// Target is where the traces go and which setting said so.
type Target struct {
	// Endpoint is the URL the exporter sends to (credentials redacted);
	// empty when tracing is off.
	Endpoint string
	// EndpointFrom is the setting that chose it: Config.EndpointFrom,
	// "env OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "env
	// OTEL_EXPORTER_OTLP_ENDPOINT" or "default (OTEL_TRACES_EXPORTER=otlp)";
	// when tracing is off, why.
	EndpointFrom string
	// Protocol is grpc or http/protobuf; ProtocolFrom the setting that
	// chose it ("default" when none did).
	Protocol, ProtocolFrom string
}

// Resolve reads cfg and the OTEL_* variables as Setup does and says where
// the traces will go: the flag's endpoint, else
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, else
// OTEL_EXPORTER_OTLP_ENDPOINT (with /v1/traces added over HTTP), else, with
// OTEL_TRACES_EXPORTER=otlp alone, the specification's default. The
// endpoint is empty when tracing is off.
func Resolve(cfg Config) (Target, error) {
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return Target{EndpointFrom: "off: env OTEL_SDK_DISABLED=true"}, nil
	}
	exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	switch exp {
	case "none":
		return Target{EndpointFrom: "off: env OTEL_TRACES_EXPORTER=none"}, nil
	case "", "otlp":
	default:
		return Target{}, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: ragtime exports traces over OTLP only (otlp, or none to turn tracing off)", exp)
	}
	var t Target
	var err error
	if t.Protocol, t.ProtocolFrom, err = chooseProtocol(cfg.Protocol, getenv); err != nil {
		return Target{}, err
	}
	traces, all := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")), strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	switch {
	case cfg.Endpoint != "":
		u, err := ParseEndpoint(cfg.Endpoint)
		if err != nil {
			return Target{}, err
		}
		if t.Protocol == ProtocolHTTP && (u.Path == "" || u.Path == "/") {
			u.Path = "/v1/traces"
		}
		t.Endpoint, t.EndpointFrom = u.String(), cmp.Or(cfg.EndpointFrom, "flag")
	case traces != "":
		t.Endpoint, t.EndpointFrom = redact(traces), "env OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	case all != "":
		t.Endpoint, t.EndpointFrom = redact(all), "env OTEL_EXPORTER_OTLP_ENDPOINT"
		if t.Protocol == ProtocolHTTP {
			t.Endpoint = strings.TrimSuffix(t.Endpoint, "/") + "/v1/traces"
		}
	case exp == "otlp":
		t.Endpoint, t.EndpointFrom = "http://localhost:4318/v1/traces", "default (env OTEL_TRACES_EXPORTER=otlp)"
		if t.Protocol == ProtocolGRPC {
			t.Endpoint = "http://localhost:4317"
		}
	default:
		return Target{EndpointFrom: "off: no --otlp-endpoint nor OTEL_EXPORTER_OTLP_ENDPOINT"}, nil
	}
	return t, nil
}

// redact hides the password of a URL from the environment; what does not
// parse is not shown at all.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(not a URL)"
	}
	return u.Redacted()
}

// newResource describes the service: service.name ragtime and the version,
// unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise.
func newResource(ctx context.Context, version string) (*resource.Resource, error) {
	kv := []attribute.KeyValue{semconv.ServiceName(ServiceName)}
	if version != "" {
		kv = append(kv, semconv.ServiceVersion(version))
	}
	res, err := resource.New(ctx, resource.WithAttributes(kv...), resource.WithTelemetrySDK(),
		// Last, so OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win.
		resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("reading OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return res, nil
}

// Propagator is the W3C Trace Context (traceparent, tracestate) and
// Baggage propagator, the specification's default OTEL_PROPAGATORS.
var Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// chooseProtocol is the flag's protocol, else the variables', else
// http/protobuf, and which of them chose it.
func chooseProtocol(flag string, getenv func(string) string) (protocol, from string, err error) {
	source, p := "--otlp-protocol", flag
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p == "" {
			source, p = name, getenv(name)
		}
	}
	switch p = strings.TrimSpace(p); p {
	case "":
		return ProtocolHTTP, "default", nil
	case ProtocolGRPC, ProtocolHTTP:
		if source != "--otlp-protocol" {
			source = "env " + source
		}
		return p, source, nil
	default:
		return "", "", fmt.Errorf("%s=%q: want grpc or http/protobuf (http/json is not supported)", source, p)
	}
}

// newExporter builds the OTLP exporter for protocol; a non-empty endpoint
// (the flag) overrides the variables, which the exporter reads itself.
func newExporter(ctx context.Context, endpoint, protocol string) (sdktrace.SpanExporter, error) {
	var u *url.URL
	if endpoint != "" {
		var err error
		if u, err = ParseEndpoint(endpoint); err != nil {
			return nil, err
		}
	}
	if protocol == ProtocolGRPC {
		var opts []otlptracegrpc.Option
		if u != nil {
			opts = append(opts, otlptracegrpc.WithEndpointURL(u.String()))
		}
		exp, err := otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("creating the OTLP gRPC trace exporter: %w", err)
		}
		return exp, nil
	}
	var opts []otlptracehttp.Option
	if u != nil {
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces"
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("creating the OTLP HTTP trace exporter: %w", err)
	}
	return exp, nil
}

// ParseEndpoint checks an --otlp-endpoint: an http or https URL with a host
// and nothing secret in it (headers, such as an API key, go in
// OTEL_EXPORTER_OTLP_HEADERS).
func ParseEndpoint(endpoint string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(endpoint))
	switch {
	case err != nil:
		// not echoed: the text may hold a secret
		return nil, errors.New("--otlp-endpoint is not a URL: want one such as http://127.0.0.1:4318")
	case u.User != nil:
		return nil, errors.New("--otlp-endpoint must not hold credentials: put them in OTEL_EXPORTER_OTLP_HEADERS")
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("--otlp-endpoint %q: want an http:// or https:// URL such as http://127.0.0.1:4318", u.Redacted())
	case u.Host == "":
		return nil, fmt.Errorf("--otlp-endpoint %q has no host", u.Redacted())
	case u.RawQuery != "" || u.Fragment != "":
		return nil, errors.New("--otlp-endpoint must not have a query or fragment")
	}
	return u, nil
}
