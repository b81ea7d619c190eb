package chart_test

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const chartDir = "../ragtime"

// rendered is one release's objects, decoded strictly by kind.
type rendered struct {
	deployment     *appsv1.Deployment
	service        *corev1.Service
	configMap      *corev1.ConfigMap
	secret         *corev1.Secret
	hpa            *autoscalingv2.HorizontalPodAutoscaler
	job            *batchv1.Job
	serviceMonitor *monitoringv1.ServiceMonitor
	kinds          []string
}

// render renders the chart for the release "prod" with vals over the
// chart's values.yaml and decodes every document: an unknown field, a
// misspelt key or a wrong type fails the test.
func render(t *testing.T, vals map[string]any) (*rendered, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = chartutil.KubeVersion{Version: "v1.31.0", Major: "1", Minor: "31"}
	values, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "prod", Namespace: "rag", IsInstall: true}, caps)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(ch, values)
	if err != nil {
		return nil, err
	}
	out := &rendered{}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, doc := range strings.Split(files[name], "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var meta struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s: %v\n%s", name, err, doc)
			}
			var target any
			switch meta.APIVersion + "/" + meta.Kind {
			case "apps/v1/Deployment":
				out.deployment = &appsv1.Deployment{}
				target = out.deployment
			case "v1/Service":
				out.service = &corev1.Service{}
				target = out.service
			case "v1/ConfigMap":
				out.configMap = &corev1.ConfigMap{}
				target = out.configMap
			case "v1/Secret":
				out.secret = &corev1.Secret{}
				target = out.secret
			case "autoscaling/v2/HorizontalPodAutoscaler":
				out.hpa = &autoscalingv2.HorizontalPodAutoscaler{}
				target = out.hpa
			case "batch/v1/Job":
				out.job = &batchv1.Job{}
				target = out.job
			case "monitoring.coreos.com/v1/ServiceMonitor":
				out.serviceMonitor = &monitoringv1.ServiceMonitor{}
				target = out.serviceMonitor
			default:
				t.Fatalf("%s renders %s %s, which this test does not decode", name, meta.APIVersion, meta.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), target); err != nil {
				t.Fatalf("%s: strict decode of %s: %v\n%s", name, meta.Kind, err, doc)
			}
			out.kinds = append(out.kinds, meta.Kind)
		}
	}
	return out, nil
}

func mustRender(t *testing.T, vals map[string]any) *rendered {
	t.Helper()
	r, err := render(t, vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return r
}

func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q", name)
	return corev1.Container{}
}

func argAfter(args []string, flag string) (string, bool) {
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		return "", false
	}
	return args[i+1], true
}

// checkRelease asserts what every value set must hold: probes, the grace
// period against --shutdown-timeout, Secret references, the migration hook.
func checkRelease(t *testing.T, r *rendered, secretName string, shutdown time.Duration, preStop int64) {
	t.Helper()
	d := r.deployment
	if d == nil || r.service == nil || r.configMap == nil || r.job == nil {
		t.Fatalf("rendered %v: want a Deployment, a Service, a ConfigMap and a migration Job", r.kinds)
	}
	pod := d.Spec.Template.Spec
	c := container(t, pod, "ragtime")
	if c.Args[0] != "serve" {
		t.Errorf("container args %v do not run serve", c.Args)
	}
	var httpPort int32
	for _, p := range c.Ports {
		if p.Name == "http" {
			httpPort = p.ContainerPort
		}
	}
	if addr, _ := argAfter(c.Args, "--addr"); addr != ":"+strconv.Itoa(int(httpPort)) || httpPort == 0 {
		t.Errorf("--addr %q vs container port http %d", addr, httpPort)
	}

	rp, lp := c.ReadinessProbe, c.LivenessProbe
	if rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/readyz" || rp.HTTPGet.Port.String() != "http" {
		t.Errorf("readiness probe %+v: want GET /readyz on port http", rp)
	}
	if lp == nil || lp.HTTPGet == nil || lp.HTTPGet.Path != "/healthz" || lp.HTTPGet.Port.String() != "http" {
		t.Errorf("liveness probe %+v: want GET /healthz on port http", lp)
	}
	if lp != nil && rp != nil && lp.FailureThreshold*lp.PeriodSeconds <= rp.FailureThreshold*rp.PeriodSeconds {
		t.Errorf("liveness gives up after %d s, readiness after %d s: a slow pod must leave the Service before it is killed",
			lp.FailureThreshold*lp.PeriodSeconds, rp.FailureThreshold*rp.PeriodSeconds)
	}

	// Graceful termination: the kubelet must wait for the preStop sleep,
	// the streams (--shutdown-timeout) and the recorder's 10 s flush.
	arg, ok := argAfter(c.Args, "--shutdown-timeout")
	got, err := time.ParseDuration(arg)
	if !ok || err != nil || got != shutdown {
		t.Errorf("--shutdown-timeout %q (%v), want %s", arg, err, shutdown)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds != preStop {
		t.Errorf("preStop %+v: want a %d s sleep", c.Lifecycle, preStop)
	}
	const recorderFlush = 10 * time.Second
	need := time.Duration(preStop)*time.Second + shutdown + recorderFlush
	if g := pod.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= need {
		t.Errorf("terminationGracePeriodSeconds %v: want more than preStop %d s + --shutdown-timeout %s + flush %s = %s", g, preStop, shutdown, recorderFlush, need)
	}

	// Config: the ConfigMap's file is what --config names.
	if cf, _ := argAfter(c.Args, "--config"); cf != "/etc/ragtime/ragtime.json" {
		t.Errorf("--config %q", cf)
	}
	var mounted bool
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == r.configMap.Name && m.MountPath == "/etc/ragtime" {
				mounted = true
			}
		}
	}
	if !mounted || r.configMap.Data["ragtime.json"] == "" {
		t.Errorf("the ConfigMap %s with ragtime.json is not mounted at /etc/ragtime", r.configMap.Name)
	}

	// Secrets only through secretKeyRef to the named Secret, and a key it
	// holds when the chart makes it; never a literal value.
	refs := map[string]string{}
	for _, ctr := range append(slices.Clone(pod.Containers), r.job.Spec.Template.Spec.Containers...) {
		for _, e := range ctr.Env {
			if strings.Contains(strings.ToUpper(e.Name), "KEY") && !strings.HasSuffix(e.Name, "_ENV") || e.Name == "DATABASE_URL" {
				if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					t.Errorf("%s: %s is not read from a Secret", ctr.Name, e.Name)
					continue
				}
				ref := e.ValueFrom.SecretKeyRef
				if ref.Name != secretName {
					t.Errorf("%s: %s refers to Secret %q, want %q", ctr.Name, e.Name, ref.Name, secretName)
				}
				refs[ctr.Name+"/"+e.Name] = ref.Key
				if r.secret != nil {
					if _, ok := r.secret.StringData[ref.Key]; !ok {
						t.Errorf("%s: %s refers to key %q, not in the Secret (has %v)", ctr.Name, e.Name, ref.Key, slices.Sorted(maps.Keys(r.secret.StringData)))
					}
				}
			}
		}
	}
	if refs["ragtime/DATABASE_URL"] == "" || refs["migrate/DATABASE_URL"] == "" {
		t.Errorf("DATABASE_URL references %v: want both the pods and the migration Job", refs)
	}

	// The migration Job runs `ragtime migrate` before install and upgrade,
	// after the Secret it reads (a hook of lower weight).
	j := r.job
	jc := container(t, j.Spec.Template.Spec, "migrate")
	if !slices.Equal(jc.Args, []string{"migrate"}) || jc.Image != c.Image || j.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("migration job runs %v on %s (serve on %s), restart %s", jc.Args, jc.Image, c.Image, j.Spec.Template.Spec.RestartPolicy)
	}
	if j.Annotations["helm.sh/hook"] != "pre-install,pre-upgrade" {
		t.Errorf("migration job hook %q", j.Annotations["helm.sh/hook"])
	}
	if r.secret != nil {
		sw, _ := strconv.Atoi(r.secret.Annotations["helm.sh/hook-weight"])
		jw, _ := strconv.Atoi(j.Annotations["helm.sh/hook-weight"])
		if !strings.Contains(r.secret.Annotations["helm.sh/hook"], "pre-install") || sw >= jw {
			t.Errorf("Secret hook %q weight %d, job weight %d: the Secret must exist before the job runs", r.secret.Annotations["helm.sh/hook"], sw, jw)
		}
	}

	// The Service selects the pods and names the container port.
	for k, v := range r.service.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("Service selector %s=%s does not match the pod labels %v", k, v, d.Spec.Template.Labels)
		}
	}
	if len(r.service.Spec.Ports) != 1 || r.service.Spec.Ports[0].TargetPort.String() != "http" {
		t.Errorf("service ports %+v", r.service.Spec.Ports)
	}
}

var defaultSecretValues = map[string]any{"secret": map[string]any{
	"databaseURL": "postgres://ragtime:pw@pg:5432/ragtime", "llmAPIKey": "sk-test-llm", "qdrantAPIKey": "qk-test",
	"metricsToken": "rt_test_admin",
}}

func TestChartDefaults(t *testing.T) {
	t.Parallel()
	r := mustRender(t, defaultSecretValues)
	checkRelease(t, r, "prod-ragtime", 15*time.Second, 5)
	if r.secret == nil || r.secret.Name != "prod-ragtime" || r.serviceMonitor != nil {
		t.Fatalf("kinds %v: want the chart's own Secret and no ServiceMonitor by default", r.kinds)
	}
	if g := *r.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds; g != 5+15+10+5 {
		t.Errorf("grace period %d, want 35 (5 preStop + 15 shutdown + 10 flush + 5 margin)", g)
	}
	if r.deployment.Spec.Replicas != nil {
		t.Errorf("replicas %d set while the HPA owns the count", *r.deployment.Spec.Replicas)
	}
	h := r.hpa
	if h == nil || h.Spec.ScaleTargetRef.Kind != "Deployment" || h.Spec.ScaleTargetRef.Name != r.deployment.Name || h.Spec.MinReplicas == nil || *h.Spec.MinReplicas != 2 || h.Spec.MaxReplicas != 20 {
		t.Fatalf("HPA %+v", h)
	}
	if len(h.Spec.Metrics) != 1 || h.Spec.Metrics[0].Resource == nil || h.Spec.Metrics[0].Resource.Name != corev1.ResourceCPU ||
		*h.Spec.Metrics[0].Resource.Target.AverageUtilization != 70 {
		t.Errorf("HPA metrics %+v: want CPU at 70%%", h.Spec.Metrics)
	}
	// The CPU target is a share of requests.cpu: without one it means nothing.
	if c := container(t, r.deployment.Spec.Template.Spec, "ragtime"); c.Resources.Requests.Cpu().IsZero() {
		t.Error("no CPU request for the HPA's utilization to be measured against")
	}
	// Keys never appear in the rendered pods, only in the Secret.
	for _, c := range r.deployment.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if strings.Contains(e.Value, "sk-test") || strings.Contains(e.Value, "pw@") {
				t.Errorf("secret value in env %s", e.Name)
			}
		}
	}
	if strings.Contains(r.configMap.Data["ragtime.json"], "sk-test") {
		t.Error("a key in the ConfigMap")
	}
	checkConfigFile(t, r, map[string]string{"qdrant-shards": "2", "qdrant-read-consistency": "majority", "llm-provider": "openai", "top-k": "8"})
}

func TestChartValueSets(t *testing.T) {
	t.Parallel()
	// An existing Secret, a ServiceMonitor, scaling on the queue too, a
	// longer drain.
	r := mustRender(t, map[string]any{
		"secret":                 map[string]any{"existingSecret": "ragtime-prod-keys", "llmAPIKey": "x", "metricsToken": "x"},
		"shutdownTimeoutSeconds": 120,
		"preStopSleepSeconds":    10,
		"serviceMonitor":         map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus"}},
		"autoscaling":            map[string]any{"queueDepth": map[string]any{"enabled": true, "averageValue": "4"}},
		"config":                 map[string]any{"qdrant": map[string]any{"shard_number": 12, "tenant_key": "tenant"}},
	})
	checkRelease(t, r, "ragtime-prod-keys", 120*time.Second, 10)
	if r.secret != nil {
		t.Error("a Secret rendered although existingSecret names one")
	}
	m := r.hpa.Spec.Metrics
	if len(m) != 2 || m[1].Type != autoscalingv2.PodsMetricSourceType || m[1].Pods.Metric.Name != "ragtime_streams_queued" || m[1].Pods.Target.AverageValue.String() != "4" {
		t.Errorf("HPA metrics %+v: want CPU and the Pods metric ragtime_streams_queued at 4", m)
	}
	sm := r.serviceMonitor
	if sm == nil || sm.Labels["release"] != "kube-prometheus" || len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("ServiceMonitor %+v", sm)
	}
	ep := sm.Spec.Endpoints[0]
	if ep.Port != r.service.Spec.Ports[0].Name || ep.Path != "/metrics" {
		t.Errorf("endpoint port %q path %q, want the Service's port %q and /metrics", ep.Port, ep.Path, r.service.Spec.Ports[0].Name)
	}
	if ep.Authorization == nil || ep.Authorization.Credentials == nil || ep.Authorization.Credentials.Name != "ragtime-prod-keys" || ep.Authorization.Credentials.Key != "metrics-token" {
		t.Errorf("endpoint authorization %+v: want the admin token from the Secret", ep.Authorization)
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if r.service.Labels[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s, the Service has %v", k, v, r.service.Labels)
		}
	}
	checkConfigFile(t, r, map[string]string{"qdrant-shards": "12", "qdrant-tenant-key": "tenant"})

	// No autoscaling: a fixed count; open mode: no scrape credentials.
	r = mustRender(t, map[string]any{"secret": map[string]any{"databaseURL": "postgres://x@pg/db"}, "replicaCount": 3,
		"autoscaling": map[string]any{"enabled": false}, "auth": map[string]any{"insecureNoAuth": true}, "serviceMonitor": map[string]any{"enabled": true}})
	checkRelease(t, r, "prod-ragtime", 15*time.Second, 5)
	if r.hpa != nil || r.deployment.Spec.Replicas == nil || *r.deployment.Spec.Replicas != 3 {
		t.Errorf("without autoscaling: hpa %v, replicas %v", r.hpa, r.deployment.Spec.Replicas)
	}
	if c := container(t, r.deployment.Spec.Template.Spec, "ragtime"); !slices.Contains(c.Args, "--insecure-no-auth") {
		t.Errorf("args %v", c.Args)
	}
	if r.serviceMonitor.Spec.Endpoints[0].Authorization != nil {
		t.Error("scrape credentials without keys")
	}
	if len(r.deployment.Spec.Template.Spec.Containers[0].Env) == 0 || r.secret.StringData["llm-api-key"] != "" {
		t.Errorf("the Secret holds keys that were not given: %v", r.secret.StringData)
	}

	// A missing database URL is refused by name.
	if _, err := render(t, nil); err == nil || !strings.Contains(err.Error(), "secret.databaseURL") {
		t.Errorf("render without a database URL: %v", err)
	}
	// A misspelt config key is caught by serve itself (strict config).
	r = mustRender(t, map[string]any{"secret": map[string]any{"databaseURL": "postgres://x@pg/db"}, "config": map[string]any{"qdrant": map[string]any{"shards": 3}}})
	if out, err := ragtimeConfig(t, r); err == nil || !strings.Contains(out, "unknown key qdrant.shards") {
		t.Errorf("ragtime config over a misspelt key: %v %s", err, out)
	}
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// ragtimeBinary builds ragtime from the repository (the main module two
// directories up) once for the package.
func ragtimeBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ragtime-chart-test")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "ragtime")
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", binPath, "./cmd/ragtime")
		cmd.Dir = "../../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/ragtime: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// ragtimeConfig runs the real `ragtime config --config FILE` over the
// ConfigMap's file with the pod's arguments and environment (no secrets).
func ragtimeConfig(t *testing.T, r *rendered) (string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ragtime.json")
	if err := os.WriteFile(path, []byte(r.configMap.Data["ragtime.json"]), 0o600); err != nil {
		t.Fatal(err)
	}
	c := container(t, r.deployment.Spec.Template.Spec, "ragtime")
	args := []string{"config"}
	for i := 1; i < len(c.Args); i++ {
		switch c.Args[i] {
		case "--config":
			args = append(args, "--config", path)
			i++
		default:
			args = append(args, c.Args[i])
		}
	}
	cmd := exec.Command(ragtimeBinary(t), args...)
	cmd.Env = []string{"HOME=" + t.TempDir()}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
		}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// checkConfigFile checks that serve accepts the rendered config file and
// reads the wanted settings from it.
func checkConfigFile(t *testing.T, r *rendered, want map[string]string) {
	t.Helper()
	out, err := ragtimeConfig(t, r)
	if err != nil {
		t.Fatalf("ragtime config over the ConfigMap's file: %v\n%s", err, out)
	}
	for setting, value := range want {
		found := false
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) >= 3 && f[0] == setting {
				found = true
				if f[1] != value || f[2] != "file" {
					t.Errorf("%s = %v, want %s from the file", setting, f[1:], value)
				}
			}
		}
		if !found {
			t.Errorf("no %s in ragtime config's output:\n%s", setting, out)
		}
	}
	// The pod's --shutdown-timeout is the one serve uses.
	c := container(t, r.deployment.Spec.Template.Spec, "ragtime")
	sd, _ := argAfter(c.Args, "--shutdown-timeout")
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "shutdown-timeout" {
			want, _ := time.ParseDuration(sd)
			got, err := time.ParseDuration(f[1])
			if err != nil || got != want || f[2] != "flag" {
				t.Errorf("serve's shutdown-timeout %v, the pod passes %s", f[1:], sd)
			}
		}
	}
}

// TestChartRedis wires the replicas to Redis: the release's own (the
// dependency, with the password from its Secret put into the URL by the
// kubelet) or an external one from the Secret; without either, no Redis.
func TestChartRedis(t *testing.T) {
	t.Parallel()
	envOf := func(r *rendered) map[string]corev1.EnvVar {
		out := map[string]corev1.EnvVar{}
		for _, e := range container(t, r.deployment.Spec.Template.Spec, "ragtime").Env {
			out[e.Name] = e
		}
		return out
	}
	db := map[string]any{"databaseURL": "postgres://x@pg/db"}
	if _, ok := envOf(mustRender(t, map[string]any{"secret": db}))["RAGTIME_REDIS_URL"]; ok {
		t.Error("RAGTIME_REDIS_URL without Redis")
	}

	r := mustRender(t, map[string]any{"secret": db, "redis": map[string]any{"enabled": true}})
	env := envOf(r)
	pw := env["REDIS_PASSWORD"]
	if pw.ValueFrom == nil || pw.ValueFrom.SecretKeyRef == nil || pw.ValueFrom.SecretKeyRef.Name != "prod-redis" || pw.ValueFrom.SecretKeyRef.Key != "redis-password" {
		t.Errorf("REDIS_PASSWORD %+v: want the Redis chart's Secret prod-redis, key redis-password", pw)
	}
	if u := env["RAGTIME_REDIS_URL"]; u.Value != "redis://:$(REDIS_PASSWORD)@prod-redis-master:6379/0" {
		t.Errorf("RAGTIME_REDIS_URL %+v", u)
	}
	var names []string
	for _, e := range container(t, r.deployment.Spec.Template.Spec, "ragtime").Env {
		names = append(names, e.Name)
	}
	if slices.Index(names, "REDIS_PASSWORD") > slices.Index(names, "RAGTIME_REDIS_URL") {
		t.Errorf("env order %v: the kubelet expands $(REDIS_PASSWORD) only when it comes first", names)
	}

	r = mustRender(t, map[string]any{"secret": map[string]any{"databaseURL": "postgres://x@pg/db", "redisURL": "redis://:s3cret@redis.shared:6379/2"}})
	u := envOf(r)["RAGTIME_REDIS_URL"]
	if u.ValueFrom == nil || u.ValueFrom.SecretKeyRef == nil || u.ValueFrom.SecretKeyRef.Key != "redis-url" || u.Value != "" {
		t.Errorf("RAGTIME_REDIS_URL %+v: want it from the Secret's redis-url", u)
	}
	if r.secret.StringData["redis-url"] != "redis://:s3cret@redis.shared:6379/2" {
		t.Errorf("the Secret's redis-url: %q", r.secret.StringData["redis-url"])
	}
	if strings.Contains(r.configMap.Data["ragtime.json"], "s3cret") {
		t.Error("the Redis password in the ConfigMap")
	}
}
